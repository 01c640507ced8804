//! Memory of warm functions (issue 39.4): the create-task and claim-work functions, each one
//! `lambda` process behind the Runtime API emulator (`blackbox::runtime_api`), over DynamoDB
//! tables on LocalStack, serve `BENCH_CALLS` calls each (default 100,000): createTask with a
//! definition of about 6 KB, and claimWork handing out those tasks one per call, the two
//! functions invoked side by side. Every tenth of the way the bench prints each process's
//! resident set (VmRSS) and its peak (VmHWM), from /proc, beside the function's memory size
//! as deployed. A process that keeps what it served (caches, memos, buffers) grows with the
//! calls; a bounded one levels off.
//!
//! Run (about 30 minutes for 100,000 calls on a 2-core machine; `BENCH_CALLS=10000` for a
//! quick look):
//!   cargo build --release -p functions --bin lambda
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench warm_rss
//!
//! `BENCH_LAMBDA_BIN` picks the binary (default `<target>/release/lambda`, else the debug one).

use blackbox::env_num;
use blackbox::runtime_api::{apigw_v2_event, localstack_tables, RuntimeApi};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    if let Ok(b) = std::env::var("BENCH_LAMBDA_BIN") {
        return PathBuf::from(b);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let release = target.join("release").join("lambda");
    if release.exists() {
        release
    } else {
        target.join("debug").join("lambda")
    }
}

/// The function `handler` as Lambda runs it, against `api`, over the tables under `prefix`.
fn spawn(bin: &Path, handler: &str, memory_mb: u32, api: &RuntimeApi, prefix: &str) -> Child {
    blackbox::runtime_api::lambda_command(bin, api, prefix)
        .env("_HANDLER", handler)
        .env("AWS_LAMBDA_FUNCTION_NAME", handler)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string())
        // A claimWork that finds nothing answers after a second, as lambda-short would.
        .env("TCQ_CLAIM_WORK_TIMEOUT_MS", "1000")
        .spawn()
        .expect("spawn the function")
}

/// (VmRSS, VmHWM) of process `pid`, in MB.
fn rss(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A definition of about 6 KB: the usual fields, a payload with a long command and env.
fn definition(tq: &str, i: usize) -> Value {
    let mut def = blackbox::task_def(tq);
    def["payload"] = json!({
        "command": ["/bin/bash", "-c", format!("{}{i}", "echo building the project && ".repeat(85))],
        "env": (0..40).map(|k| (format!("VARIABLE_{k}"), json!(format!("value-{k}-{i:08}-{}", "x".repeat(40))))).collect::<serde_json::Map<_, _>>(),
        "maxRunTime": 3600
    });
    def["routes"] = json!((0..8)
        .map(|k| format!("index.project.bench.route-{k}"))
        .collect::<Vec<_>>());
    def
}

#[tokio::main]
async fn main() {
    let calls: usize = env_num("BENCH_CALLS", 100_000);
    let bin = binary();
    let prefix = localstack_tables("rss", false).await;
    let (create_api, claim_api) = (RuntimeApi::start().await, RuntimeApi::start().await);
    let create_mb = 256;
    let claim_mb = shared::api::endpoints::claims::CLAIM_WORK.memory_mb;
    let mut create = spawn(&bin, "createTask", create_mb, &create_api, &prefix);
    let mut claim = spawn(&bin, "claimWork", claim_mb, &claim_api, &prefix);
    let tq = blackbox::task_queue_id();
    let size = definition(&tq, 0).to_string().len();
    println!(
        "warm_rss: {} calls each, definitions of {size} bytes, binary {}",
        calls,
        bin.display()
    );
    println!(
        "{:>8} {:>8} {:>14} {:>14} {:>14} {:>14}",
        "created", "claimed", "create RSS MB", "create peak", "claim RSS MB", "claim peak"
    );
    let every = (calls / 10).max(1);
    let started = Instant::now();
    let created = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let creating = {
        let (tq, created) = (tq.clone(), created.clone());
        let api = create_api;
        tokio::spawn(async move {
            for i in 0..calls {
                let id = blackbox::slugid();
                let event = apigw_v2_event(
                    "PUT",
                    &format!("/api/queue/v1/task/{id}"),
                    Some(&definition(&tq, i)),
                );
                let r = api.invoke(event, Duration::from_secs(60)).await;
                assert!(
                    r.as_ref().is_ok_and(|r| r["statusCode"] == 200),
                    "createTask {i}: {r:?}"
                );
                created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let (create_pid, claim_pid) = (create.id(), claim.id());
    let mut claimed = 0usize;
    let mut served = 0usize;
    let path = format!("/api/queue/v1/claim-work/{}", tq.replace('/', "%2F"));
    let body = json!({"workerGroup": "bench", "workerId": "rss", "tasks": 1});
    while claimed < calls {
        let r = claim_api
            .invoke(
                apigw_v2_event("POST", &path, Some(&body)),
                Duration::from_secs(60),
            )
            .await
            .expect("claimWork");
        assert_eq!(r["statusCode"], 200, "{r}");
        let tasks: Value =
            serde_json::from_str(r["body"].as_str().unwrap_or("{}")).unwrap_or_default();
        claimed += tasks["tasks"].as_array().map_or(0, Vec::len);
        served += 1;
        if claimed.is_multiple_of(every) && tasks["tasks"].as_array().is_some_and(|t| !t.is_empty())
        {
            let (c, cp) = rss(create_pid);
            let (w, wp) = rss(claim_pid);
            let n = created.load(std::sync::atomic::Ordering::Relaxed);
            println!("{n:>8} {claimed:>8} {c:>14.1} {cp:>14.1} {w:>14.1} {wp:>14.1}");
        }
    }
    creating.await.expect("createTask calls");
    let (c, cp) = rss(create_pid);
    let (w, wp) = rss(claim_pid);
    println!(
        "after {calls} createTask and {served} claimWork calls in {:.0} s: createTask {c:.1} MB (peak {cp:.1} of {create_mb} MB), claimWork {w:.1} MB (peak {wp:.1} of {claim_mb} MB)",
        started.elapsed().as_secs_f64()
    );
    create.kill().ok();
    claim.kill().ok();
    create.wait().ok();
    claim.wait().ok();
}
