//! Warm CPU per invocation of each function as deployed (issue 41.3): the deployed shape
//! (every function of `infra/template.yaml` its own `lambda` process behind the Runtime API
//! emulator, over LocalStack and RabbitMQ) serves life cycles of the official Rust client one
//! at a time (createTask → claimWork → reportCompleted, events on), so each function keeps one
//! warm instance. After `BENCH_WARMUP` life cycles (default 30), the CPU of every function's
//! processes (user and system, from each one's CPU clock, in ns) and its invocations are read,
//! `BENCH_LIFECYCLES` more run (default 200), and they are read again once every instance is
//! idle: the table gives each function's CPU per invocation and per life cycle over the
//! measured ones, warm only (a function that started an instance meanwhile is marked). The
//! stream functions' invocations each take a batch of records; the publisher's CPU is also
//! given per event.
//! A second table models each function's billed duration and price at 128–1024 MB from its
//! CPU and its wait (see `billed_by_memory`). Last, `BENCH_LIFECYCLES` pings give the floor
//! under every endpoint: the CPU of an invocation that checks no credentials and reads nothing.
//!
//! Run:
//!   cargo build --release -p functions --bin lambda
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench function_cpu
//!
//! Without a release `lambda` the debug one runs (and says so); `BENCH_LAMBDA_BIN` picks
//! another binary (to compare two builds, run each in turn). `BENCH_PIDS=1` prints each
//! function's process ids before the measured life cycles, for a profiler to attach to.

use blackbox::shape::{FunctionUsage, Shape, ShapeConfig};
use blackbox::{env_num, queue_client, task_def, task_queue_id};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Task events a life cycle publishes: defined, pending, running, completed.
const EVENTS_PER_LIFECYCLE: usize = 4;

/// Runs `n` life cycles one after another on one task queue of its own.
async fn lifecycles(q: &taskcluster::Queue, n: usize) {
    let tq = task_queue_id();
    let claim = json!({"workerGroup": "bench", "workerId": "w1", "tasks": 1});
    for _ in 0..n {
        let id = blackbox::slugid();
        q.createTask(&id, &task_def(&tq)).await.expect("createTask");
        let got = q.claimWork(&tq, &claim).await.expect("claimWork");
        assert_eq!(got["tasks"][0]["status"]["taskId"], id.as_str(), "claimed");
        q.reportCompleted(&id, "0").await.expect("reportCompleted");
    }
}

/// Every function's usage once no instance is busy (stream and schedule invocations that
/// the last life cycles started included).
async fn settled_usage(shape: &Shape) -> BTreeMap<String, FunctionUsage> {
    let mut last = shape.all_invocations();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = shape.all_invocations();
        if now == last {
            break;
        }
        last = now;
    }
    shape
        .usage()
        .into_iter()
        .map(|u| (u.id.clone(), u))
        .collect()
}

#[tokio::main]
async fn main() {
    let warmup: usize = env_num("BENCH_WARMUP", 30usize);
    let n: usize = env_num("BENCH_LIFECYCLES", 200usize).max(1);
    if std::env::var("AWS_ENDPOINT_URL").is_err() {
        eprintln!("needs LocalStack and the AWS environment: see the header of this file");
        std::process::exit(2);
    }
    let stack = blackbox::fresh_name("fcpu", 8);
    let mut sc = ShapeConfig::for_bench(&stack);
    if let Ok(bin) = std::env::var("BENCH_LAMBDA_BIN") {
        sc.lambda_bin = bin.into();
    }
    let bin = sc.lambda_bin.display().to_string();
    let shape = match Shape::start(sc).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("the deployed shape did not start ({e}); is LocalStack running?");
            std::process::exit(2);
        }
    };
    let q = queue_client(&shape.root_url());
    lifecycles(&q, warmup.max(1)).await;
    q.ping().await.expect("ping");
    let before = settled_usage(&shape).await;
    if std::env::var("BENCH_PIDS").as_deref() == Ok("1") {
        for u in before.values().filter(|u| !u.pids.is_empty()) {
            println!("pids {}: {:?}", u.id, u.pids);
        }
    }
    let start = Instant::now();
    lifecycles(&q, n).await;
    let took = start.elapsed();
    let after = settled_usage(&shape).await;
    // The floor under every endpoint: an unauthenticated call that reads nothing (the Runtime
    // API's hand-over, the HTTP event, routing, the answer), in a window of its own.
    for _ in 0..n {
        q.ping().await.expect("ping");
    }
    let pinged = settled_usage(&shape).await;
    shape.stop().await;

    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("== warm CPU per invocation in the deployed shape ==");
    println!(
        "binary {bin}; {n} life cycles one at a time after {warmup} to warm up, in {:.1} s \
         ({:.1} per second, LocalStack-bound); nproc={nproc}",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    println!();
    println!("| function | memory MB | invocations | per life cycle | CPU per invocation ms | CPU per life cycle ms |");
    println!("|---|---|---|---|---|---|");
    let mut total = 0.0;
    for (id, a, w) in windows(&before, &after) {
        // A function that started an instance meanwhile is a schedule's that first fired
        // (or a cold one): its figures hold an init, and it is left out of the total.
        let mark = if w.cold > 0 {
            format!(" ({} cold starts, their init included)", w.cold)
        } else {
            total += w.cpu_ms;
            String::new()
        };
        println!(
            "| {id}{mark} | {} | {} | {:.2} | {:.3} | {:.3} |",
            a.memory_mb,
            w.calls,
            w.calls as f64 / n as f64,
            w.cpu_ms / w.calls as f64,
            w.cpu_ms / n as f64
        );
        if id.contains("Publisher") {
            println!(
                "|   per event ({EVENTS_PER_LIFECYCLE} task events a life cycle) | | | | {:.3} | |",
                w.cpu_ms / (n * EVENTS_PER_LIFECYCLE) as f64
            );
        }
    }
    println!("| every warm function | | | | | {:.3} |", total / n as f64);
    for (id, _, w) in windows(&after, &pinged) {
        if w.cold == 0 {
            println!(
                "\nfloor: {id}, {} pings (no credentials, no store request): {:.3} ms of CPU per invocation",
                w.calls,
                w.cpu_ms / w.calls as f64
            );
        }
    }
    billed_by_memory(&before, &after);
}

/// What one function did between two snapshots.
struct Window {
    /// Invocations.
    calls: usize,
    /// Instances started.
    cold: usize,
    /// CPU of its instances, ms.
    cpu_ms: f64,
    /// Time its invocations took, ms.
    busy_ms: f64,
}

/// Each function invoked between `before` and `after`, with what it did meanwhile.
fn windows<'a>(
    before: &'a BTreeMap<String, FunctionUsage>,
    after: &'a BTreeMap<String, FunctionUsage>,
) -> impl Iterator<Item = (&'a str, &'a FunctionUsage, Window)> {
    after.iter().filter_map(|(id, a)| {
        let b = before.get(id)?;
        let w = Window {
            calls: a.invocations - b.invocations,
            cold: a.cold_starts - b.cold_starts,
            cpu_ms: 1e3 * (a.cpu_secs - b.cpu_secs),
            busy_ms: 1e3 * (a.busy_secs - b.busy_secs),
        };
        (w.calls > 0).then_some((id.as_str(), a, w))
    })
}

/// Memory at which a function gets one whole vCPU (AWS: "at 1,769 MB, a function has the
/// equivalent of one vCPU"); below it, CPU shrinks in proportion to memory.
const ONE_VCPU_MB: f64 = 1769.0;
/// arm64 list prices (us-east-1): per GB-second of duration, and per request.
const GB_SECOND_USD: f64 = 0.000_013_333_4;
const REQUEST_USD: f64 = 0.000_000_2;

/// A power-tuning table from what was measured: at `m` MB an invocation's CPU takes
/// `cpu × 1769 / m` ms of wall time (one thread: more than one vCPU does not help), plus the
/// time it waited here for the store and the broker (duration less CPU), billed per
/// millisecond. The wait is LocalStack's on this machine, not DynamoDB's.
fn billed_by_memory(
    before: &BTreeMap<String, FunctionUsage>,
    after: &BTreeMap<String, FunctionUsage>,
) {
    const SIZES: [f64; 4] = [128.0, 256.0, 512.0, 1024.0];
    println!();
    println!("billed duration per invocation by memory (model: CPU slowed below one vCPU, plus the measured wait; arm64 prices):");
    println!();
    println!("| function | CPU ms | wait ms | 128 MB | 256 MB | 512 MB | 1024 MB |");
    println!("|---|---|---|---|---|---|---|");
    for (id, _, w) in windows(before, after) {
        if w.cold > 0 {
            continue;
        }
        let cpu = w.cpu_ms / w.calls as f64;
        let wait = (w.busy_ms / w.calls as f64 - cpu).max(0.0);
        let cells: Vec<String> = SIZES
            .iter()
            .map(|mb| {
                let billed = (cpu * (ONE_VCPU_MB / mb).max(1.0) + wait).ceil().max(1.0);
                let usd = billed / 1e3 * mb / 1024.0 * GB_SECOND_USD + REQUEST_USD;
                format!("{billed:.0} ms, ${:.2}/M", usd * 1e6)
            })
            .collect();
        println!("| {id} | {cpu:.2} | {wait:.2} | {} |", cells.join(" | "));
    }
}
