//! claimWork latency from a deep task queue against a shallow one (issue 3: "a queue with
//! 100k pending tasks claims as fast as an empty one"), in process over the store port.
//!
//! Run (embedded SQLite, no services needed):
//!   cargo bench -p blackbox --bench pending_depth
//! Run on DynamoDB (LocalStack):
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test BENCH_BACKEND=localstack \
//!   cargo bench -p blackbox --bench pending_depth
//!
//! 1. Seeds `BENCH_DEPTH` (default 100000) pending tasks into one task queue, writing the
//!    two items createTask writes for a task that nobody claimed yet: the definition (with
//!    its expiry index entry) and the status item (pending run 0, its `task-defined` and
//!    `task-pending` events in the outbox, its index entries from `TaskRecord::index_entries`),
//!    both with `NotExists` as createTask. They are copied from a template task made by a real
//!    `Queue::create_task`, with `BENCH_SEED_CONCURRENCY` (default 64) tasks in flight (each
//!    writes its two items one after the other). The task-group membership item and group
//!    counter are not written (claimWork never reads them); all seeded tasks belong to the
//!    template's group. `BENCH_OUTBOX=drained` writes the status items with an empty outbox
//!    instead, as they stand once the publisher ran.
//! 2. Seeds a second queue with exactly `BENCH_CLAIMS` (K, default 200) tasks the same way,
//!    and a third with `BENCH_WARMUP` (default 20) tasks whose claims warm connections up.
//! 3. Claims one task at a time, `try_claim_work(&tq, "g", "w", 1, now)` (one claimWork pass,
//!    as the endpoint does when work is waiting), K times from each queue, alternating
//!    deep/shallow and swapping which goes first on every round, so that machine noise hits
//!    both. Prints p50/p95/p99 per queue and, on DynamoDB, the read/write units and requests
//!    per claim from the adapter's `ReturnConsumedCapacity` counters.
//!
//! `BENCH_BACKEND=embedded|localstack` (default embedded; `localstack` needs the AWS
//! environment above). `BENCH_VERIFY=1` counts the deep queue's pending index after seeding
//! (default on for embedded; on DynamoDB the count reads the whole index, so off by default).
//! `BENCH_SEED_BATCH` (default 1) puts that many tasks (at most 50: 100 items) in one
//! transaction instead; on LocalStack, whose gateway costs most per request, 25 seeds 100k in
//! a fraction of the time. `BENCH_SEED_MAX_SECS` stops seeding the deep queue after that long (the depth reached is
//! printed and used). `BENCH_WAIT_FOR=<path>` waits after seeding until `<path>` exists, so
//! that a long seeding run can overlap other work and the claims still run on a quiet machine.

use blackbox::env_num;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use shared::creds::IssuerCredentials;
use shared::ids::{TaskId, TaskQueueId};
use shared::queue::{Queue, QueueConfig};
use shared::records::task as keys;
use shared::records::task::TaskRecord;
use shared::signal::LocalSignal;
use shared::store::dynamodb::{self, DynamoStore, Usage};
use shared::store::sqlite::SqliteStore;
use shared::store::{Cond, Item, Store, WriteOp};
use shared::time::Ts;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Default)]
struct Snap {
    rcu: f64,
    wcu: f64,
    req: u64,
}

fn snap(u: &Option<Arc<Usage>>) -> Snap {
    match u {
        Some(u) => Snap {
            rcu: u.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
            wcu: u.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
            req: u.requests.load(Ordering::Relaxed),
        },
        None => Snap::default(),
    }
}

/// The definition and status record of a real createTask, to be copied under new ids.
struct Template {
    def: Value,
    rec: TaskRecord,
}

impl Template {
    async fn make(queue: &Queue) -> Template {
        let id = TaskId::parse(&blackbox::slugid()).expect("id");
        let tq = blackbox::task_queue_id();
        let mut body = blackbox::task_def(&tq);
        // Outlives a long seeding run (an expired deadline would make tasks unclaimable).
        body["deadline"] = json!(blackbox::ts(12 * 3_600_000));
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        queue
            .create_task(&id, body, false, Ts::now())
            .await
            .expect("template task");
        let def = queue
            .store
            .get(keys::TASKS, id.as_str(), keys::SK_DEF)
            .await
            .expect("read")
            .expect("definition")
            .data
            .into_value();
        let status = queue
            .store
            .get(keys::TASKS, id.as_str(), keys::SK_STATUS)
            .await
            .expect("read")
            .expect("status");
        let rec: TaskRecord = status.data.decode().expect("record");
        assert_eq!(rec.runs.len(), 1, "the template task is pending");
        Template { def, rec }
    }

    /// The items createTask writes for a new pending task `id` in queue `tq`.
    fn items(&self, id: &str, tq: &TaskQueueId, drained: bool) -> [WriteOp; 2] {
        let mut def = self.def.clone();
        def["taskQueueId"] = json!(tq.as_str());
        def["provisionerId"] = json!(tq.provisioner_id());
        def["workerType"] = json!(tq.worker_type());
        let mut rec = self.rec.clone();
        rec.task_id = id.to_string();
        rec.task_queue_id = tq.as_str().to_string();
        rec.outbox.clear();
        rec.runs[0].scheduled = Ts::now();
        if !drained {
            rec.emit_created();
        }
        let expiry = keys::task_expiry_entry(rec.expires, id, keys::SK_DEF);
        let status = serde_json::to_value(&rec).expect("record serializes");
        [
            WriteOp::Put {
                table: keys::TASKS,
                item: Item::new(id, keys::SK_DEF, def, vec![expiry]),
                cond: Cond::NotExists,
            },
            WriteOp::Put {
                table: keys::TASKS,
                item: Item::new(id, keys::SK_STATUS, status, rec.index_entries()),
                cond: Cond::NotExists,
            },
        ]
    }
}

/// How to seed.
#[derive(Clone, Copy)]
struct SeedOpts {
    /// Tasks in flight.
    concurrency: usize,
    /// Status items without their creation events.
    drained: bool,
    /// Stop starting new tasks after this long.
    max: Option<Duration>,
    /// Tasks per write: 1 writes each task's two items one after the other; more puts that
    /// many tasks' items in one transaction (fewer round trips through LocalStack's gateway).
    batch: usize,
}

/// Writes up to `n` pending tasks into `tq`; returns how many were written and the time taken.
async fn seed(
    store: &Arc<dyn Store>,
    tmpl: &Template,
    tq: &TaskQueueId,
    n: usize,
    opts: SeedOpts,
    label: &str,
) -> (usize, Duration) {
    let start = Instant::now();
    let every = (n / 20).max(1000);
    let mut done = 0usize;
    let mut retries = 0usize;
    let out_of_time = || opts.max.is_some_and(|m| start.elapsed() >= m);
    let batch = opts
        .batch
        .clamp(1, shared::store::MAX_TRANSACTION_ITEMS / 2);
    let mut writes = stream::iter((0..n).step_by(batch))
        .map(|first| {
            let tasks = batch.min(n - first);
            let ops: Vec<WriteOp> = (0..tasks)
                .flat_map(|_| tmpl.items(&blackbox::slugid(), tq, opts.drained))
                .collect();
            let store = store.clone();
            let skip = out_of_time();
            async move {
                if skip {
                    return None;
                }
                let mut retried = 0;
                // One task's two items one after the other, or `batch` tasks in one transaction.
                let units: Vec<Vec<WriteOp>> = if tasks == 1 {
                    ops.into_iter().map(|op| vec![op]).collect()
                } else {
                    vec![ops]
                };
                for unit in units {
                    let mut attempt = 0;
                    loop {
                        let result = match unit.as_slice() {
                            [op] => store.write(op.clone()).await.map(|_| ()),
                            _ => store.transact(unit.clone()).await,
                        };
                        match result {
                            Ok(()) => break,
                            // A retried write that had in fact landed.
                            Err(e) if e.is_condition_failed() && attempt > 0 => break,
                            Err(e) if attempt < 10 => {
                                if attempt == 0 {
                                    eprintln!("seed write failed, retrying: {e}");
                                }
                                attempt += 1;
                                retried += 1;
                                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                            }
                            Err(e) => panic!("seed write failed: {e}"),
                        }
                    }
                }
                Some((tasks, retried))
            }
        })
        .buffer_unordered(opts.concurrency.max(1));
    let mut stopped = false;
    while let Some(r) = writes.next().await {
        let Some((tasks, r)) = r else {
            if !stopped {
                stopped = true;
                println!(
                    "  {label}: BENCH_SEED_MAX_SECS reached after {done} tasks; finishing those in flight"
                );
            }
            continue;
        };
        retries += r;
        let before = done;
        done += tasks;
        if done / every > before / every && done < n {
            let secs = start.elapsed().as_secs_f64();
            let rate = done as f64 / secs;
            println!(
                "  {label}: {done}/{n} tasks after {secs:.0} s ({rate:.0} tasks/s, about {:.0} s left)",
                (n - done) as f64 / rate
            );
        }
    }
    let took = start.elapsed();
    println!(
        "  {label}: {done} tasks in {:.1} s ({:.0} tasks/s, {} retried writes)",
        took.as_secs_f64(),
        done as f64 / took.as_secs_f64().max(1e-9),
        retries
    );
    (done, took)
}

#[derive(Default)]
struct Side {
    lat_us: Vec<u64>,
    rcu: f64,
    wcu: f64,
    req: u64,
    missed: usize,
}

impl Side {
    /// Nearest-rank percentile, in milliseconds.
    fn pct(&self, p: f64) -> f64 {
        if self.lat_us.is_empty() {
            return f64::NAN;
        }
        let mut v = self.lat_us.clone();
        v.sort_unstable();
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1] as f64 / 1000.0
    }
    fn mean(&self) -> f64 {
        if self.lat_us.is_empty() {
            return f64::NAN;
        }
        self.lat_us.iter().sum::<u64>() as f64 / self.lat_us.len() as f64 / 1000.0
    }
    fn max(&self) -> f64 {
        self.lat_us
            .iter()
            .copied()
            .max()
            .map_or(f64::NAN, |m| m as f64 / 1000.0)
    }
}

async fn claim_one(queue: &Queue, tq: &TaskQueueId, usage: &Option<Arc<Usage>>, side: &mut Side) {
    let before = snap(usage);
    let t = Instant::now();
    let pass = queue
        .try_claim_work(tq, "g", "w", 1, Ts::now())
        .await
        .expect("claimWork");
    let took = t.elapsed();
    let after = snap(usage);
    if pass.claims.len() != 1 {
        side.missed += 1;
        return;
    }
    side.lat_us.push(took.as_micros() as u64);
    side.rcu += after.rcu - before.rcu;
    side.wcu += after.wcu - before.wcu;
    side.req += after.req - before.req;
}

/// The store under test, its DynamoDB usage counters (none for SQLite) and where it lives.
async fn open_backend(
    backend: &str,
    dir: &std::path::Path,
) -> (Arc<dyn Store>, Option<Arc<Usage>>, String) {
    match backend {
        "embedded" => {
            let path = dir.join("queue.db");
            let store = SqliteStore::open(&path).expect("SQLite store");
            (
                Arc::new(store),
                None,
                format!("SQLite at {}", path.display()),
            )
        }
        "localstack" | "aws" => {
            let Ok(sdk) = dynamodb::sdk_config().await else {
                eprintln!(
                    "BENCH_BACKEND=localstack needs the AWS environment (see this file's header)"
                );
                std::process::exit(2);
            };
            let prefix = blackbox::runtime_api::localstack_tables("depth", false).await;
            let store = DynamoStore::new(&sdk, prefix.clone()).expect("store");
            let usage = store.usage();
            let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "AWS".into());
            (
                Arc::new(store),
                Some(usage),
                format!("DynamoDB tables {prefix}* at {endpoint}"),
            )
        }
        other => {
            eprintln!("BENCH_BACKEND must be embedded or localstack, not {other:?}");
            std::process::exit(2);
        }
    }
}

#[tokio::main]
async fn main() {
    let depth: usize = env_num("BENCH_DEPTH", 100_000usize);
    let k: usize = env_num("BENCH_CLAIMS", 200usize).max(1);
    let warmup: usize = env_num("BENCH_WARMUP", 20usize);
    let concurrency: usize = env_num("BENCH_SEED_CONCURRENCY", 64usize);
    let batch: usize = env_num("BENCH_SEED_BATCH", 1usize);
    let drained = std::env::var("BENCH_OUTBOX").as_deref() == Ok("drained");
    let seed_max = std::env::var("BENCH_SEED_MAX_SECS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_secs);
    let wait_for = std::env::var("BENCH_WAIT_FOR").ok();
    let opts = SeedOpts {
        concurrency,
        drained,
        max: None,
        batch,
    };
    let backend = std::env::var("BENCH_BACKEND").unwrap_or_else(|_| "embedded".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release (bench)"
    };

    let dir = tempfile::tempdir().expect("temp dir");
    let (store, usage, where_) = open_backend(&backend, dir.path()).await;
    let verify = env_num("BENCH_VERIFY", u8::from(usage.is_none())) == 1;
    let queue = Queue::new(
        store.clone(),
        Arc::new(LocalSignal::default()),
        IssuerCredentials {
            client_id: "static/q".into(),
            access_token: "t".into(),
        },
        QueueConfig::default(),
    );

    println!("== claimWork from a deep task queue vs a shallow one ==");
    println!(
        "backend={backend} ({where_}) nproc={nproc} profile={profile} depth={depth} \
         claims={k} warmup={warmup} seed_concurrency={concurrency} seed_batch={batch} outbox={}",
        if drained { "drained" } else { "as created" }
    );

    let tmpl = Template::make(&queue).await;
    let new_queue = || TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");
    let (deep, shallow, warm) = (new_queue(), new_queue(), new_queue());

    println!("Seeding");
    let deep_opts = SeedOpts {
        max: seed_max,
        ..opts
    };
    let (depth, deep_took) = seed(&store, &tmpl, &deep, depth, deep_opts, "deep queue").await;
    if verify {
        let t = Instant::now();
        let n = queue.pending_count(&deep).await.expect("count");
        println!(
            "  deep queue: pending index holds {n} entries (counted in {:.1} s)",
            t.elapsed().as_secs_f64()
        );
    }
    seed(&store, &tmpl, &shallow, k, opts, "shallow queue").await;
    seed(&store, &tmpl, &warm, warmup, opts, "warm-up queue").await;
    if let Some(path) = &wait_for {
        // Lets a long seeding run overlap other work, with the claims taken on a quiet machine.
        println!("waiting for {path} to exist before claiming (BENCH_WAIT_FOR)");
        while !std::path::Path::new(path).exists() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    let mut scratch = Side::default();
    for _ in 0..warmup {
        claim_one(&queue, &warm, &usage, &mut scratch).await;
    }

    let (mut d, mut s) = (Side::default(), Side::default());
    let t = Instant::now();
    for i in 0..k {
        if i % 2 == 0 {
            claim_one(&queue, &deep, &usage, &mut d).await;
            claim_one(&queue, &shallow, &usage, &mut s).await;
        } else {
            claim_one(&queue, &shallow, &usage, &mut s).await;
            claim_one(&queue, &deep, &usage, &mut d).await;
        }
    }
    let claims_took = t.elapsed();

    println!();
    println!(
        "claimWork, one task per call, {k} claims per queue, alternating ({:.1} s)",
        claims_took.as_secs_f64()
    );
    println!(
        "| queue | pending at start | claims (missed) | p50 ms | p95 ms | p99 ms | mean ms | max ms | read units/claim | write units/claim | requests/claim |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, at_start, side) in [("deep", depth, &d), ("shallow", k, &s)] {
        let n = side.lat_us.len().max(1) as f64;
        let units = |x: f64| {
            if usage.is_some() {
                format!("{:.2}", x / n)
            } else {
                "n/a".into()
            }
        };
        println!(
            "| {name} | {at_start} | {} ({}) | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            side.lat_us.len(),
            side.missed,
            side.pct(50.0),
            side.pct(95.0),
            side.pct(99.0),
            side.mean(),
            side.max(),
            units(side.rcu),
            units(side.wcu),
            units(side.req as f64),
        );
    }
    println!(
        "deep / shallow: p50 {:.2}x, p95 {:.2}x, p99 {:.2}x",
        d.pct(50.0) / s.pct(50.0),
        d.pct(95.0) / s.pct(95.0),
        d.pct(99.0) / s.pct(99.0)
    );
    println!(
        "seeding {depth} tasks took {:.1} s ({:.0} tasks/s)",
        deep_took.as_secs_f64(),
        depth as f64 / deep_took.as_secs_f64().max(1e-9)
    );
}
