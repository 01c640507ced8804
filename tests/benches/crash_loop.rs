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
//!
//! `BENCH_SHAPE=1` runs it against the deployed shape instead (a stack of its own over
//! LocalStack; each kill ends an instance of an HTTP, stream or scheduled function in turn):
//!   bash scripts/build-shape.sh && bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test TCQ_LOCALSTACK=1 BENCH_SHAPE=1 BENCH_CLIENTS=8 \
//!   cargo bench --profile dev -p blackbox --bench crash_loop

use blackbox::crash_loop::{crash_loop, crash_loop_in_shape, CrashSpec};
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
    let report = if env_num("BENCH_SHAPE", 0) == 1 {
        // SAFETY: set before any other thread reads the environment.
        unsafe { std::env::set_var("TCQ_TEST_BACKEND", "shape") };
        crash_loop_in_shape(&spec).await
    } else {
        let dir = tempfile::tempdir().expect("temp dir");
        crash_loop(&spec, |port, envs| spawn(port, dir.path(), envs)).await
    };
    println!("{}", report.line());
    println!("{}", if report.passed() { "PASS" } else { "FAIL" });
    if !report.passed() {
        std::process::exit(1);
    }
}
