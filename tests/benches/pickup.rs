//! claimWork pickup as deployed: how long after a createTask starts a claimWork that waits in
//! another process returns the task, and what an idle worker's empty claimWork costs.
//!
//! Run (LocalStack and RabbitMQ up, release binaries built):
//!   cargo build --release -p functions --bin tc-queue --bin lambda
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench pickup
//!
//! Setups, all running at once and sampled in turn (round-robin, so machine noise hits each):
//! - `local`: one `tc-queue` process, embedded backend (createTask and claimWork in one
//!   process: its in-process signal);
//! - `2 servers, 5 s re-read`: two `tc-queue --backend aws` processes over one LocalStack
//!   DynamoDB, claimWork re-reading the index every 5 s (as before wake-ups crossed
//!   processes);
//! - `2 servers, re-read`: the same with the default re-read schedule and no broker;
//! - `2 servers, broker`: the same with wake-ups through RabbitMQ (`TCQ_AMQP_URL`);
//! - `lambda`: the deployed shape (`blackbox::shape`): the real `create-task` and
//!   `claim-work` functions (release `lambda` binary) each under its Runtime API emulator,
//!   behind the local HTTP API, over LocalStack, with wake-ups through RabbitMQ.
//!
//! Each sample: a claimWork is started in the claiming process, left waiting for a random
//! 0.3–1.5 s (so that its re-read schedule is at a random point), then createTask is sent to
//! the other process; pickup is createTask's start to claimWork's return. `BENCH_PICKUPS`
//! samples per setup (default 30). Then one empty 20 s claimWork per signal kind runs in
//! process over the same LocalStack tables, counting DynamoDB requests and units, and the
//! idle worker-month is priced from them (list prices in `PRICES`), with the claim-work
//! function's memory. The claim-work instances' peak RSS and CPU per invocation come from
//! `/proc`. `BENCH_SETUPS` (comma-separated names: local, old, poll, broker, lambda) picks
//! setups; `BENCH_IDLE=0` skips the idle measurement.

use blackbox::env_num;
use blackbox::release::ReleaseServer;
use blackbox::shape::{lambda::rss_kib, Shape, ShapeConfig};
use serde_json::json;
use shared::ids::TaskQueueId;
use shared::queue::{Queue, QueueConfig};
use shared::signal::{amqp::AmqpSignal, LocalSignal, WorkSignal};
use shared::store::dynamodb::{self, DynamoStore};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// List prices (us-east-1, arm64, on-demand) used for the idle worker-month.
mod prices {
    /// Lambda, per GB-second (arm64).
    pub const LAMBDA_GB_S: f64 = 0.000_013_333_4;
    /// Lambda, per request.
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// API Gateway HTTP API, per request.
    pub const HTTP_API_REQUEST: f64 = 1.00 / 1e6;
    /// DynamoDB on-demand, per read request unit.
    pub const READ_UNIT: f64 = 0.125 / 1e6;
    /// DynamoDB on-demand, per write request unit.
    pub const WRITE_UNIT: f64 = 0.625 / 1e6;
}

/// One setup: where claimWork waits and where createTask goes.
struct Setup {
    name: &'static str,
    claimer: String,
    creator: taskcluster::Queue,
    pickups: Vec<f64>,
    creates: Vec<f64>,
}

impl Setup {
    fn new(name: &'static str, claimer: &str, creator: &str) -> Setup {
        Setup {
            name,
            claimer: claimer.to_string(),
            creator: blackbox::queue_client(creator),
            pickups: vec![],
            creates: vec![],
        }
    }

    /// One sample; false when it failed.
    async fn sample(&mut self) -> bool {
        let tq = blackbox::task_queue_id();
        let waiting = {
            let q = blackbox::queue_client(&self.claimer);
            let tq = tq.clone();
            tokio::spawn(async move {
                let body = json!({"workerGroup": "g", "workerId": "w", "tasks": 1});
                let r = q.claimWork(&tq, &body).await;
                (r, Instant::now())
            })
        };
        // A random park (slugids are random: 16 bytes from the OS generator).
        let r = blackbox::slugid()
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        let park = 300 + r % 1200;
        tokio::time::sleep(Duration::from_millis(park)).await;
        let id = blackbox::slugid();
        let start = Instant::now();
        if let Err(e) = self.creator.createTask(&id, &blackbox::task_def(&tq)).await {
            eprintln!("{}: createTask: {e}", self.name);
            return false;
        }
        let created = start.elapsed();
        match waiting.await {
            Ok((Ok(r), at)) if r["tasks"][0]["status"]["taskId"] == id.as_str() => {
                self.pickups
                    .push(at.duration_since(start).as_secs_f64() * 1e3);
                self.creates.push(created.as_secs_f64() * 1e3);
                true
            }
            Ok((r, _)) => {
                eprintln!("{}: claimWork did not return the task: {r:?}", self.name);
                false
            }
            Err(e) => {
                eprintln!("{}: {e}", self.name);
                false
            }
        }
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// DynamoDB traffic of one empty claimWork of `wait`.
struct Idle {
    label: &'static str,
    requests: u64,
    read_requests: u64,
    reads: f64,
    writes: f64,
}

impl Idle {
    /// Read units as DynamoDB bills them: at least 0.5 per eventually consistent read, which
    /// DynamoDB Local does not count for an empty Query.
    fn billed_reads(&self) -> f64 {
        self.reads.max(0.5 * self.read_requests as f64)
    }
}

async fn idle_claim(
    prefix: &str,
    label: &'static str,
    signal: Arc<dyn WorkSignal>,
    slots: Option<u32>,
    wait: Duration,
) -> Idle {
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let store = Arc::new(DynamoStore::new(dynamodb::client(&sdk), prefix));
    let usage = store.usage();
    let queue = Queue::new(
        store,
        signal,
        shared::creds::IssuerCredentials {
            client_id: "static/taskcluster/queue".into(),
            access_token: "bench".into(),
        },
        QueueConfig {
            claim_work_timeout_ms: wait.as_millis() as i64,
            claim_work_slots: slots,
            ..QueueConfig::default()
        },
    );
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("task queue id");
    let claims = queue
        .claim_work(&tq, "g", "w", 1, &shared::time::Ts::now)
        .await
        .expect("claimWork");
    assert!(claims.is_empty());
    Idle {
        label,
        requests: usage.requests.load(Ordering::Relaxed),
        read_requests: usage.read_requests.load(Ordering::Relaxed),
        reads: usage.read_milli.load(Ordering::Relaxed) as f64 / 1e3,
        writes: usage.write_milli.load(Ordering::Relaxed) as f64 / 1e3,
    }
}

fn main() {
    let samples: usize = env_num("BENCH_PICKUPS", 30usize);
    let setups: Vec<String> = std::env::var("BENCH_SETUPS")
        .unwrap_or_else(|_| "local,old,poll,broker,lambda".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let on = |s: &str| setups.iter().any(|x| x == s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let amqp = blackbox::amqp::amqp_url(&blackbox::amqp::broker_addr());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "== claimWork pickup across processes (nproc={nproc}, {samples} samples per setup) =="
    );

    rt.block_on(async {
        let dir = tempfile::tempdir().expect("dir");
        let suffix = blackbox::slugid()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(8)
            .collect::<String>()
            .to_ascii_lowercase();
        let mut servers: Vec<ReleaseServer> = vec![];
        let mut list: Vec<Setup> = vec![];
        if on("local") {
            let d = dir.path().join("local");
            let s = ReleaseServer::start(&d, &[("TCQ_BACKEND", "embedded".into())]).await;
            list.push(Setup::new("local, embedded, 1 process", &s.root, &s.root));
            servers.push(s);
        }
        let aws = |prefix: &str| {
            vec![
                ("TCQ_BACKEND", "aws".to_string()),
                ("TCQ_TABLE_PREFIX", prefix.to_string()),
                ("TCQ_CREATE_TABLES", "true".to_string()),
            ]
        };
        let prefix = format!("pk{suffix}-");
        for (key, name, extra) in [
            (
                "old",
                "2 servers, LocalStack, 5 s re-read",
                vec![
                    ("TCQ_CLAIM_WORK_POLL_MS", "5000".to_string()),
                    ("TCQ_CLAIM_WORK_POLL_MAX_MS", "5000".to_string()),
                ],
            ),
            ("poll", "2 servers, LocalStack, re-read", vec![]),
            (
                "broker",
                "2 servers, LocalStack, broker",
                vec![
                    ("TCQ_AMQP_URL", amqp.clone()),
                    ("TCQ_EXCHANGE_PREFIX", format!("exchange/{prefix}/v1/")),
                ],
            ),
        ] {
            if !on(key) {
                continue;
            }
            let mut envs = aws(&prefix);
            envs.extend(extra);
            let d = dir.path().join(key);
            let a = ReleaseServer::start(&d, &envs).await;
            let b = ReleaseServer::start(&d, &envs).await;
            list.push(Setup::new(name, &b.root, &a.root));
            servers.push(a);
            servers.push(b);
        }
        let mut shape: Option<Shape> = None;
        if on("lambda") {
            let stack = format!("pick{suffix}");
            let sc = ShapeConfig::for_bench(&stack);
            match Shape::start(sc).await {
                Ok(s) => {
                    list.push(Setup::new(
                        "lambda: claim-work / create-task functions, broker",
                        &s.root_url(),
                        &s.root_url(),
                    ));
                    shape = Some(s);
                }
                Err(e) => eprintln!("the deployed shape did not start: {e}"),
            }
        }
        // Warm-up: connections, cold starts, tables.
        for s in list.iter_mut() {
            for _ in 0..3 {
                s.sample().await;
            }
            s.pickups.clear();
            s.creates.clear();
        }
        // The claim-work instances' CPU from here on: warm invocations only.
        let claim_pool = shape
            .as_ref()
            .and_then(|s| s.functions.get("ClaimWorkFunction"));
        let cpu_now = |pool: &blackbox::shape::lambda::Pool| -> (f64, usize) {
            let cpu = pool.idle_cpu_secs();
            (cpu, pool.invocations.load(Ordering::SeqCst))
        };
        let cpu_before = claim_pool.as_deref().map(cpu_now);
        let started = Instant::now();
        for _ in 0..samples {
            for s in list.iter_mut() {
                s.sample().await;
            }
        }
        println!("(sampled in {:.0} s)", started.elapsed().as_secs_f64());
        println!();
        println!(
            "{:<52} {:>5} {:>9} {:>9} {:>9} {:>13}",
            "setup", "n", "p50 ms", "p99 ms", "max ms", "createTask p50"
        );
        for s in &list {
            println!(
                "{:<52} {:>5} {:>9.0} {:>9.0} {:>9.0} {:>13.0}",
                s.name,
                s.pickups.len(),
                pct(&s.pickups, 0.5),
                pct(&s.pickups, 0.99),
                pct(&s.pickups, 1.0),
                pct(&s.creates, 0.5),
            );
        }

        let mut memory_mb = functions::lambda::catalog::CLAIM_WORK_MEMORY_MB as f64;
        if let (Some(pool), Some((cpu0, calls0))) = (claim_pool.as_deref(), cpu_before) {
            let pids = pool.idle_pids();
            let rss: Vec<u64> = pids.iter().filter_map(|p| rss_kib(*p)).collect();
            let (cpu1, calls1) = cpu_now(pool);
            let calls = (calls1 - calls0).max(1);
            let per_call_ms = 1e3 * (cpu1 - cpu0) / calls as f64;
            // What the instances use between invocations (a frozen Lambda instance uses none).
            tokio::time::sleep(Duration::from_secs(10)).await;
            let (cpu2, _) = cpu_now(pool);
            let idle_ms_per_s = 1e3 * (cpu2 - cpu1) / 10.0;
            let sampled = started.elapsed().as_secs_f64();
            let busy_ms = (per_call_ms - idle_ms_per_s * sampled / calls as f64).max(0.0);
            memory_mb = pool.def.memory_mb as f64;
            // Lambda gives a function CPU in proportion to its memory: one vCPU at 1,769 MB.
            let share = (memory_mb / 1769.0).min(1.0);
            println!();
            println!(
                "claim-work instances: {}; template memory {memory_mb:.0} MB; peak RSS {rss:?} KiB",
                pids.len()
            );
            println!(
                "  CPU {per_call_ms:.1} ms per warm invocation ({calls} invocations), of which \
                 {:.1} ms between invocations ({idle_ms_per_s:.2} ms/s idle): {busy_ms:.1} ms in \
                 invocations = about {:.0} ms of wall time at {memory_mb:.0} MB ({:.1}% of a vCPU)",
                per_call_ms - busy_ms,
                busy_ms / share,
                100.0 * share
            );
        }
        if env_num("BENCH_IDLE", 1u32) == 1 && (on("poll") || on("broker")) {
            let wait = Duration::from_secs(20);
            let (a, b, c) = tokio::join!(
                idle_claim(
                    &prefix,
                    "re-read only",
                    Arc::new(LocalSignal::default()),
                    None,
                    wait
                ),
                idle_claim(
                    &prefix,
                    "broker wake-ups",
                    Arc::new(AmqpSignal::start(amqp.clone(), "exchange/bench-idle/v1/")),
                    None,
                    wait
                ),
                idle_claim(
                    &prefix,
                    "broker wake-ups + wait slot",
                    Arc::new(AmqpSignal::start(amqp.clone(), "exchange/bench-idle/v1/")),
                    Some(160),
                    wait
                ),
            );
            let month_calls = 30.0 * 86_400.0 / wait.as_secs_f64();
            println!();
            println!(
                "One empty 20 s claimWork, and an idle worker-month ({month_calls:.0} back-to-back \
                 calls, {memory_mb:.0} MB, list prices):"
            );
            println!(
                "{:<30} {:>8} {:>6} {:>12} {:>11} {:>9} {:>10} {:>8}",
                "",
                "requests",
                "reads",
                "read units*",
                "write units",
                "$ Lambda",
                "$ DynamoDB",
                "$ total"
            );
            for i in [a, b, c] {
                let lambda = month_calls
                    * (wait.as_secs_f64() * memory_mb / 1024.0 * prices::LAMBDA_GB_S
                        + prices::LAMBDA_REQUEST
                        + prices::HTTP_API_REQUEST);
                let ddb = month_calls
                    * (i.billed_reads() * prices::READ_UNIT + i.writes * prices::WRITE_UNIT);
                println!(
                    "{:<30} {:>8} {:>6} {:>12.1} {:>11.1} {:>9.2} {:>10.2} {:>8.2}",
                    i.label,
                    i.requests,
                    i.read_requests,
                    i.billed_reads(),
                    i.writes,
                    lambda,
                    ddb,
                    lambda + ddb
                );
            }
            println!(
                "* as billed: counted units, or 0.5 per read request where that is more (an \
                 empty Query is 0.5 on DynamoDB, 0 on DynamoDB Local)"
            );
        }
        if let Some(s) = shape {
            s.stop().await;
        }
        drop(servers);
    });
}
