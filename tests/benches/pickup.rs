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
//!   behind the local HTTP API, over LocalStack, with wake-ups through RabbitMQ;
//! - `service`: the deployed shape with `ClaimMode=service`: claimWork served by the claim
//!   service (release `tc-queue`) behind the gateway's HTTP proxy, createTask by its function;
//!   `service5`: the same, the worker sleeping 5 s after an empty answer (generic-worker);
//! - `short`: the deployed shape with `ClaimMode=lambda-short` and no wait: the worker calls,
//!   and after an empty answer sleeps 5 s before the next call.
//!
//! For a worker that polls, the task is created at a random point of its 5 s sleep.
//!
//! Each sample: a claimWork is started in the claiming process, left waiting for a random
//! 0.3–1.5 s (so that its re-read schedule is at a random point), then createTask is sent to
//! the other process; pickup is createTask's start to claimWork's return. `BENCH_PICKUPS`
//! samples per setup (default 30). Then one empty 20 s claimWork per signal kind runs in
//! process over the same LocalStack tables, counting DynamoDB requests and units, and the
//! idle worker-month is priced from them (list prices in `PRICES`), with the claim-work
//! function's memory. The claim-work instances' peak RSS and CPU per invocation come from
//! `/proc`. Last, each claim mode's price for idle fleets of 10 to 10,000 workers, from those
//! units (the service's from `BENCH_WAITERS` calls waiting at once in one process, default
//! 100, and its CPU per call in the shape). `BENCH_SETUPS` (comma-separated names: local, old,
//! poll, broker, lambda, service, service5, short) picks setups; `BENCH_IDLE=0` skips the idle
//! measurement.
//!
//! `BENCH_SIGHTING` says who claims: `known` (the default), one worker of one task queue per
//! setup, claiming again after a first sample that is not counted (a fleet's usual case); or
//! `first`, a new task queue and so a new worker every sample, whose first sighting is written
//! before claimWork answers (the worst case).

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
    /// Fargate (Linux, arm64), per vCPU-hour.
    pub const FARGATE_VCPU_HOUR: f64 = 0.032_38;
    /// Fargate (Linux, arm64), per GB-hour.
    pub const FARGATE_GB_HOUR: f64 = 0.003_56;
    /// A public IPv4 address (each Fargate task's), per hour.
    pub const PUBLIC_IPV4_HOUR: f64 = 0.005;
    /// Cloud Map, per registered instance-month.
    pub const CLOUD_MAP_INSTANCE_MONTH: f64 = 0.10;
}

/// The template's defaults for the claim service: 0.25 vCPU and 0.5 GB per task, scaled to
/// keep 60 % CPU.
const SERVICE_VCPU: f64 = 0.25;
const SERVICE_GB: f64 = 0.5;
const SERVICE_CPU_TARGET: f64 = 0.6;
/// A month, as the idle figures count it.
const MONTH_HOURS: f64 = 720.0;

/// What each claim mode's price for idle fleets is made of: `long` one empty 20 s claimWork
/// in a function (wake-ups and a wait slot), `short` one without a wait (its wall time, or
/// its function's CPU at the function's share of a vCPU if longer, is its billed duration),
/// `shared` one of `sharing` waiting at once in one service task; `service_cpu_ms` the
/// service's CPU per claimWork (measured in the shape).
struct Costs<'a> {
    memory_mb: f64,
    long: &'a Idle,
    short: &'a Idle,
    short_cpu_ms: Option<f64>,
    shared: &'a Idle,
    sharing: usize,
    service_cpu_ms: Option<f64>,
}

impl Costs<'_> {
    fn table(&self) {
        let Costs {
            memory_mb,
            long,
            short,
            short_cpu_ms,
            shared,
            sharing,
            service_cpu_ms,
        } = *self;
        let gb = memory_mb / 1024.0;
        let month_s = MONTH_HOURS * 3600.0;
        let http = prices::HTTP_API_REQUEST;
        // lambda: back-to-back 20 s calls, each an instance for its whole wait.
        let long_calls = month_s / 20.0;
        let lambda_worker = long_calls
            * (20.0 * gb * prices::LAMBDA_GB_S + prices::LAMBDA_REQUEST + http + long.dynamodb());
        // lambda-short: a call, then 5 s, as generic-worker spaces them.
        // Lambda gives a function CPU in proportion to its memory: one vCPU at 1,769 MB.
        let share = (memory_mb / 1769.0).min(1.0);
        let short_s = short
            .took
            .as_secs_f64()
            .max(short_cpu_ms.unwrap_or(0.0) / 1e3 / share);
        let short_calls = month_s / (5.0 + short_s);
        let short_billed = (short_s * 1e3).ceil() / 1e3;
        let short_worker = short_calls
            * (short_billed * gb * prices::LAMBDA_GB_S
                + prices::LAMBDA_REQUEST
                + http
                + short.dynamodb());
        // service: back-to-back 20 s calls to an always-on task.
        let service_worker = long_calls * (http + shared.dynamodb());
        let task_month = MONTH_HOURS
            * (SERVICE_VCPU * prices::FARGATE_VCPU_HOUR
                + SERVICE_GB * prices::FARGATE_GB_HOUR
                + prices::PUBLIC_IPV4_HOUR)
            + prices::CLOUD_MAP_INSTANCE_MONTH;
        let cpu_ms = service_cpu_ms.unwrap_or(f64::NAN);
        let tasks = |workers: f64| -> f64 {
            let vcpu = workers / 20.0 * cpu_ms / 1e3;
            (vcpu / (SERVICE_VCPU * SERVICE_CPU_TARGET)).ceil().max(1.0)
        };
        println!();
        println!(
            "Idle fleets by claim mode (list prices, arm64, {MONTH_HOURS:.0} h months; a service \
         task ${task_month:.2}/month: Fargate {SERVICE_VCPU} vCPU + {SERVICE_GB} GB, public \
         IPv4, Cloud Map; service reads shared by {sharing} waiters; service CPU {cpu_ms:.2} \
         ms per call; lambda-short call {:.0} ms):",
            short_s * 1e3
        );
        println!(
            "{:<46} {:>9} {:>9} {:>9} {:>10} {:>11}  Lambda concurrency held",
            "mode", "/worker", "10", "100", "1,000", "10,000"
        );
        let fleets = [10.0, 100.0, 1_000.0, 10_000.0];
        let row = |name: &str, per: f64, fixed: &dyn Fn(f64) -> f64, held: &str| {
            let cells: Vec<String> = fleets
                .iter()
                .map(|n| format!("{:.0}", fixed(*n) + per * n))
                .collect();
            println!(
                "{:<46} {:>9.2} {:>9} {:>9} {:>10} {:>11}  {held}",
                name, per, cells[0], cells[1], cells[2], cells[3]
            );
        };
        row(
            "lambda (20 s long poll)",
            lambda_worker,
            &|_| 0.0,
            "one per idle worker",
        );
        row(
            "lambda-short (0 s, worker polls every 5 s)",
            short_worker,
            &|_| 0.0,
            &format!("{:.3} per idle worker", short_s / (5.0 + short_s)),
        );
        row(
            "service (20 s long poll; + tasks' fixed price)",
            service_worker,
            &|n| tasks(n) * task_month,
            "none",
        );
        println!(
            "service tasks at 10 / 100 / 1,000 / 10,000 workers: {:?}",
            fleets.map(tasks)
        );
    }
}

/// One setup: where claimWork waits and where createTask goes.
struct Setup {
    name: &'static str,
    claimer: String,
    creator: taskcluster::Queue,
    /// The worker sleeps this long after an empty answer before it calls again (a worker
    /// that polls, as generic-worker waits at least 5 s); `None`: it long-polls once.
    poll_every: Option<Duration>,
    pickups: Vec<f64>,
    creates: Vec<f64>,
    /// The task queue every sample uses when the worker is known (`BENCH_SIGHTING=known`);
    /// `None`: a new one each sample.
    known: Option<String>,
    /// Samples left before the first that counts.
    warm_up: usize,
}

impl Setup {
    fn new(name: &'static str, claimer: &str, creator: &str) -> Setup {
        Setup {
            name,
            claimer: claimer.to_string(),
            creator: blackbox::queue_client(creator),
            poll_every: None,
            pickups: vec![],
            creates: vec![],
            known: (!first_sightings()).then(blackbox::task_queue_id),
            warm_up: usize::from(!first_sightings()),
        }
    }

    fn polling(self, every: Duration) -> Setup {
        Setup {
            poll_every: Some(every),
            ..self
        }
    }

    /// One sample; false when it failed.
    async fn sample(&mut self) -> bool {
        let tq = self.known.clone().unwrap_or_else(blackbox::task_queue_id);
        let poll = self.poll_every;
        let waiting = {
            let q = blackbox::queue_client(&self.claimer);
            let tq = tq.clone();
            tokio::spawn(async move {
                let body = json!({"workerGroup": "g", "workerId": "w", "tasks": 1});
                loop {
                    let r = q.claimWork(&tq, &body).await;
                    let empty = r.as_ref().is_ok_and(|v| v["tasks"] == json!([]));
                    match poll {
                        Some(every) if empty => tokio::time::sleep(every).await,
                        _ => return (r, Instant::now()),
                    }
                }
            })
        };
        // A random park (slugids are random: 16 bytes from the OS generator): for a worker
        // that polls, anywhere in its poll cycle.
        let r = blackbox::slugid()
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        let park = match poll {
            Some(every) => r % (every.as_millis() as u64).max(1),
            None => 300 + r % 1200,
        };
        tokio::time::sleep(Duration::from_millis(park)).await;
        let id = blackbox::slugid();
        let start = Instant::now();
        if let Err(e) = self.creator.createTask(&id, &blackbox::task_def(&tq)).await {
            eprintln!("{}: createTask: {e}", self.name);
            return false;
        }
        let created = start.elapsed();
        match waiting.await {
            Ok((Ok(r), _))
                if self.warm_up > 0 && r["tasks"][0]["status"]["taskId"] == id.as_str() =>
            {
                // The worker's first sighting, not counted when it is to be known.
                self.warm_up -= 1;
                true
            }
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

/// Every sample a worker's first sighting (`BENCH_SIGHTING=first`).
fn first_sightings() -> bool {
    std::env::var("BENCH_SIGHTING").as_deref() == Ok("first")
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// DynamoDB traffic of one empty claimWork of `wait` (per call, when several waited).
struct Idle {
    label: &'static str,
    requests: f64,
    read_requests: f64,
    reads: f64,
    writes: f64,
    /// Wall time of a call.
    took: Duration,
}

impl Idle {
    /// Read units as DynamoDB bills them: at least 0.5 per eventually consistent read, which
    /// DynamoDB Local does not count for an empty Query.
    fn billed_reads(&self) -> f64 {
        self.reads.max(0.5 * self.read_requests)
    }

    /// DynamoDB's price of one call.
    fn dynamodb(&self) -> f64 {
        self.billed_reads() * prices::READ_UNIT + self.writes * prices::WRITE_UNIT
    }
}

/// `waiters` empty claimWork calls of `wait` at once on one task queue in one process (as
/// many workers wait on a claim service task), counted per call.
async fn idle_claim(
    prefix: &str,
    label: &'static str,
    signal: Arc<dyn WorkSignal>,
    slots: Option<u32>,
    wait: Duration,
    waiters: usize,
) -> Idle {
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let store = Arc::new(DynamoStore::new(&sdk, prefix).expect("store"));
    let usage = store.usage();
    let queue = Arc::new(Queue::new(
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
    ));
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("task queue id");
    let round = || async {
        let started = Instant::now();
        let calls: Vec<_> = (0..waiters)
            .map(|i| {
                let (queue, tq) = (queue.clone(), tq.clone());
                tokio::spawn(async move {
                    let w = format!("w{i}");
                    queue
                        .claim_work(&tq, "g", &w, 1, &shared::time::Ts::now)
                        .await
                        .expect("claimWork")
                })
            })
            .collect();
        for c in calls {
            assert!(c.await.expect("call").is_empty());
        }
        started.elapsed()
    };
    // The first round records each worker and the task queue (a process does that once per
    // 30 minutes); an idle worker's calls are the ones after.
    round().await;
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed) as f64;
    let before = [
        count(&usage.requests),
        count(&usage.read_requests),
        count(&usage.read_milli),
        count(&usage.write_milli),
    ];
    let took = round().await;
    let n = waiters.max(1) as f64;
    Idle {
        label,
        requests: (count(&usage.requests) - before[0]) / n,
        read_requests: (count(&usage.read_requests) - before[1]) / n,
        reads: (count(&usage.read_milli) - before[2]) / 1e3 / n,
        writes: (count(&usage.write_milli) - before[3]) / 1e3 / n,
        took,
    }
}

fn main() {
    let samples: usize = env_num("BENCH_PICKUPS", 30usize);
    let setups: Vec<String> = std::env::var("BENCH_SETUPS")
        .unwrap_or_else(|_| "local,old,poll,broker,lambda,service,service5,short".into())
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
    let sighting = if first_sightings() {
        "every claim a first sighting"
    } else {
        "a known worker"
    };
    println!(
        "== claimWork pickup across processes (nproc={nproc}, {samples} samples per setup, {sighting}) =="
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
        // The deployed shape in each claim mode (the template's ClaimMode).
        let mut shapes: Vec<(&str, Shape)> = vec![];
        let poller = Duration::from_secs(5);
        for (key, name, params, poll) in [
            (
                "lambda",
                "lambda: claim-work / create-task functions, broker",
                vec![],
                None,
            ),
            (
                "service",
                "service: tc-queue behind the gateway, broker",
                vec![("ClaimMode", "service"), ("ClaimServiceImage", "local")],
                None,
            ),
            (
                "service5",
                "service, a worker polling every 5 s",
                vec![("ClaimMode", "service"), ("ClaimServiceImage", "local")],
                Some(poller),
            ),
            (
                "short",
                "lambda-short (0 s wait), a worker polling every 5 s",
                vec![("ClaimMode", "lambda-short")],
                Some(poller),
            ),
        ] {
            if !on(key) {
                continue;
            }
            let stack = format!("pick{key}{suffix}");
            let mut sc = ShapeConfig::for_bench(&stack);
            sc.parameters.extend(
                params
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string())),
            );
            match Shape::start(sc).await {
                Ok(s) => {
                    let setup = Setup::new(name, &s.root_url(), &s.root_url());
                    list.push(match poll {
                        Some(every) => setup.polling(every),
                        None => setup,
                    });
                    shapes.push((key, s));
                }
                Err(e) => eprintln!("the deployed shape ({key}) did not start: {e}"),
            }
        }
        let shape_of = |key: &str| shapes.iter().find(|(k, _)| *k == key).map(|(_, s)| s);
        // Warm-up: connections, cold starts, tables.
        for s in list.iter_mut() {
            for _ in 0..3 {
                s.sample().await;
            }
            s.pickups.clear();
            s.creates.clear();
        }
        // The claim-work instances' CPU from here on: warm invocations only.
        let claim_pool = shape_of("lambda").and_then(|s| s.functions.get("ClaimWorkFunction"));
        let service = shape_of("service").and_then(|s| s.services.get("ClaimService").cloned());
        let cpu_now = |pool: &blackbox::shape::lambda::Pool| -> (f64, usize) {
            let cpu = pool.idle_cpu_secs();
            (cpu, pool.invocations.load(Ordering::SeqCst))
        };
        let cpu_before = claim_pool.as_deref().map(cpu_now);
        // lambda-short's claim-work function: CPU per (short) invocation.
        let short_pool = shape_of("short").and_then(|s| s.functions.get("ClaimWorkFunction"));
        let short_before = short_pool.as_deref().map(cpu_now);
        let started = Instant::now();
        for _ in 0..samples {
            for s in list.iter_mut() {
                s.sample().await;
            }
        }
        println!("(sampled in {:.0} s)", started.elapsed().as_secs_f64());
        println!();
        println!(
            "{:<52} {:>5} {:>9} {:>9} {:>9} {:>15} {:>15}",
            "setup", "n", "p50 ms", "p99 ms", "max ms", "createTask p50", "then claim p50"
        );
        for s in &list {
            // After createTask answered: the wake-up, the claim and the answer's way back.
            let then: Vec<f64> = s.pickups.iter().zip(&s.creates).map(|(p, c)| p - c).collect();
            println!(
                "{:<52} {:>5} {:>9.0} {:>9.0} {:>9.0} {:>15.0} {:>15.0}",
                s.name,
                s.pickups.len(),
                pct(&s.pickups, 0.5),
                pct(&s.pickups, 0.99),
                pct(&s.pickups, 1.0),
                pct(&s.creates, 0.5),
                pct(&then, 0.5),
            );
        }

        // The claim service's CPU per idle worker's claimWork: `BENCH_LOAD_WORKERS` workers
        // (default 200, on 10 task queues) wait at once, twice; the second round counts (the
        // first records the workers).
        let mut service_cpu_ms = None;
        if let (Some(svc), Some(shape)) = (&service, shape_of("service")) {
            let workers: usize = env_num("BENCH_LOAD_WORKERS", 200usize);
            let queues: Vec<String> = (0..10).map(|_| blackbox::task_queue_id()).collect();
            let round = |root: String| {
                let queues = queues.clone();
                async move {
                    let calls: Vec<_> = (0..workers)
                        .map(|i| {
                            let q = blackbox::queue_client(&root);
                            let tq = queues[i % queues.len()].clone();
                            tokio::spawn(async move {
                                let body = json!({"workerGroup": "g", "workerId": format!("w{i}"), "tasks": 1});
                                q.claimWork(&tq, &body).await.is_ok()
                            })
                        })
                        .collect();
                    let mut ok = 0;
                    for c in calls {
                        ok += usize::from(c.await.unwrap_or(false));
                    }
                    ok
                }
            };
            round(shape.root_url()).await;
            let (cpu0, at) = (svc.cpu_secs(), Instant::now());
            let ok = round(shape.root_url()).await;
            let per_call = 1e3 * (svc.cpu_secs() - cpu0) / ok.max(1) as f64;
            println!();
            println!(
                "claim service: {} task(s), peak RSS {:?} KiB; {workers} idle workers waiting at \
                 once ({ok} calls answered in {:.1} s): CPU {per_call:.2} ms per claimWork",
                svc.count(),
                svc.rss_kib(),
                at.elapsed().as_secs_f64()
            );
            service_cpu_ms = Some(per_call);
        }
        let mut short_cpu_ms = None;
        if let (Some(pool), Some((cpu0, calls0))) = (short_pool.as_deref(), short_before) {
            let (cpu1, calls1) = cpu_now(pool);
            let per_call = 1e3 * (cpu1 - cpu0) / (calls1 - calls0).max(1) as f64;
            println!(
                "lambda-short claim-work: CPU {per_call:.1} ms per invocation ({} invocations, \
                 its idle time between them included)",
                calls1 - calls0
            );
            short_cpu_ms = Some(per_call);
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
            let broker = || Arc::new(AmqpSignal::start(amqp.clone(), "exchange/bench-idle/v1/"));
            let sharing: usize = env_num("BENCH_WAITERS", 100usize);
            let (a, b, c, shared_reads) = tokio::join!(
                idle_claim(
                    &prefix,
                    "re-read only",
                    Arc::new(LocalSignal::default()),
                    None,
                    wait,
                    1
                ),
                idle_claim(&prefix, "broker wake-ups", broker(), None, wait, 1),
                idle_claim(
                    &prefix,
                    "broker wake-ups + wait slot",
                    broker(),
                    Some(160),
                    wait,
                    1
                ),
                idle_claim(
                    &prefix,
                    "service: waiters share reads",
                    broker(),
                    None,
                    wait,
                    sharing
                ),
            );
            // lambda-short's call, after the others (its wall time is its billed duration).
            let short = idle_claim(
                &prefix,
                "lambda-short: no wait",
                Arc::new(LocalSignal::default()),
                None,
                Duration::ZERO,
                1,
            )
            .await;
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
            for i in [&a, &b, &c] {
                let lambda = month_calls
                    * (wait.as_secs_f64() * memory_mb / 1024.0 * prices::LAMBDA_GB_S
                        + prices::LAMBDA_REQUEST
                        + prices::HTTP_API_REQUEST);
                let ddb = month_calls * i.dynamodb();
                println!(
                    "{:<30} {:>8.1} {:>6.1} {:>12.1} {:>11.1} {:>9.2} {:>10.2} {:>8.2}",
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
            for i in [&shared_reads, &short] {
                println!(
                    "{:<30} {:>8.2} {:>6.2} {:>12.2} {:>11.2}   (per call; {:.0} ms)",
                    i.label,
                    i.requests,
                    i.read_requests,
                    i.billed_reads(),
                    i.writes,
                    i.took.as_secs_f64() * 1e3
                );
            }
            println!(
                "* as billed: counted units, or 0.5 per read request where that is more (an \
                 empty Query is 0.5 on DynamoDB, 0 on DynamoDB Local)"
            );
            let costs = Costs {
                memory_mb,
                long: &c,
                short: &short,
                short_cpu_ms,
                shared: &shared_reads,
                sharing,
                service_cpu_ms,
            };
            costs.table();
        }
        for (_, s) in shapes {
            s.stop().await;
        }
        drop(servers);
    });
}
