//! Capacity units and requests per task life cycle (createTask → claimWork → reportCompleted,
//! plus delivering its events) on DynamoDB, counted from `ReturnConsumedCapacity` by the
//! adapter, not estimated; then per existing-group task, dependency edge, object artifact and
//! realistic CI task (`BENCH_REALISTIC` of each artifact kind, 20 by default), and the cost per
//! million tasks of the bare life cycle and the realistic task at list prices (Lambda duration
//! modelled: see `print_cost`). Needs LocalStack (or AWS) in the standard AWS environment:
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench dynamodb_cost
use shared::creds::IssuerCredentials;
use shared::events::RecordingSink;
use shared::ids::{TaskId, TaskQueueId};
use shared::queue::{Queue, QueueConfig};
use shared::records::task::ReasonResolved;
use shared::signal::LocalSignal;
use shared::store::dynamodb::{self, DynamoStore, Usage};
use shared::store::Store;
use shared::time::{Budget, Ts};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Clone, Default)]
struct Snap {
    rcu: f64,
    wcu: f64,
    req: u64,
    by_target: BTreeMap<String, u64>,
}

fn snap(u: &Usage) -> Snap {
    Snap {
        rcu: u.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        wcu: u.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        req: u.requests.load(Ordering::Relaxed),
        by_target: u
            .writes_by_target
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default(),
    }
}

/// Write units per table and index (thousandths, summed over `n`), as `target units` pairs.
fn per_target(m: &BTreeMap<String, u64>, n: f64) -> String {
    m.iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / 1000.0 / n))
        .collect::<Vec<_>>()
        .join(", ")
}

fn delta(a: &Snap, b: &Snap, n: f64) -> (f64, f64, f64) {
    (
        (b.rcu - a.rcu) / n,
        (b.wcu - a.wcu) / n,
        (b.req - a.req) as f64 / n,
    )
}

/// Read units, write units, requests and write units by table/index (thousandths) of a step.
#[derive(Clone, Default)]
struct Counted {
    read: f64,
    write: f64,
    requests: f64,
    by_target: BTreeMap<String, u64>,
}

/// Counts per step, from the adapter's counters between marks.
struct Steps<'a> {
    usage: &'a Usage,
    last: Snap,
    acc: Vec<Counted>,
}

impl<'a> Steps<'a> {
    fn new(usage: &'a Usage, steps: usize) -> Steps<'a> {
        Steps {
            usage,
            last: snap(usage),
            acc: vec![Counted::default(); steps],
        }
    }

    /// Adds what was counted since the last mark to step `i`.
    fn mark(&mut self, i: usize) {
        let now = snap(self.usage);
        let (r, w, q) = delta(&self.last, &now, 1.0);
        let step = &mut self.acc[i];
        step.read += r;
        step.write += w;
        step.requests += q;
        for (k, v) in &now.by_target {
            let before = self.last.by_target.get(k).copied().unwrap_or(0);
            *step.by_target.entry(k.clone()).or_default() += v - before;
        }
        self.last = now;
    }

    /// Forgets what was counted since the last mark (work that belongs to no step).
    fn skip(&mut self) {
        self.last = snap(self.usage);
    }

    /// Prints the table of `steps` per task over `n` tasks; returns each step's counts per
    /// task.
    fn print(&self, steps: &[Step], n: usize) -> Vec<Counted> {
        println!(
            "| step | read units | write units | DynamoDB requests | write units by table/index |"
        );
        println!("|---|---|---|---|---|");
        let nf = n as f64;
        let mut sum = Counted::default();
        let mut out = vec![];
        for (step, t) in steps.iter().zip(&self.acc) {
            let (r, w, q) = (t.read / nf, t.write / nf, t.requests / nf);
            sum.read += r;
            sum.write += w;
            sum.requests += q;
            for (k, v) in &t.by_target {
                *sum.by_target.entry(k.clone()).or_default() += v;
            }
            println!(
                "| {} | {r:.2} | {w:.2} | {q:.2} | {} |",
                step.name,
                per_target(&t.by_target, nf)
            );
            out.push(Counted {
                read: r,
                write: w,
                requests: q,
                by_target: t.by_target.clone(),
            });
        }
        println!(
            "| **total** | {:.2} | {:.2} | {:.2} | {} |",
            sum.read,
            sum.write,
            sum.requests,
            per_target(&sum.by_target, nf)
        );
        out
    }
}

/// One step of a task's life as the cost model sees it: the API calls it takes (0 for the
/// background functions, whose stream and schedule invocations are shared by many tasks),
/// and each call's function.
struct Step {
    name: &'static str,
    calls: f64,
    /// Warm CPU per call at one vCPU (ms).
    cpu_ms: f64,
    /// The function's memory (MB), as the template sizes it.
    memory_mb: f64,
}

impl Step {
    fn api(name: &'static str, calls: u32, cpu_ms: f64, memory_mb: u32) -> Step {
        Step {
            name,
            calls: f64::from(calls),
            cpu_ms,
            memory_mb: f64::from(memory_mb),
        }
    }

    fn background(name: &'static str) -> Step {
        Step {
            name,
            calls: 0.0,
            cpu_ms: 0.0,
            memory_mb: 0.0,
        }
    }
}

// The model's inputs that this bench does not count. Warm CPU per call from
// `cargo bench -p blackbox --bench function_cpu` (release `lambda`, 2a88566, medians of 3):
// createTask, claimWork and reportCompleted; the other endpoints are not measured there and
// are taken at reportCompleted's figure (a read and a write, as most of them).
const CREATE_CPU_MS: f64 = 2.40;
const CLAIM_CPU_MS: f64 = 3.05;
const REPORT_CPU_MS: f64 = 1.80;
/// Wait per DynamoDB request inside a function (ms): DynamoDB's single-digit latency in one
/// region, not LocalStack's (about 15 ms here). `BENCH_STORE_WAIT_MS` sets another.
fn store_wait_ms() -> f64 {
    std::env::var("BENCH_STORE_WAIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0)
}
/// A vCPU's worth of Lambda memory (MB): below it, CPU time stretches by this over the size.
const FULL_VCPU_MB: f64 = 1769.0;
// us-east-1 list prices, arm64 and on-demand (USD per unit).
const WRITE_UNIT: f64 = 0.625e-6;
const READ_UNIT: f64 = 0.125e-6;
const HTTP_API_REQUEST: f64 = 1.0e-6;
const LAMBDA_REQUEST: f64 = 0.2e-6;
const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;

/// Prints the cost per million tasks of `steps` (counted per task in `counted`), per step and
/// per service. Background invocations (publisher, dependency resolver, expiry) are shared by
/// up to 100 stream records or a scheduled pass each and are left out; S3 requests too.
fn print_cost(what: &str, steps: &[Step], counted: &[Counted]) {
    let wait = store_wait_ms();
    let m = 1e6;
    println!();
    println!(
        "Cost per million tasks, {what} (us-east-1 list prices, arm64; DynamoDB counted above; \
         a call's duration modelled as its CPU × {FULL_VCPU_MB} / memory + {wait} ms per \
         DynamoDB request)"
    );
    println!(
        "| step | API calls | DynamoDB | HTTP API + Lambda requests | Lambda duration | total |"
    );
    println!("|---|---|---|---|---|---|");
    let (mut db, mut req, mut dur) = (0.0, 0.0, 0.0);
    for (s, c) in steps.iter().zip(counted) {
        let d = (c.write * WRITE_UNIT + c.read * READ_UNIT) * m;
        let r = s.calls * (HTTP_API_REQUEST + LAMBDA_REQUEST) * m;
        let t = if s.calls > 0.0 {
            let ms = s.calls * s.cpu_ms * FULL_VCPU_MB / s.memory_mb + c.requests * wait;
            ms / 1000.0 * s.memory_mb / 1024.0 * LAMBDA_GB_SECOND * m
        } else {
            0.0
        };
        (db, req, dur) = (db + d, req + r, dur + t);
        println!(
            "| {} | {} | ${d:.2} | ${r:.2} | ${t:.2} | ${:.2} |",
            s.name,
            s.calls,
            d + r + t
        );
    }
    println!(
        "| **total** | {} | **${db:.2}** | **${req:.2}** | **${dur:.2}** | **${:.2}** |",
        steps.iter().map(|s| s.calls).sum::<f64>(),
        db + req + dur
    );
}

/// Delivers the task's waiting events as the publisher function does after every write (it
/// is triggered by each write's stream record, which carries the item's image: the image is
/// fetched here through `images`, whose reads are not counted).
/// A task's status item as the stream hands it to a function: read through the uncounted store.
async fn image(images: &DynamoStore, id: &TaskId) -> shared::store::Item {
    images
        .get(
            shared::records::task::TASKS,
            id.as_str(),
            shared::records::task::SK_STATUS,
        )
        .await
        .expect("image")
        .expect("status item")
}

async fn drain(queue: &Queue, images: &DynamoStore, sink: &RecordingSink, id: &TaskId) {
    let image = image(images, id).await;
    shared::events::drain::drain_stream::<shared::records::task::TaskRecord>(
        queue.store.as_ref(),
        sink,
        "x/",
        vec![image],
        &Default::default(),
        Ts::now(),
    )
    .await
    .expect("drain");
}

/// Every record of a table's stream so far (LocalStack: its API is called unsigned).
async fn stream_records(arn: Result<String, String>) -> Result<Vec<serde_json::Value>, String> {
    use blackbox::runtime_api::localstack_json;
    let streams = |op: &str, body: serde_json::Value| {
        let target = format!("DynamoDBStreams_20120810.{op}");
        async move { localstack_json("dynamodb", "1.0", &target, body).await }
    };
    let arn = arn?;
    let desc = streams("DescribeStream", serde_json::json!({ "StreamArn": arn })).await?;
    let mut out = vec![];
    for shard in desc["StreamDescription"]["Shards"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let it = streams(
            "GetShardIterator",
            serde_json::json!({ "StreamArn": arn, "ShardId": shard["ShardId"], "ShardIteratorType": "TRIM_HORIZON" }),
        )
        .await?;
        let mut it = it["ShardIterator"].as_str().map(String::from);
        while let Some(i) = it {
            let page = streams("GetRecords", serde_json::json!({ "ShardIterator": i })).await?;
            let records = page["Records"].as_array().cloned().unwrap_or_default();
            if records.is_empty() {
                break;
            }
            out.extend(records);
            it = page["NextShardIterator"].as_str().map(String::from);
        }
    }
    Ok(out)
}

/// More time than the bench's resolutions need.
fn ample() -> Budget {
    Budget::of(std::time::Duration::from_secs(60))
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_LIFECYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let Ok(sdk) = dynamodb::sdk_config().await else {
        eprintln!("needs the AWS environment (see the header of this file)");
        return;
    };
    let prefix = blackbox::runtime_api::localstack_tables("cost", true).await;
    // A second store on the same tables, whose reads are not counted: it stands for the
    // stream record that hands the publisher each written image for free.
    let images = DynamoStore::new(&sdk, prefix.clone()).expect("store");
    let store = DynamoStore::new(&sdk, prefix.clone()).expect("store");
    let usage = store.usage();
    let queue = queue_as_deployed(store);
    let sink = RecordingSink::default();
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");

    let mut steps = Steps::new(&usage, 5);
    for _ in 0..n {
        let id = blackbox::new_task(&queue, &tq, false).await;
        steps.mark(0);
        drain(&queue, &images, &sink, &id).await;
        steps.mark(3);
        // claimWork as the endpoint runs it: the worker's quarantine read, the claim, and
        // the worker metadata it records (throttled; claimed runs written five at a time).
        let claims = queue
            .claim_work(&tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claim");
        assert_eq!(claims.len(), 1);
        steps.mark(1);
        drain(&queue, &images, &sink, &id).await;
        steps.mark(3);
        queue
            .resolve(&id, 0, ReasonResolved::Completed, Ts::now())
            .await
            .expect("complete");
        steps.mark(2);
        drain(&queue, &images, &sink, &id).await;
        steps.mark(3);
        // The dependency worker visits every resolution: clears its mark and takes the task
        // off its group's unresolved count (announcing the group, which has no other task).
        let resolution = image(&images, &id).await;
        shared::jobs::dependencies_of(&queue, vec![resolution], Ts::now(), &ample())
            .await
            .expect("dependency worker");
        steps.mark(4);
        drain(&queue, &images, &sink, &id).await;
        steps.mark(3);
    }
    println!(
        "DynamoDB cost per task life cycle, averaged over {n} (ReturnConsumedCapacity=INDEXES)"
    );
    let bare = [
        Step::api("createTask", 1, CREATE_CPU_MS, 256),
        Step::api(
            "claimWork (1 task, recording its worker)",
            1,
            CLAIM_CPU_MS,
            128,
        ),
        Step::api("reportCompleted", 1, REPORT_CPU_MS, 256),
        Step::background(
            "event delivery (publisher on each write's stream record: 4 writes with events)",
        ),
        Step::background("dependency worker (resolution seen, group count)"),
    ];
    let per_step = steps.print(&bare, n);
    println!("events delivered: {}", sink.events().len());
    print_cost("the bare life cycle", &bare, &per_step);
    let arn = dynamodb::client(&sdk)
        .describe_table()
        .table_name(format!("{prefix}tasks"))
        .send()
        .await
        .map_err(|e| e.to_string())
        .and_then(|t| {
            t.table()
                .and_then(|t| t.latest_stream_arn())
                .map(String::from)
                .ok_or_else(|| "no stream".to_string())
        });
    match stream_records(arn).await {
        Ok(records) => {
            // The dependency resolver's two filters (tests/tests/infra.rs): a write that
            // removes the `deadline` entry (a resolution), or one that carries the mark.
            let resolutions = records
                .iter()
                .filter(|r| {
                    let (old, new) = (&r["dynamodb"]["OldImage"], &r["dynamodb"]["NewImage"]);
                    let resolving = r["eventName"] == "MODIFY"
                        && old["deadline_pk"]["S"].is_string()
                        && new["deadline_pk"].is_null();
                    resolving || new["resolved_pk"]["S"].is_string()
                })
                .count();
            let nf = n as f64;
            println!();
            println!("Lambda invocations per life cycle, counted from the tasks table's stream");
            println!("| function | invocations |");
            println!("|---|---|");
            println!("| API functions (createTask, claimWork, reportCompleted) | 3 |");
            println!(
                "| publisher (one per stream record at most; batches of up to 100 share one) | ≤ {:.2} |",
                records.len() as f64 / nf
            );
            println!(
                "| dependency-resolver (records passing its filters: resolutions) | ≤ {:.2} |",
                resolutions as f64 / nf
            );
        }
        Err(e) => println!("stream records not counted: {e}"),
    }

    // createTask into a group that exists (the usual case: a decision task's group), whose
    // expiry already covers the task: the group item is only checked, not written.
    let gid = blackbox::slugid();
    let k = 20;
    // A queue of their own: the edges below claim from `tq`.
    let group_tq = blackbox::task_queue_id();
    let in_group = |i: usize| {
        let mut body = blackbox::task_def(&group_tq);
        body["taskGroupId"] = serde_json::json!(gid);
        if i > 0 {
            // Expire before the first task, so that the group's expiry needs no extension.
            body["expires"] = body["deadline"].clone();
        }
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        body
    };
    queue
        .create_task(
            &TaskId::parse(&blackbox::slugid()).expect("id"),
            in_group(0),
            false,
            Ts::now(),
        )
        .await
        .expect("create the group's first task");
    let before = snap(&usage);
    for i in 1..=k {
        queue
            .create_task(
                &TaskId::parse(&blackbox::slugid()).expect("id"),
                in_group(i),
                false,
                Ts::now(),
            )
            .await
            .expect("create in group");
    }
    let after = snap(&usage);
    let (gr, gw, gq) = delta(&before, &after, k as f64);
    let mut targets = BTreeMap::new();
    for (name, v) in &after.by_target {
        targets.insert(
            name.clone(),
            v - before.by_target.get(name).copied().unwrap_or(0),
        );
    }
    println!();
    println!("createTask into an existing group ({k} tasks), per task");
    println!(
        "| step | read units | write units | DynamoDB requests | write units by table/index |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| createTask | {gr:.2} | {gw:.2} | {gq:.2} | {} |",
        per_target(&targets, k as f64)
    );

    // Dependency edges: one dependency with `k` dependents. Creating each dependent (with its
    // edge) is compared with a plain createTask; satisfying is the worker's pass after the
    // dependency completed, per edge.
    let k = 20;
    let dep = TaskId::parse(&blackbox::slugid()).expect("id");
    let mut body = blackbox::task_def(tq.as_str());
    shared::schema::validate_input("create-task-request", &mut body).expect("valid");
    queue
        .create_task(&dep, body, false, Ts::now())
        .await
        .expect("create dependency");
    // Baseline: unscheduled tasks without dependencies (defineTask), so that the difference
    // is the edge alone (its reads, its item and its index entry).
    let base = snap(&usage);
    for _ in 0..k {
        blackbox::new_task(&queue, &tq, true).await;
    }
    let before = snap(&usage);
    for _ in 0..k {
        let id = TaskId::parse(&blackbox::slugid()).expect("id");
        let mut body = blackbox::task_def(tq.as_str());
        body["dependencies"] = serde_json::json!([dep.as_str()]);
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        queue
            .create_task(&id, body, false, Ts::now())
            .await
            .expect("create dependent");
    }
    let created = snap(&usage);
    queue
        .try_claim_work(&tq, "g", "w", 1, Ts::now())
        .await
        .expect("claim");
    queue
        .resolve(&dep, 0, ReasonResolved::Completed, Ts::now())
        .await
        .expect("complete dependency");
    let resolved = snap(&usage);
    let satisfied = queue
        .resolve_dependents(dep.as_str(), Ts::now(), &ample())
        .await
        .expect("dependency worker")
        .satisfied;
    assert_eq!(satisfied, k);
    let done = snap(&usage);
    let (br, bw, bq) = delta(&base, &before, k as f64);
    let (cr, cw, cq) = delta(&before, &created, k as f64);
    let (cr, cw, cq) = (cr - br, cw - bw, cq - bq);
    let (sr, sw, sq) = delta(&resolved, &done, k as f64);
    println!();
    println!("Dependency edges ({k} dependents of one task), per edge");
    println!("| step | read units | write units | DynamoDB requests |");
    println!("|---|---|---|---|");
    println!(
        "| createTask with one dependency, minus an unscheduled createTask without | {cr:.2} | {cw:.2} | {cq:.2} |"
    );
    println!(
        "| satisfying the edge (worker; dependent becomes pending) | {sr:.2} | {sw:.2} | {sq:.2} |"
    );

    // A queue of their own, where the dependents above are not pending.
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");
    object_artifacts(&queue, &images, &sink, &usage, &tq).await;

    // A realistic CI task, with each kind of artifact.
    let real: usize = std::env::var("BENCH_REALISTIC")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    if real > 0 {
        for objects in [false, true] {
            let prefix = blackbox::runtime_api::localstack_tables("real", true).await;
            let store = DynamoStore::new(&sdk, prefix.clone()).expect("store");
            let images = DynamoStore::new(&sdk, prefix).expect("store");
            realistic_task(store, images, real, objects).await;
        }
    }
}

/// A queue over `store` configured as deployed: the publisher function runs on the table's
/// stream.
fn queue_as_deployed(store: DynamoStore) -> Queue {
    let issuer = IssuerCredentials {
        client_id: "static/q".into(),
        access_token: "t".into(),
    };
    let config = QueueConfig {
        events_from_stream: true,
        ..QueueConfig::default()
    };
    Queue::new(
        Arc::new(store),
        Arc::new(LocalSignal::default()),
        issuer,
        config,
    )
}

/// Artifacts per realistic task.
const ARTIFACTS: usize = 10;
/// Status reads per realistic task.
const STATUS_READS: u32 = 3;

/// A realistic CI task, `n` of them in one group on tables of their own: created with three
/// dependencies (the three tasks before it, so each also has three dependents), claimed,
/// reclaimed once, ten artifacts (`object`: through the object service as generic-worker
/// uploads; otherwise `s3`), three status reads, completed, its resolution handled by the
/// dependency worker (satisfying its three dependents' edges), events delivered, and at last
/// expired (tasks, edges, group and artifacts, by the expiry jobs' passes). Three tasks
/// before the `n` and three after are not counted, except in expiry, which is shared out
/// over all of them.
/// `store` and `images` (uncounted) are on the same fresh tables.
async fn realistic_task(store: DynamoStore, images: DynamoStore, n: usize, objects: bool) {
    use serde_json::json;
    use shared::blobs::LocalBlobs;
    let usage = store.usage();
    let queue = queue_as_deployed(store);
    let sink = RecordingSink::default();
    let dir = tempfile::tempdir().expect("temp dir");
    let blobs = LocalBlobs::new(dir.path().to_path_buf(), "http://127.0.0.1:1", "secret");
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");
    let gid = blackbox::slugid();
    let ids: Vec<TaskId> = (0..n + 6)
        .map(|_| TaskId::parse(&blackbox::slugid()).expect("id"))
        .collect();
    let artifacts = if objects {
        "10 object artifacts (createArtifact, createUpload, finishUpload, finishArtifact)"
    } else {
        "10 s3 artifacts (createArtifact)"
    };
    let steps = [
        Step::api(
            "createTask (existing group, 3 dependencies)",
            1,
            CREATE_CPU_MS,
            256,
        ),
        Step::api(
            "claimWork (1 task, recording its worker)",
            1,
            CLAIM_CPU_MS,
            128,
        ),
        Step::api("reclaimTask", 1, REPORT_CPU_MS, 256),
        Step::api(
            artifacts,
            (ARTIFACTS * if objects { 4 } else { 1 }) as u32,
            REPORT_CPU_MS,
            256,
        ),
        Step::api("3 status reads", STATUS_READS, REPORT_CPU_MS, 256),
        Step::api("reportCompleted", 1, REPORT_CPU_MS, 256),
        Step::background("dependency worker (its resolution: 3 dependents' edges)"),
        Step::background("event delivery"),
        Step::background("expiry (task, edges, group, artifacts; shared out)"),
    ];
    let mut count = Steps::new(&usage, steps.len());
    let expires = Ts::now().plus(shared::time::DAY);
    for (i, id) in ids.iter().enumerate() {
        let mut body = blackbox::task_def(tq.as_str());
        body["taskGroupId"] = json!(gid);
        body["expires"] = json!(expires);
        // The three before it (the first ones: all before them, so one task is pending at
        // a time).
        if i > 0 {
            let deps: Vec<&str> = ids[i.saturating_sub(3)..i]
                .iter()
                .map(|d| d.as_str())
                .collect();
            body["dependencies"] = json!(deps);
        }
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        count.skip();
        queue
            .create_task(id, body, false, Ts::now())
            .await
            .expect("create");
        if (3..n + 3).contains(&i) {
            count.mark(0);
        }
    }
    for (i, id) in ids.iter().enumerate().take(n + 3) {
        // The first three are not counted (they stand for the graph's earlier tasks).
        let counted = i >= 3;
        let mark = |count: &mut Steps, step: usize| {
            if counted {
                count.mark(step)
            } else {
                count.skip()
            }
        };
        count.skip();
        let claims = queue
            .claim_work(&tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claim");
        assert_eq!(claims.len(), 1, "task {i} is pending");
        assert_eq!(claims[0].record.task_id, id.as_str());
        mark(&mut count, 1);
        drain(&queue, &images, &sink, id).await;
        mark(&mut count, 7);
        queue.reclaim_task(id, 0, Ts::now()).await.expect("reclaim");
        mark(&mut count, 2);
        drain(&queue, &images, &sink, id).await;
        mark(&mut count, 7);
        for a in 0..ARTIFACTS {
            let name = format!("public/out-{a}.bin");
            if objects {
                one_object_artifact(&queue, &blobs, id, &name, expires).await;
            } else {
                let body = json!({"storageType": "s3", "expires": expires, "contentType": "a/b"});
                queue
                    .create_artifact(&blobs, id, 0, &name, &body, Ts::now())
                    .await
                    .expect("createArtifact");
            }
        }
        mark(&mut count, 3);
        for _ in 0..STATUS_READS {
            queue.status(id, Ts::now()).await.expect("status");
        }
        mark(&mut count, 4);
        queue
            .resolve(id, 0, ReasonResolved::Completed, Ts::now())
            .await
            .expect("complete");
        mark(&mut count, 5);
        drain(&queue, &images, &sink, id).await;
        mark(&mut count, 7);
        let resolution = image(&images, id).await;
        shared::jobs::dependencies_of(&queue, vec![resolution], Ts::now(), &ample())
            .await
            .expect("dependency worker");
        mark(&mut count, 6);
        for dependent in ids.iter().skip(i + 1).take(3) {
            drain(&queue, &images, &sink, dependent).await;
        }
        drain(&queue, &images, &sink, id).await;
        mark(&mut count, 7);
    }
    // Expiry, once everything has expired: the jobs' passes until nothing is left.
    let later = expires.plus(shared::time::DAY);
    count.skip();
    loop {
        let budget = shared::time::Budget::of(std::time::Duration::from_secs(60));
        let tasks = queue
            .expire_once(&blobs, later, 0, 100, &budget)
            .await
            .expect("expiry");
        let artifacts = queue
            .expire_artifacts_once(&blobs, later, 100, &budget)
            .await
            .expect("artifact expiry");
        if !tasks.more && !artifacts.more {
            break;
        }
    }
    // Shared out over every task that expired, counted as `n` tasks' worth.
    count.mark(8);
    let all = (n + 6) as f64 / n as f64;
    let e = &mut count.acc[8];
    e.read /= all;
    e.write /= all;
    e.requests /= all;
    for v in e.by_target.values_mut() {
        *v = (*v as f64 / all) as u64;
    }
    println!();
    println!(
        "A realistic CI task, {} artifacts, per task over {n} ({} events delivered)",
        if objects { "object" } else { "s3" },
        sink.events().len()
    );
    let counted = count.print(&steps, n);
    print_cost(
        &format!(
            "a realistic CI task ({} artifacts)",
            if objects { "object" } else { "s3" }
        ),
        &steps,
        &counted,
    );
}

/// One object artifact of run 0 of `id`, as generic-worker uploads it: createArtifact,
/// createUpload (putUrl), the bytes (to the local blob store), finishUpload, finishArtifact.
async fn one_object_artifact(
    queue: &Queue,
    blobs: &shared::blobs::LocalBlobs,
    id: &TaskId,
    name: &str,
    expires: Ts,
) {
    use serde_json::json;
    use shared::blobs::{BlobStore, Bucket};
    let body = json!({"storageType": "object", "expires": expires, "contentType": "a/b"});
    let r = queue
        .create_artifact(blobs, id, 0, name, &body, Ts::now())
        .await
        .expect("createArtifact");
    let object = r["name"].as_str().expect("name");
    let upload = json!({
        "projectId": r["projectId"], "uploadId": r["uploadId"], "expires": r["expires"],
        "proposedUploadMethods": {"putUrl": {"contentType": "a/b", "contentLength": 3}},
    });
    queue
        .create_upload(blobs, object, &upload, Ts::now())
        .await
        .expect("createUpload");
    let key = shared::records::object::blob_key(object);
    blobs
        .put(Bucket::Private, &key, "a/b", b"abc".to_vec())
        .await
        .expect("bytes");
    let finish = json!({"projectId": r["projectId"], "uploadId": r["uploadId"]});
    queue
        .finish_upload(blobs, object, &finish)
        .await
        .expect("finishUpload");
    let upload_id = r["uploadId"].as_str().expect("uploadId");
    queue
        .finish_artifact(id, 0, name, upload_id)
        .await
        .expect("finishArtifact");
}

/// A new task on `tq` (unscheduled if `define`), created as the endpoint creates it.
/// One object artifact of a running task, per step: createArtifact (artifact and object in one
/// transaction), createUpload (putUrl: a repeat of the upload createArtifact began),
/// finishUpload, finishArtifact (with its `artifact-created` event) and delivering the
/// event. The bytes go to a local blob store: S3 requests are not DynamoDB's.
async fn object_artifacts(
    queue: &Queue,
    images: &DynamoStore,
    sink: &RecordingSink,
    usage: &Usage,
    tq: &TaskQueueId,
) {
    use serde_json::json;
    use shared::blobs::{BlobStore, Bucket, LocalBlobs};
    let k = 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let blobs = LocalBlobs::new(dir.path().to_path_buf(), "http://127.0.0.1:1", "secret");
    let mut ids = vec![];
    for _ in 0..k {
        let id = blackbox::new_task(queue, tq, false).await;
        let claims = queue
            .claim_work(tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claim");
        assert_eq!(claims.len(), 1);
        drain(queue, images, sink, &id).await;
        ids.push(id);
    }
    let mut at = vec![snap(usage)];
    let expires = Ts::now().plus(shared::time::DAY);
    let mut replies = vec![];
    for id in &ids {
        let body = json!({"storageType": "object", "expires": expires, "contentType": "a/b"});
        let r = queue
            .create_artifact(&blobs, id, 0, "public/out.bin", &body, Ts::now())
            .await
            .expect("createArtifact");
        replies.push(r);
    }
    at.push(snap(usage));
    for r in &replies {
        let name = r["name"].as_str().expect("name");
        let body = json!({
            "projectId": r["projectId"], "uploadId": r["uploadId"], "expires": r["expires"],
            "proposedUploadMethods": {"putUrl": {"contentType": "a/b", "contentLength": 3}},
        });
        queue
            .create_upload(&blobs, name, &body, Ts::now())
            .await
            .expect("createUpload");
        let key = shared::records::object::blob_key(name);
        blobs
            .put(Bucket::Private, &key, "a/b", b"abc".to_vec())
            .await
            .expect("bytes");
    }
    at.push(snap(usage));
    for r in &replies {
        let name = r["name"].as_str().expect("name");
        let body = json!({"projectId": r["projectId"], "uploadId": r["uploadId"]});
        queue
            .finish_upload(&blobs, name, &body)
            .await
            .expect("finishUpload");
    }
    at.push(snap(usage));
    for (id, r) in ids.iter().zip(&replies) {
        let upload_id = r["uploadId"].as_str().expect("uploadId");
        queue
            .finish_artifact(id, 0, "public/out.bin", upload_id)
            .await
            .expect("finishArtifact");
    }
    at.push(snap(usage));
    for id in &ids {
        drain(queue, images, sink, id).await;
    }
    at.push(snap(usage));
    println!();
    println!("One object artifact ({k} of them), per artifact");
    println!(
        "| step | read units | write units | DynamoDB requests | write units by table/index |"
    );
    println!("|---|---|---|---|---|");
    let steps = [
        "createArtifact (object)",
        "createUpload (putUrl)",
        "finishUpload",
        "finishArtifact",
        "delivering artifact-created",
    ];
    let (mut tr, mut tw, mut tq_) = (0.0, 0.0, 0.0);
    for (i, step) in steps.iter().enumerate() {
        let (r, w, q) = delta(&at[i], &at[i + 1], k as f64);
        let mut targets = BTreeMap::new();
        for (name, v) in &at[i + 1].by_target {
            let before = at[i].by_target.get(name).copied().unwrap_or(0);
            targets.insert(name.clone(), v - before);
        }
        println!(
            "| {step} | {r:.2} | {w:.2} | {q:.2} | {} |",
            per_target(&targets, k as f64)
        );
        (tr, tw, tq_) = (tr + r, tw + w, tq_ + q);
    }
    println!("| **total** | {tr:.2} | {tw:.2} | {tq_:.2} | |");
}
