//! The workload users run, against the release `tc-queue` as its own process: workers loop
//! createTask → claimWork → reportCompleted through the official Rust client (every request
//! Hawk-signed, over HTTP), with events published to RabbitMQ (confirms) and the task-graph
//! scheduler's consumer running, as by default.
//!
//! Run (RabbitMQ on 127.0.0.1:5672):
//!   cargo build --release -p functions --bin tc-queue
//!   cargo bench -p blackbox --bench workload
//!
//! Knobs: `BENCH_WORKERS` (16, each on a task queue of its own), `BENCH_SECS` (30, measured),
//! `BENCH_WARMUP_SECS` (3), `BENCH_AMQP_URL` (the machine's broker). Prints life cycles per
//! second, each call's p50/p99, the server's CPU per life cycle (utime + stime of its process
//! over the measured window), the load generator's, and the rest of the machine's.

use blackbox::env_num;
use blackbox::release::{cpu_time, machine_cpu, ReleaseServer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per-call latencies (ms) of the measured window.
#[derive(Default)]
struct Calls {
    create: Vec<f64>,
    claim: Vec<f64>,
    complete: Vec<f64>,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, f64) {
    let t = Instant::now();
    let out = f.await;
    (out, t.elapsed().as_secs_f64() * 1e3)
}

/// One worker's loop until `stop`; latencies are kept once `measuring` is set.
async fn worker(
    root: String,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
    calls: Arc<Mutex<Calls>>,
) {
    let q = blackbox::queue_client(&root);
    let tq = blackbox::task_queue_id();
    let body = serde_json::json!({"workerGroup": "bench", "workerId": "w", "tasks": 1});
    while !stop.load(Ordering::Relaxed) {
        let id = blackbox::slugid();
        let (r, create) = timed(q.createTask(&id, &blackbox::task_def(&tq))).await;
        r.expect("createTask");
        let (r, claim) = timed(q.claimWork(&tq, &body)).await;
        let got = r.expect("claimWork");
        assert_eq!(got["tasks"][0]["status"]["taskId"], id.as_str());
        let (r, complete) = timed(q.reportCompleted(&id, "0")).await;
        r.expect("reportCompleted");
        if measuring.load(Ordering::Relaxed) {
            let mut c = calls.lock().unwrap_or_else(|p| p.into_inner());
            c.create.push(create);
            c.claim.push(claim);
            c.complete.push(complete);
        }
    }
}

#[tokio::main]
async fn main() {
    let workers: usize = env_num("BENCH_WORKERS", 16);
    let secs: u64 = env_num("BENCH_SECS", 30);
    let warmup: u64 = env_num("BENCH_WARMUP_SECS", 3);
    let amqp = std::env::var("BENCH_AMQP_URL")
        .unwrap_or_else(|_| blackbox::amqp::amqp_url(&blackbox::amqp::broker_addr()));
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ReleaseServer::start(dir.path(), &[("TCQ_AMQP_URL", amqp)]).await;
    let (stop, measuring) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let calls = Arc::new(Mutex::new(Calls::default()));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            tokio::spawn(worker(
                server.root.clone(),
                stop.clone(),
                measuring.clone(),
                calls.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let pid = server.pid().to_string();
    let (srv0, own0, mach0) = (cpu_time(&pid), cpu_time("self"), machine_cpu());
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let wall = t0.elapsed();
    let (srv1, own1, mach1) = (cpu_time(&pid), cpu_time("self"), machine_cpu());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let mut c = std::mem::take(&mut *calls.lock().unwrap_or_else(|p| p.into_inner()));
    let n = c.complete.len();
    let nproc = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!("== workload: {workers} workers, official Rust client over HTTP, RabbitMQ on (nproc={nproc}) ==");
    println!(
        "life cycles: {n} in {:.1} s = {:.0}/s",
        wall.as_secs_f64(),
        n as f64 / wall.as_secs_f64()
    );
    for (name, v) in [
        ("createTask", &mut c.create),
        ("claimWork", &mut c.claim),
        ("reportCompleted", &mut c.complete),
    ] {
        println!(
            "{name:>16}: p50 {:.2} ms, p99 {:.2} ms",
            pct(v, 0.5),
            pct(v, 0.99)
        );
    }
    let per = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) if n > 0 => Some((b - a).as_secs_f64() * 1e3 / n as f64),
        _ => None,
    };
    if let Some(ms) = per(srv0, srv1) {
        println!("server CPU per life cycle: {ms:.2} ms");
    }
    if let Some(ms) = per(own0, own1) {
        println!("load generator CPU per life cycle: {ms:.2} ms");
    }
    if let (Some((b0, _)), Some((b1, _)), Some(s0), Some(s1), Some(o0), Some(o1)) =
        (mach0, mach1, srv0, srv1, own0, own1)
    {
        let others = (b1 - b0).saturating_sub((s1 - s0) + (o1 - o0));
        let span = wall.as_secs_f64() * nproc as f64;
        println!(
            "rest of the machine: {:.0} ms of CPU ({:.1} % of {nproc} CPUs over the window)",
            others.as_secs_f64() * 1e3,
            100.0 * others.as_secs_f64() / span,
        );
    }
}
