//! Core-queue benchmark against the local server (embedded SQLite backend), in-process.
//!
//! Run: `cargo bench -p blackbox --bench lifecycle`
//!
//! Two phases:
//! 1. **Life cycles per second**: `BENCH_CLIENTS` concurrent clients (default 16), each on its
//!    own task queue, loop createTask → claimWork (tasks: 1) → reportCompleted until
//!    `BENCH_LIFECYCLES` (default 5000) life cycles are done in total.
//! 2. **Pickup latency**: `BENCH_PICKUP_SAMPLES` (default 300) times, a claimWork long poll is
//!    started, left parked for `BENCH_PARK_MS` (default 20 ms), then a task is created; we time
//!    how long after createTask the parked claimWork returns that task.
//!
//! The server and the load generator run on two separate tokio runtimes (threads named
//! `srv-*` and `load-*`), so the CPU each side burns can be read from `/proc/self/task`.
//! Other knobs: `BENCH_WARMUP` (life cycles before measuring, default 200),
//! `BENCH_MAX_SECS` (time bound per phase, default 120), `BENCH_SERVER_THREADS` and
//! `BENCH_LOAD_THREADS` (tokio worker threads per side, default 2 each).
//! No tracing subscriber is installed, so the server does not log.
//!
//! With `BENCH_LOCALSTACK=1`, phase 1 runs once more, after the embedded server has stopped,
//! against a second local server with `backend = "aws"` on fresh tables of its own on
//! LocalStack (needs the AWS environment: `AWS_ENDPOINT_URL=http://127.0.0.1:4566
//! AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test`, and
//! `bash localstack/localstack.sh start`), with `BENCH_LOCALSTACK_LIFECYCLES` (default 500),
//! `BENCH_LOCALSTACK_WARMUP` (default 50) and `BENCH_LOCALSTACK_MAX_SECS` (default 600); both
//! backends are then printed in one table. LocalStack's own CPU counts as "other processes".
//!
//! With `BENCH_SHAPE=1`, phases 1 and 2 run once more against the deployed shape (every
//! function its own process over LocalStack; `cargo build --release -p functions --bin
//! lambda` first, else the debug binary runs), with `BENCH_SHAPE_LIFECYCLES` (default 500),
//! `BENCH_SHAPE_PICKUP_SAMPLES` (default 50) and `BENCH_SHAPE_MAX_SECS` (default 1800); then
//! two bursts of `BENCH_BURST` tasks (default 5,000) are timed both on the local server (its
//! loops) and on the shape (the deadline reaper on its one-minute schedule, the expiry
//! reaper every 10 s instead of hourly, as the local server's expiry loop here): from the
//! shared deadline (or expiry) until no task is left due, with the scheduled invocations and
//! the CPU they took (on the shape, the reaper's schedule is disabled while the burst is
//! seeded, and counted from when it is enabled again). The expiry burst runs on a server (and a stack) of its own whose
//! deadline reaper waits an hour, so that it times deletions alone.

use blackbox::burst::{burst_deadline, due, held_deadline, seed};
use blackbox::env_num;
use serde_json::{json, Value};
use shared::events::{Event, EventSink};
use shared::jobs::declare::{DEADLINE_REAPER, EXPIRY_REAPER};
use shared::records::task::index;
use shared::time::Ts;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Discards every event (no memory growth, no logging).
struct NullSink;

impl EventSink for NullSink {
    fn publish<'a, 'b, 'f>(
        &'a self,
        _events: &'b [Event],
    ) -> Pin<Box<dyn Future<Output = Result<(), shared::events::SinkError>> + Send + 'f>>
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        Box::pin(async { Ok(()) })
    }
}

/// Latency samples in microseconds.
#[derive(Default)]
struct Samples(Vec<i64>);

impl Samples {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_micros() as i64);
    }
    /// Nearest-rank percentile, in milliseconds.
    fn pct(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1] as f64 / 1000.0
    }
    fn mean(&self) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.iter().sum::<i64>() as f64 / self.0.len() as f64 / 1000.0
    }
    fn max(&self) -> f64 {
        self.0
            .iter()
            .copied()
            .max()
            .map_or(f64::NAN, |m| m as f64 / 1000.0)
    }
}

#[derive(Default)]
struct CallStats {
    create: Samples,
    claim: Samples,
    complete: Samples,
    errors: usize,
    empty_claims: usize,
}

/// CPU seconds per thread-name prefix (`srv`, `load`, other), from /proc (Linux only).
#[derive(Default, Clone, Copy, Debug)]
struct Cpu {
    srv: f64,
    load: f64,
    other: f64,
}

fn cpu_by_thread() -> Cpu {
    // Clock ticks are 100 Hz on every mainstream Linux build (sysconf(_SC_CLK_TCK)).
    const HZ: f64 = 100.0;
    let mut cpu = Cpu::default();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return cpu;
    };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // fields[0] is field 3 (state); utime is field 14, stime field 15.
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let secs = (ticks(11) + ticks(12)) / HZ;
        // The SQLite writer thread works for the server too.
        if comm.starts_with("srv") || comm.starts_with("sqlite") {
            cpu.srv += secs;
        } else if comm.starts_with("load") {
            cpu.load += secs;
        } else {
            cpu.other += secs;
        }
    }
    cpu
}

/// (busy, total) CPU seconds of the whole machine, from /proc/stat.
fn machine_cpu() -> (f64, f64) {
    const HZ: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0.0, 0.0);
    };
    let Some(line) = stat.lines().next() else {
        return (0.0, 0.0);
    };
    // cpu user nice system idle iowait irq softirq steal ...
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    if v.len() < 5 {
        return (0.0, 0.0);
    }
    let total: f64 = v.iter().sum();
    let idle = v[3] + v[4];
    ((total - idle) / HZ, total / HZ)
}

fn task_body(tq: &str) -> Vec<u8> {
    serde_json::to_vec(&blackbox::task_def(tq)).expect("task definition serializes")
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    api: String,
}

impl Client {
    /// A client of the queue under `root_url`, pooling a connection per load client.
    fn new(root_url: &str, clients: usize) -> Client {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(clients + 8)
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("http client");
        Client {
            http,
            api: format!("{root_url}/api/queue/v1"),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, String> {
        let url = format!("{}{path}", self.api);
        // Signed as the official clients sign: Hawk with the root client's credentials.
        let authorization = blackbox::root_authorization(method.as_str(), &url);
        let mut rb = self
            .http
            .request(method, url)
            .header(reqwest::header::AUTHORIZATION, authorization);
        if let Some(b) = body {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b);
        }
        let res = rb.send().await.map_err(|e| e.to_string())?;
        let status = res.status();
        let bytes = res.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "{path}: HTTP {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            ));
        }
        Ok(bytes.to_vec())
    }

    async fn create(&self, task_id: &str, tq: &str) -> Result<(), String> {
        self.call(
            reqwest::Method::PUT,
            &format!("/task/{task_id}"),
            Some(task_body(tq)),
        )
        .await
        .map(|_| ())
    }

    /// claimWork for one task; returns (taskId, runId) if one was claimed.
    async fn claim(&self, tq: &str, worker: &str) -> Result<Option<(String, u64)>, String> {
        let body = json!({ "workerGroup": "bench", "workerId": worker, "tasks": 1 });
        let bytes = self
            .call(
                reqwest::Method::POST,
                &format!("/claim-work/{tq}"),
                Some(serde_json::to_vec(&body).expect("serializes")),
            )
            .await?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        Ok(v["tasks"].get(0).map(|t| {
            (
                t["status"]["taskId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                t["runId"].as_u64().unwrap_or(0),
            )
        }))
    }

    async fn complete(&self, task_id: &str, run_id: u64) -> Result<(), String> {
        self.call(
            reqwest::Method::POST,
            &format!("/task/{task_id}/runs/{run_id}/completed"),
            None,
        )
        .await
        .map(|_| ())
    }
}

/// One client's loop: take a ticket, run a full life cycle, record latencies.
async fn lifecycle_worker(
    c: Client,
    idx: usize,
    tickets: Arc<AtomicUsize>,
    total: usize,
    deadline: Instant,
    stats: Arc<Mutex<CallStats>>,
) -> usize {
    let tq = blackbox::task_queue_id();
    let worker = format!("w{idx}");
    let mut local = CallStats::default();
    let mut done = 0;
    let mut first_error: Option<String> = None;
    while Instant::now() < deadline && tickets.fetch_add(1, Ordering::Relaxed) < total {
        let id = blackbox::slugid();
        let t0 = Instant::now();
        if let Err(e) = c.create(&id, &tq).await {
            local.errors += 1;
            first_error.get_or_insert(e);
            continue;
        }
        let t1 = Instant::now();
        local.create.push(t1 - t0);
        // The task was pending before the claim started, so one claimWork should get it;
        // retry a bounded number of times if not.
        let mut claimed = None;
        for _ in 0..3 {
            let t = Instant::now();
            match c.claim(&tq, &worker).await {
                Ok(Some(x)) => {
                    local.claim.push(t.elapsed());
                    claimed = Some(x);
                    break;
                }
                Ok(None) => local.empty_claims += 1,
                Err(e) => {
                    local.errors += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some((task_id, run_id)) = claimed else {
            continue;
        };
        if task_id != id {
            local.errors += 1;
            first_error.get_or_insert(format!("claimed {task_id}, expected {id}"));
        }
        let t2 = Instant::now();
        match c.complete(&task_id, run_id).await {
            Ok(()) => {
                local.complete.push(t2.elapsed());
                done += 1;
            }
            Err(e) => {
                local.errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        eprintln!("client {idx}: first error: {e}");
    }
    let mut s = stats.lock().unwrap();
    s.create.0.extend(local.create.0);
    s.claim.0.extend(local.claim.0);
    s.complete.0.extend(local.complete.0);
    s.errors += local.errors;
    s.empty_claims += local.empty_claims;
    done
}

/// Runs `total` life cycles with `clients` concurrent clients; returns (done, wall, stats).
async fn run_lifecycles(
    c: &Client,
    clients: usize,
    total: usize,
    max: Duration,
) -> (usize, Duration, CallStats) {
    let tickets = Arc::new(AtomicUsize::new(0));
    let stats = Arc::new(Mutex::new(CallStats::default()));
    let start = Instant::now();
    let deadline = start + max;
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            tokio::spawn(lifecycle_worker(
                c.clone(),
                i,
                tickets.clone(),
                total,
                deadline,
                stats.clone(),
            ))
        })
        .collect();
    let mut done = 0;
    for h in handles {
        done += h.await.unwrap_or(0);
    }
    let wall = start.elapsed();
    let stats = std::mem::take(&mut *stats.lock().unwrap());
    (done, wall, stats)
}

struct Pickup {
    from_create_start: Samples,
    from_create_response: Samples,
    create: Samples,
    misses: usize,
    /// Samples where claimWork returned before the createTask response arrived.
    claim_first: usize,
}

/// Parked-claimWork pickup latency.
async fn run_pickup(c: &Client, samples: usize, park: Duration, max: Duration) -> Pickup {
    let tq = blackbox::task_queue_id();
    let mut out = Pickup {
        from_create_start: Samples::default(),
        from_create_response: Samples::default(),
        create: Samples::default(),
        misses: 0,
        claim_first: 0,
    };
    let deadline = Instant::now() + max;
    for _ in 0..samples {
        if Instant::now() >= deadline {
            break;
        }
        let cc = c.clone();
        let tq2 = tq.clone();
        let waiter = tokio::spawn(async move {
            let r = cc.claim(&tq2, "pickup").await;
            (Instant::now(), r)
        });
        tokio::time::sleep(park).await;
        let id = blackbox::slugid();
        let t0 = Instant::now();
        let created = c.create(&id, &tq).await;
        let t1 = Instant::now();
        let Ok((t2, claimed)) = waiter.await else {
            out.misses += 1;
            continue;
        };
        if let Err(e) = created {
            eprintln!("pickup: createTask failed: {e}");
            out.misses += 1;
            continue;
        }
        match claimed {
            Ok(Some((task_id, run_id))) if task_id == id => {
                out.create.push(t1 - t0);
                out.from_create_start.push(t2 - t0);
                if t2 < t1 {
                    out.claim_first += 1;
                    out.from_create_response
                        .0
                        .push(-((t1 - t2).as_micros() as i64));
                } else {
                    out.from_create_response.push(t2 - t1);
                }
                let _ = c.complete(&task_id, run_id).await;
            }
            Ok(Some((task_id, run_id))) => {
                out.misses += 1;
                let _ = c.complete(&task_id, run_id).await;
            }
            Ok(None) => out.misses += 1,
            Err(e) => {
                eprintln!("pickup: claimWork failed: {e}");
                out.misses += 1;
            }
        }
    }
    out
}

/// One backend's phase-1 figures, for the table that compares backends.
struct Row {
    backend: &'static str,
    done: usize,
    total: usize,
    errors: usize,
    rate: f64,
    /// Server CPU per life cycle, microseconds.
    srv_us: f64,
    /// Other processes, % of a core.
    others_pct: f64,
    create: (f64, f64),
    claim: (f64, f64),
    complete: (f64, f64),
}

impl Row {
    fn new(
        backend: &'static str,
        total: usize,
        (done, wall, stats): &(usize, Duration, CallStats),
        cpu: Cpu,
        others: f64,
    ) -> Row {
        let secs = wall.as_secs_f64().max(1e-9);
        let p = |s: &Samples| (s.pct(50.0), s.pct(99.0));
        Row {
            backend,
            done: *done,
            total,
            errors: stats.errors,
            rate: *done as f64 / secs,
            srv_us: 1e6 * cpu.srv / (*done).max(1) as f64,
            others_pct: 100.0 * others / secs,
            create: p(&stats.create),
            claim: p(&stats.claim),
            complete: p(&stats.complete),
        }
    }
}

/// A warm-up (its errors reported under `label`), then `total` life cycles between two CPU
/// readings of `(cpu_by_thread, machine_cpu)`.
async fn measured_lifecycles(
    client: &Client,
    clients: usize,
    warmup: usize,
    total: usize,
    max: Duration,
    label: &str,
) -> (
    (usize, Duration, CallStats),
    (Cpu, (f64, f64)),
    (Cpu, (f64, f64)),
) {
    if warmup > 0 {
        let (_, _, w) = run_lifecycles(client, clients, warmup, max).await;
        if w.errors > 0 {
            eprintln!("{label}: {} errors", w.errors);
        }
    }
    let cpu0 = (cpu_by_thread(), machine_cpu());
    let lc = run_lifecycles(client, clients, total, max).await;
    let cpu1 = (cpu_by_thread(), machine_cpu());
    (lc, cpu0, cpu1)
}

/// Server CPU, and CPU of other processes, between two readings of `(cpu_by_thread,
/// machine_cpu)`.
fn cpu_between(a: (Cpu, (f64, f64)), b: (Cpu, (f64, f64))) -> (Cpu, f64) {
    let ((c0, m0), (c1, m1)) = (a, b);
    let cpu = Cpu {
        srv: c1.srv - c0.srv,
        load: c1.load - c0.load,
        other: c1.other - c0.other,
    };
    let others = ((m1.0 - m0.0) - cpu.srv - cpu.load - cpu.other).max(0.0);
    (cpu, others)
}

/// Phase 1 against a second local server on DynamoDB (LocalStack), on the same runtimes.
fn localstack_phase(
    srv_rt: &tokio::runtime::Runtime,
    load_rt: &tokio::runtime::Runtime,
    clients: usize,
) -> Option<Row> {
    let total: usize = env_num("BENCH_LOCALSTACK_LIFECYCLES", 500usize);
    let warmup: usize = env_num("BENCH_LOCALSTACK_WARMUP", 50usize);
    let max = Duration::from_secs(env_num("BENCH_LOCALSTACK_MAX_SECS", 600u64));
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = functions::ServerConfig::defaults();
    cfg.port = 0;
    cfg.bind = "127.0.0.1".into();
    cfg.data_dir = dir.path().to_path_buf();
    cfg.backend = "aws".into();
    cfg.create_tables = true;
    cfg.queue.table_prefix = format!(
        "bench{}-",
        blackbox::slugid()
            .to_ascii_lowercase()
            .replace(['-', '_'], "x")
    );
    cfg.queue.claim_work_timeout_ms = 5_000;
    cfg.artifact_reaper_interval_ms = EXPIRY_EVERY.as_millis() as u64;
    cfg.root_access_token = Some(blackbox::ROOT_ACCESS_TOKEN.into());
    let prefix = cfg.queue.table_prefix.clone();
    let running = match srv_rt.block_on(functions::start(cfg, Arc::new(NullSink))) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "BENCH_LOCALSTACK=1: the server on LocalStack did not start ({e}); is LocalStack \
                 running and the AWS environment set? (see the header of this file)"
            );
            return None;
        }
    };
    let client = Client::new(&running.root_url(), clients);
    println!();
    println!("== the same phase 1 on the LocalStack backend (DynamoDB tables {prefix}*) ==");
    println!("clients={clients} lifecycles={total} warmup={warmup}");
    let (lc, cpu0, cpu1) = load_rt.block_on(measured_lifecycles(
        &client,
        clients,
        warmup,
        total,
        max,
        "LocalStack warm-up",
    ));
    let (cpu, others) = cpu_between(cpu0, cpu1);
    let secs = lc.1.as_secs_f64();
    println!("  completed life cycles : {} of {total}", lc.0);
    println!(
        "  errors / empty claims : {} / {}",
        lc.2.errors, lc.2.empty_claims
    );
    println!("  total time            : {secs:.3} s");
    println!(
        "  throughput            : {:.0} life cycles/s",
        lc.0 as f64 / secs.max(1e-9)
    );
    println!(
        "  CPU during phase      : server {:.2} s ({:.0}% of a core), load generator {:.2} s, \
         other processes (LocalStack included) {:.2} s ({:.0}% of a core)",
        cpu.srv,
        100.0 * cpu.srv / secs.max(1e-9),
        cpu.load,
        others,
        100.0 * others / secs.max(1e-9)
    );
    drop(client);
    srv_rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(5), running.stop()).await;
    });
    Some(Row::new("LocalStack (DynamoDB)", total, &lc, cpu, others))
}

/// How often the expiry pass runs, on both shapes, for the expiry burst (deployed: hourly).
const EXPIRY_EVERY: Duration = Duration::from_secs(10);

/// What a burst measures: its tasks' deadlines passing, or their expiry.
#[derive(Clone, Copy)]
enum Kind {
    Deadline,
    Expiry,
}

/// A burst: `n` tasks sharing a deadline (and, for an expiry burst, expiring a millisecond
/// after it), then the time from that moment until none is left due in the index the reaper
/// walks. With `hold`, the reaper's schedule is disabled (`hold(false)`) while the burst is
/// seeded and enabled again once every task is due, the deadline just after seeding began
/// (the deployed shape, whose seeding goes at LocalStack's pace); without, the deadline is
/// far enough ahead to seed them all (the local server's loops).
struct Burst {
    n: usize,
    seeding: Duration,
    resolved: Option<Duration>,
}

async fn burst(
    queue: Arc<shared::queue::Queue>,
    n: usize,
    max: Duration,
    kind: Kind,
    hold: Option<&dyn Fn(bool)>,
) -> Burst {
    let tq = blackbox::task_queue_id();
    let deadline = match hold {
        Some(hold) => {
            hold(false);
            held_deadline()
        }
        None => burst_deadline(&queue, n, blackbox::task_def(&tq)).await,
    };
    let (at, idx) = match kind {
        Kind::Deadline => (deadline, index::DEADLINE),
        Kind::Expiry => (deadline.plus(1), index::TASK_EXPIRY),
    };
    let t0 = Instant::now();
    seed(&queue, n, |_| {
        let mut d = blackbox::task_def(&tq);
        d["deadline"] = json!(deadline.to_string());
        if let Kind::Expiry = kind {
            d["expires"] = json!(at.to_string());
        }
        d
    })
    .await;
    let seeding = t0.elapsed();
    while Ts::now() <= at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(hold) = hold {
        hold(true);
    }
    let since = Instant::now();
    let resolved = loop {
        if due(&queue, idx, Ts::now()).await == 0 {
            break Some(since.elapsed());
        }
        if since.elapsed() > max {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    Burst {
        n,
        seeding,
        resolved,
    }
}

fn print_burst(label: &str, what: &str, b: &Burst) {
    println!(
        "  {label}: {} tasks seeded in {:.1} s; {what} {} after",
        b.n,
        b.seeding.as_secs_f64(),
        b.resolved
            .map_or("NOT (time bound reached)".to_string(), |d| format!(
                "{:.1} s",
                d.as_secs_f64()
            ))
    );
}

/// A burst on the deployed shape, with the invocations of `handler` it took and their CPU.
struct ShapeBurst {
    burst: Burst,
    invocations: usize,
    cpu: f64,
}

fn shape_burst(
    rt: &tokio::runtime::Runtime,
    shape: &blackbox::shape::Shape,
    queue: &Arc<shared::queue::Queue>,
    (n, max, kind, handler): (usize, Duration, Kind, &str),
) -> ShapeBurst {
    // Counted from the moment the schedule is enabled again, every task due.
    let from = std::cell::Cell::new((0, 0.0));
    let hold = |on: bool| {
        if on {
            from.set((
                shape.invocations(handler),
                shape.idle_cpu_secs(Some(handler)),
            ));
        }
        shape.set_schedule_enabled(handler, on);
    };
    let burst = rt.block_on(burst(queue.clone(), n, max, kind, Some(&hold)));
    let (invocations, cpu) = from.get();
    let invocations = shape.invocations(handler) - invocations;
    // The last invocation may still be running its pass: its CPU is read once it ends (a busy
    // instance is not among the idle ones).
    let until = Instant::now() + Duration::from_secs(300);
    while Instant::now() < until
        && shape
            .functions
            .all()
            .any(|p| p.def.handler == handler && p.instances() > p.idle_pids().len())
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    ShapeBurst {
        burst,
        invocations,
        cpu: shape.idle_cpu_secs(Some(handler)) - cpu,
    }
}

/// What the deployed shape measured: phase 1 (with its functions' CPU per life cycle),
/// phase 2 and the two bursts.
struct Shaped {
    row: Row,
    functions_cpu_per_lifecycle: f64,
    pickup: Pickup,
    deadline: ShapeBurst,
    expiry: ShapeBurst,
}

/// A deployed shape on LocalStack, on a stack of its own (named with its tables), its expiry
/// reaper every EXPIRY_EVERY rather than hourly, as on the local server, and the path of its
/// `lambda`. `for_expiry` keeps the deadline reaper for an hour rather than a minute (see
/// [`local_server`]).
fn start_shape(
    srv_rt: &tokio::runtime::Runtime,
    for_expiry: bool,
) -> Option<(String, blackbox::shape::Shape, String)> {
    let stack = blackbox::fresh_name("bench", 8);
    let mut sc = blackbox::shape::ShapeConfig::for_bench(&stack);
    sc.env
        .insert("TCQ_CLAIM_WORK_TIMEOUT_MS".into(), "5000".into());
    sc.periods.insert(EXPIRY_REAPER.name.into(), EXPIRY_EVERY);
    if for_expiry {
        sc.periods
            .insert(DEADLINE_REAPER.name.into(), Duration::from_secs(3600));
    }
    let lambda = sc.lambda_bin.display().to_string();
    match srv_rt.block_on(blackbox::shape::Shape::start(sc)) {
        Ok(s) => Some((stack, s, lambda)),
        Err(e) => {
            eprintln!(
                "BENCH_SHAPE=1: the deployed shape did not start ({e}); is LocalStack running?"
            );
            None
        }
    }
}

/// The local server on the embedded backend, in `dir`, its expiry pass every EXPIRY_EVERY.
/// `for_expiry` runs the deadline reaper hourly: deployed, tasks expire months after their
/// deadline was handled, so an expiry burst times deletions alone rather than 5,000
/// resolutions and their events first.
fn local_server(
    srv_rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    for_expiry: bool,
) -> functions::Running {
    let mut cfg = functions::ServerConfig::defaults();
    cfg.port = 0;
    cfg.bind = "127.0.0.1".into();
    cfg.data_dir = dir.to_path_buf();
    // Always the embedded backend, whatever TCQ_BACKEND says.
    cfg.backend = "embedded".into();
    cfg.queue.claim_work_timeout_ms = 5_000;
    cfg.artifact_reaper_interval_ms = EXPIRY_EVERY.as_millis() as u64;
    if for_expiry {
        cfg.reaper_interval_ms = 3_600_000;
    }
    cfg.root_access_token = Some(blackbox::ROOT_ACCESS_TOKEN.into());
    srv_rt
        .block_on(functions::start(cfg, Arc::new(NullSink)))
        .expect("server starts")
}

/// Phases 1 and 2, and the two bursts, against the deployed shape on LocalStack.
fn shape_phase(
    srv_rt: &tokio::runtime::Runtime,
    load_rt: &tokio::runtime::Runtime,
    clients: usize,
    burst: usize,
) -> Option<Shaped> {
    let total: usize = env_num("BENCH_SHAPE_LIFECYCLES", 500usize);
    let samples: usize = env_num("BENCH_SHAPE_PICKUP_SAMPLES", 50usize);
    let max = Duration::from_secs(env_num("BENCH_SHAPE_MAX_SECS", 1800u64));
    let (stack, shape, lambda) = start_shape(srv_rt, false)?;
    let client = Client::new(&shape.root_url(), clients);
    println!();
    println!("== phases 1 and 2 on the deployed shape (stack {stack}, {lambda}) ==");
    println!("clients={clients} lifecycles={total} pickup samples={samples}");
    let fn_cpu0 = shape.idle_cpu_secs(None);
    let (lc, cpu0, cpu1) = load_rt.block_on(measured_lifecycles(
        &client,
        clients,
        total / 10,
        total,
        max,
        "shape warm-up",
    ));
    let (cpu, others) = cpu_between(cpu0, cpu1);
    // Every function's CPU over the warm-up and the measured life cycles (cold starts and
    // background invocations included), read once every instance is idle again.
    std::thread::sleep(Duration::from_secs(6));
    let fn_cpu = (shape.idle_cpu_secs(None) - fn_cpu0) / (lc.0 + total / 10).max(1) as f64;
    let pickup = load_rt.block_on(run_pickup(&client, samples, Duration::from_millis(20), max));
    let row = Row::new("deployed shape (LocalStack)", total, &lc, cpu, others);
    let queue = load_rt.block_on(blackbox::shape_queue(&stack));
    let deadline = shape_burst(
        load_rt,
        &shape,
        &queue,
        (burst, max, Kind::Deadline, DEADLINE_REAPER.name),
    );
    srv_rt.block_on(shape.stop());
    let (stack, shape, _) = start_shape(srv_rt, true)?;
    let queue = load_rt.block_on(blackbox::shape_queue(&stack));
    let expiry = shape_burst(
        load_rt,
        &shape,
        &queue,
        (burst, max, Kind::Expiry, EXPIRY_REAPER.name),
    );
    srv_rt.block_on(shape.stop());
    Some(Shaped {
        functions_cpu_per_lifecycle: fn_cpu,
        row,
        pickup,
        deadline,
        expiry,
    })
}

fn runtime(name: &'static str, threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The allocator `tc-queue` ships with, so that counts and rates are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let clients: usize = env_num("BENCH_CLIENTS", 16usize).max(1);
    let total: usize = env_num("BENCH_LIFECYCLES", 5000usize);
    let warmup: usize = env_num("BENCH_WARMUP", 200usize);
    let pickup_samples: usize = env_num("BENCH_PICKUP_SAMPLES", 300usize);
    let park = Duration::from_millis(env_num("BENCH_PARK_MS", 20u64));
    let max = Duration::from_secs(env_num("BENCH_MAX_SECS", 120u64));
    let srv_threads: usize = env_num("BENCH_SERVER_THREADS", 2usize);
    let load_threads: usize = env_num("BENCH_LOAD_THREADS", 2usize);
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release (bench)"
    };

    // Server: its own runtime, its own threads (`srv-*`), its own data directory.
    let srv_rt = runtime("srv", srv_threads);
    let dir = tempfile::tempdir().expect("temp dir");
    let running = local_server(&srv_rt, dir.path(), false);

    // Load generator: one shared connection pool.
    let load_rt = runtime("load", load_threads);
    let client = Client::new(&running.root_url(), clients);

    println!("== tc-queue core benchmark: local server, embedded SQLite backend ==");
    println!(
        "nproc={nproc} profile={profile} clients={clients} lifecycles={total} warmup={warmup} \
         server_threads={srv_threads} load_threads={load_threads}"
    );

    let (lc, pickup, cpu0, cpu1) = load_rt.block_on(async {
        let (lc, cpu0, cpu1) =
            measured_lifecycles(&client, clients, warmup, total, max, "warm-up").await;
        let pickup = run_pickup(&client, pickup_samples, park, max).await;
        (lc, pickup, cpu0, cpu1)
    });
    let (done, wall, stats) = lc;

    let rate = done as f64 / wall.as_secs_f64();
    let (m_busy, m_total) = ((cpu1.1).0 - (cpu0.1).0, (cpu1.1).1 - (cpu0.1).1);
    let (cpu, others) = cpu_between(cpu0, cpu1);
    let secs = wall.as_secs_f64();

    println!();
    println!("Life cycles (createTask -> claimWork -> reportCompleted)");
    println!("  completed life cycles : {done} of {total}");
    println!(
        "  errors / empty claims : {} / {}",
        stats.errors, stats.empty_claims
    );
    println!("  total time            : {secs:.3} s");
    println!("  throughput            : {rate:.0} life cycles/s");
    println!(
        "  CPU during phase      : server {:.2} s ({:.0}% of a core), load generator {:.2} s \
         ({:.0}%), other {:.2} s; per life cycle: server {:.0} us, load {:.0} us",
        cpu.srv,
        100.0 * cpu.srv / secs,
        cpu.load,
        100.0 * cpu.load / secs,
        cpu.other,
        1e6 * cpu.srv / done.max(1) as f64,
        1e6 * cpu.load / done.max(1) as f64,
    );
    println!(
        "  machine CPU           : {:.0}% busy of {nproc} cores; other processes used {:.2} s \
         ({:.0}% of a core){}",
        100.0 * m_busy / m_total.max(1e-9),
        others,
        100.0 * others / secs,
        if others / secs > 0.2 {
            "  <-- machine not idle, figures are pessimistic"
        } else {
            ""
        }
    );
    println!();
    println!("  | call            |  count |  p50 ms |  p99 ms | mean ms |  max ms |");
    println!("  |-----------------|--------|---------|---------|---------|---------|");
    for (name, s) in [
        ("createTask", &stats.create),
        ("claimWork", &stats.claim),
        ("reportCompleted", &stats.complete),
    ] {
        println!(
            "  | {name:<15} | {:>6} | {:>7.2} | {:>7.2} | {:>7.2} | {:>7.2} |",
            s.0.len(),
            s.pct(50.0),
            s.pct(99.0),
            s.mean(),
            s.max()
        );
    }

    println!();
    println!(
        "Pickup latency (claimWork parked {} ms before createTask)",
        park.as_millis()
    );
    println!(
        "  samples {} (misses {}, claim returned before create response {})",
        pickup.from_create_start.0.len(),
        pickup.misses,
        pickup.claim_first
    );
    println!("  | measure                         |  p50 ms |  p99 ms |  max ms |");
    println!("  |---------------------------------|---------|---------|---------|");
    for (name, s) in [
        ("createTask call", &pickup.create),
        ("pickup from createTask start", &pickup.from_create_start),
        (
            "pickup from createTask response",
            &pickup.from_create_response,
        ),
    ] {
        println!(
            "  | {name:<31} | {:>7.2} | {:>7.2} | {:>7.2} |",
            s.pct(50.0),
            s.pct(99.0),
            s.max()
        );
    }

    let p50_pickup = pickup.from_create_start.pct(50.0);
    println!();
    println!("Summary");
    println!("  | metric                         | target   | measured     | result |");
    println!("  |--------------------------------|----------|--------------|--------|");
    println!(
        "  | life cycles/s ({clients:>3} clients)    | >= 1000  | {rate:>9.0}/s  | {:<6} |",
        if rate >= 1000.0 { "met" } else { "MISSED" }
    );
    println!(
        "  | pickup p50 (from create start) | <= 20 ms | {p50_pickup:>9.2} ms | {:<6} |",
        if p50_pickup <= 20.0 { "met" } else { "MISSED" }
    );

    let shape = std::env::var("BENCH_SHAPE").as_deref() == Ok("1");
    let burst: usize = env_num("BENCH_BURST", 5000usize);
    let local_bursts = shape.then(|| {
        let timed = |running: &functions::Running, kind| {
            let before = cpu_by_thread().srv;
            let b = load_rt.block_on(self::burst(
                running.api.queue.clone(),
                burst,
                max,
                kind,
                None,
            ));
            (b, cpu_by_thread().srv - before)
        };
        let deadline = timed(&running, Kind::Deadline);
        let dir = tempfile::tempdir().expect("temp dir");
        let alone = local_server(&srv_rt, dir.path(), true);
        let expiry = timed(&alone, Kind::Expiry);
        srv_rt.block_on(async {
            let _ = tokio::time::timeout(Duration::from_secs(5), alone.stop()).await;
        });
        (deadline, expiry)
    });

    drop(client);
    srv_rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(5), running.stop()).await;
    });
    if let Some(((ld, ld_cpu), (le, le_cpu))) = local_bursts {
        let shaped = shape_phase(&srv_rt, &load_rt, clients, burst);
        println!();
        println!("Local server beside the deployed shape (same run, {clients} clients)");
        println!(
            "  | shape | life cycles/s | CPU per life cycle | pickup p50 / p99 ms (from \
             createTask start) | {burst}-task deadline burst resolved | {burst} expired tasks \
             deleted |"
        );
        println!("  |---|---|---|---|---|---|");
        let secs = |b: &Burst| {
            b.resolved.map_or("not within the bound".into(), |d| {
                format!("{:.1} s", d.as_secs_f64())
            })
        };
        let local_pass = |b: &Burst, cpu: f64| {
            format!(
                "{} after, by the server's loop; {:.2} ms CPU a task",
                secs(b),
                1e3 * cpu / b.n.max(1) as f64
            )
        };
        println!(
            "  | local server (embedded) | {rate:.0} | {:.2} ms (server) | {:.2} / {:.2} | {} | {} |",
            1e3 * cpu.srv / done.max(1) as f64,
            pickup.from_create_start.pct(50.0),
            pickup.from_create_start.pct(99.0),
            local_pass(&ld, ld_cpu),
            local_pass(&le, le_cpu)
        );
        if let Some(sh) = &shaped {
            let invoked = |b: &ShapeBurst| {
                format!(
                    "{} after, in {} scheduled invocations; {:.2} ms function CPU a task",
                    secs(&b.burst),
                    b.invocations,
                    1e3 * b.cpu / b.burst.n.max(1) as f64
                )
            };
            println!(
                "  | deployed shape (LocalStack) | {:.0} | {:.2} ms (every function) | {:.2} / {:.2} | {} | {} |",
                sh.row.rate,
                1e3 * sh.functions_cpu_per_lifecycle,
                sh.pickup.from_create_start.pct(50.0),
                sh.pickup.from_create_start.pct(99.0),
                invoked(&sh.deadline),
                invoked(&sh.expiry)
            );
            print_burst("deployed shape", "deadlines resolved", &sh.deadline.burst);
            print_burst("deployed shape", "expired tasks deleted", &sh.expiry.burst);
        }
        print_burst("local server", "deadlines resolved", &ld);
        print_burst("local server", "expired tasks deleted", &le);
    }
    if std::env::var("BENCH_LOCALSTACK").as_deref() == Ok("1") {
        let embedded = Row::new(
            "embedded (SQLite)",
            total,
            &(done, wall, stats),
            cpu,
            others,
        );
        let rows: Vec<Row> = std::iter::once(embedded)
            .chain(localstack_phase(&srv_rt, &load_rt, clients))
            .collect();
        println!();
        println!("Life cycles per second by backend (same run, {clients} clients)");
        println!(
            "  | backend | life cycles | life cycles/s | server CPU per life cycle | \
             createTask p50 / p99 ms | claimWork p50 / p99 ms | reportCompleted p50 / p99 ms | \
             other processes |"
        );
        println!("  |---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "  | {} | {} of {} ({} errors) | {:.0} | {:.2} ms | {:.2} / {:.2} | \
                 {:.2} / {:.2} | {:.2} / {:.2} | {:.0}% of a core |",
                r.backend,
                r.done,
                r.total,
                r.errors,
                r.rate,
                r.srv_us / 1000.0,
                r.create.0,
                r.create.1,
                r.claim.0,
                r.claim.1,
                r.complete.0,
                r.complete.1,
                r.others_pct
            );
        }
    }
    drop(load_rt);
    drop(srv_rt);
}
