//! The crash loop at full size: 16 clients run life cycles against the release `tc-queue`,
//! SIGKILLed 25 times at seeded moments and restarted on the same data directory, with a
//! RabbitMQ consumer recording every event (see `blackbox::crash_loop` for the checks).
//!
//! Run (RabbitMQ on 127.0.0.1:5672):
//!   cargo build --release -p functions --bin tc-queue
//!   cargo bench -p blackbox --bench crash_loop
//!
//! Knobs: `BENCH_KILLS` (25), `BENCH_SEED` (20261125), `BENCH_MAX_GAP_MS` (3000),
//! `BENCH_CLIENTS` (16), `BENCH_SERVER_BIN` (another build).

use blackbox::crash_loop::{crash_loop, CrashSpec};
use blackbox::env_num;
use blackbox::release::spawn;

#[tokio::main]
async fn main() {
    let spec = CrashSpec {
        clients: env_num("BENCH_CLIENTS", 16),
        kills: env_num("BENCH_KILLS", 25),
        seed: env_num("BENCH_SEED", 20261125),
        max_gap_ms: env_num("BENCH_MAX_GAP_MS", 3_000),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let report = crash_loop(&spec, |port, envs| spawn(port, dir.path(), envs)).await;
    println!("{}", report.line());
    println!("{}", if report.passed() { "PASS" } else { "FAIL" });
    if !report.passed() {
        std::process::exit(1);
    }
}
