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
//! second, each call's p50/p99, the server's CPU per life cycle (utime + stime of its
//! processes over the measured window), the load generator's, and the rest of the machine's.
//!
//! Side by side with another server that speaks the same API (upstream's queue, say, built
//! and started by you): `BENCH_EXTERNAL_ROOT` (its root URL), `BENCH_EXTERNAL_PIDS` (the
//! processes whose CPU is its own, each counted with every descendant: its web and background
//! processes, its database's postmaster), `BENCH_EXTERNAL_NAME`. `BENCH_ROUNDS` windows of
//! each then run interleaved, and the medians and their ratio are printed.
//! `BENCH_APART_PIDS` names processes measured beside but counted for neither (a broker, a
//! proxy in front of the other server).

use blackbox::env_num;
use blackbox::release::{cpu_time, machine_cpu, tree_cpu, ReleaseServer};
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

/// A server the workers drive: its root URL and the processes whose CPU is its own.
struct Target {
    name: String,
    root: String,
    /// Process trees counted as the server (every descendant included).
    pids: Vec<u32>,
}

/// One measured window of one target.
struct Window {
    lifecycles: usize,
    wall: Duration,
    calls: Calls,
    server: Option<Duration>,
    /// Each of the target's process trees, where it has more than one.
    roots: Vec<(u32, Option<Duration>)>,
    apart: Option<Duration>,
    load: Option<Duration>,
    others: Option<Duration>,
}

fn pids_from(var: &str) -> Vec<u32> {
    std::env::var(var)
        .unwrap_or_default()
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{var}: {s} is not a pid"))
        })
        .collect()
}

/// Drives `target` with `workers` workers: `warmup` seconds, then `secs` measured.
async fn window(target: &Target, apart: &[u32], workers: usize, warmup: u64, secs: u64) -> Window {
    let (stop, measuring) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let calls = Arc::new(Mutex::new(Calls::default()));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            tokio::spawn(worker(
                target.root.clone(),
                stop.clone(),
                measuring.clone(),
                calls.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    let each = || -> Vec<Option<Duration>> {
        match target.pids.len() {
            0 | 1 => vec![],
            _ => target.pids.iter().map(|p| tree_cpu(&[*p])).collect(),
        }
    };
    let read = || {
        (
            tree_cpu(&target.pids),
            tree_cpu(apart),
            cpu_time("self"),
            machine_cpu(),
        )
    };
    let (before, roots0) = (read(), each());
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let wall = t0.elapsed();
    let (after, roots1) = (read(), each());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let calls = std::mem::take(&mut *calls.lock().unwrap_or_else(|p| p.into_inner()));
    let diff = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?));
    let roots = target
        .pids
        .iter()
        .zip(roots0.into_iter().zip(roots1))
        .map(|(pid, (a, b))| (*pid, diff(a, b)))
        .collect();
    let (server, apart, load) = (
        diff(before.0, after.0),
        diff(before.1, after.1),
        diff(before.2, after.2),
    );
    let busy = diff(before.3.map(|m| m.0), after.3.map(|m| m.0));
    let others = busy
        .zip(server.zip(apart).zip(load))
        .map(|(b, ((s, a), l))| b.saturating_sub(s + a + l));
    Window {
        lifecycles: calls.complete.len(),
        wall,
        calls,
        server,
        roots,
        apart,
        load,
        others,
    }
}

/// A process's command line, shortened, to tell a target's processes apart.
fn command(pid: u32) -> String {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = line
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    // The last words tell most (a script and its subcommand).
    let tail = words[words.len().saturating_sub(2)..].join(" ");
    tail.chars().take(60).collect()
}

#[tokio::main]
async fn main() {
    let workers: usize = env_num("BENCH_WORKERS", 16);
    let secs: u64 = env_num("BENCH_SECS", 30);
    let warmup: u64 = env_num("BENCH_WARMUP_SECS", 3);
    let rounds: usize = env_num("BENCH_ROUNDS", 1);
    let amqp = std::env::var("BENCH_AMQP_URL")
        .unwrap_or_else(|_| blackbox::amqp::amqp_url(&blackbox::amqp::broker_addr()));
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ReleaseServer::start(dir.path(), &[("TCQ_AMQP_URL", amqp)]).await;
    let mut targets = vec![Target {
        name: "tc-queue".into(),
        root: server.root.clone(),
        pids: vec![server.pid()],
    }];
    if let Ok(root) = std::env::var("BENCH_EXTERNAL_ROOT") {
        targets.push(Target {
            name: std::env::var("BENCH_EXTERNAL_NAME").unwrap_or_else(|_| "external".into()),
            root,
            pids: pids_from("BENCH_EXTERNAL_PIDS"),
        });
    }
    let apart = pids_from("BENCH_APART_PIDS");
    let nproc = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!("== workload: {workers} workers, official Rust client over HTTP, RabbitMQ on (nproc={nproc}) ==");
    let mut per_target: Vec<Vec<f64>> = vec![vec![]; targets.len()];
    for round in 1..=rounds {
        for (i, target) in targets.iter().enumerate() {
            let mut w = window(target, &apart, workers, warmup, secs).await;
            let n = w.lifecycles;
            let per = |d: Option<Duration>| {
                d.filter(|_| n > 0)
                    .map(|d| d.as_secs_f64() * 1e3 / n as f64)
            };
            println!("-- {} (round {round} of {rounds}) --", target.name);
            println!(
                "life cycles: {n} in {:.1} s = {:.0}/s",
                w.wall.as_secs_f64(),
                n as f64 / w.wall.as_secs_f64()
            );
            for (name, v) in [
                ("createTask", &mut w.calls.create),
                ("claimWork", &mut w.calls.claim),
                ("reportCompleted", &mut w.calls.complete),
            ] {
                println!(
                    "{name:>16}: p50 {:.2} ms, p99 {:.2} ms",
                    pct(v, 0.5),
                    pct(v, 0.99)
                );
            }
            if let Some(ms) = per(w.server) {
                println!("server CPU per life cycle: {ms:.2} ms");
                per_target[i].push(ms);
            }
            for (pid, cpu) in &w.roots {
                if let Some(ms) = per(*cpu) {
                    println!(
                        "  of it, process {pid} ({}) and its children: {ms:.2} ms",
                        command(*pid)
                    );
                }
            }
            if !apart.is_empty() {
                if let Some(ms) = per(w.apart) {
                    println!("processes apart (BENCH_APART_PIDS) per life cycle: {ms:.2} ms");
                }
            }
            if let Some(ms) = per(w.load) {
                println!("load generator CPU per life cycle: {ms:.2} ms");
            }
            if let Some(others) = w.others {
                let span = w.wall.as_secs_f64() * nproc as f64;
                println!(
                    "rest of the machine: {:.0} ms of CPU ({:.1} % of {nproc} CPUs over the window)",
                    others.as_secs_f64() * 1e3,
                    100.0 * others.as_secs_f64() / span,
                );
            }
        }
    }
    if targets.len() > 1 || rounds > 1 {
        println!("== server CPU per life cycle, median of {rounds} ==");
        let medians: Vec<Option<f64>> = per_target
            .into_iter()
            .map(|mut v| (!v.is_empty()).then(|| pct(&mut v, 0.5)))
            .collect();
        for (t, m) in targets.iter().zip(&medians) {
            if let Some(m) = m {
                println!("{:>16}: {m:.2} ms", t.name);
            }
        }
        if let (Some(Some(ours)), Some(Some(theirs))) = (medians.first(), medians.get(1)) {
            println!(
                "ratio {} / {}: {:.2}×",
                targets[1].name,
                targets[0].name,
                theirs / ours
            );
        }
    }
}
