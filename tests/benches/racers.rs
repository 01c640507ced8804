//! Racing claimers at full size: 32 workers on 100,000 tasks across 8 task queues of mixed
//! priorities, against the release `tc-queue` as its own process (embedded backend), through
//! the official Rust client over HTTP. Checks and prints what `blackbox::race` measures:
//! double claims, tasks left pending or in the wrong state, priority inversions (all must be
//! 0), and claims per second.
//!
//! Run:
//!   cargo build --release -p functions --bin tc-queue
//!   cargo bench -p blackbox --bench racers
//!
//! Knobs: `BENCH_TASKS` (100000), `BENCH_WORKERS` (32), `BENCH_QUEUES` (8).

use blackbox::env_num;
use blackbox::race::{print, race, RaceSpec};
use blackbox::release::{cpu_time, ReleaseServer};

#[tokio::main]
async fn main() {
    let spec = RaceSpec {
        tasks: env_num("BENCH_TASKS", 100_000),
        queues: env_num("BENCH_QUEUES", 8),
        workers: env_num("BENCH_WORKERS", 32),
        creators: 16,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ReleaseServer::start(
        dir.path(),
        &[("TCQ_CLAIM_WORK_TIMEOUT_MS", "200".to_string())],
    )
    .await;
    let pid = server.pid().to_string();
    let cpu0 = cpu_time(&pid);
    let r = race(&server.root, &blackbox::task_queue_id(), &spec).await;
    let cpu = cpu_time(&pid)
        .zip(cpu0)
        .map(|(b, a)| format!("{:.1} s", (b - a).as_secs_f64()))
        .unwrap_or_else(|| "unknown".into());
    println!("{}", print(&spec, &r));
    println!("server CPU over creating and claiming: {cpu}");
    let ok = r.claims == r.tasks
        && r.double_claims == 0
        && r.wrong_state == 0
        && r.left_pending == 0
        && r.inversions == 0;
    println!("{}", if ok { "PASS" } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
}
