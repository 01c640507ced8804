//! Cold start of one Lambda function binary through the Runtime API emulator
//! (`blackbox::runtime_api`), and the size of what would ship (issue 3: "init under 50 ms and
//! a zip under 10 MB").
//!
//! Run:
//!   cargo build --release -p functions --bin lambda
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench cold_start
//!
//! `BENCH_LAMBDA_BIN` (default `<target>/release/lambda`, the multi-call binary) is started
//! `BENCH_COLD_STARTS` times (default 20) as the `create-task` function (`_HANDLER=createTask`,
//! the environment of `runtime_api::start_function`), against fresh DynamoDB tables on
//! LocalStack, each time with a fresh emulator. Init is spawn → its first `/next` poll (the
//! runtime polls once its clients are built), and init CPU the process's CPU at that poll
//! (every thread's, from /proc); then one createTask event is handed to it and
//! its answer timed ("first request"). The same is done, interleaved, with a stripped copy
//! of the binary (what cargo-lambda ships), unless `BENCH_STRIPPED=0`. The binary's stripped
//! size and the size of a zip of it (`bootstrap` inside, as cargo-lambda packs it) are printed.
//! The page cache is warm after the first start, so this is process init on this machine, not
//! Lambda's Init Duration (which adds fetching the code and starting the sandbox).

use blackbox::env_num;
use blackbox::runtime_api::{apigw_v2_event, localstack_tables, RuntimeApi};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn default_binary() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("release").join("lambda")
}

/// Nearest-rank percentile of durations, in milliseconds.
fn pct(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1].as_secs_f64() * 1000.0
}

fn ms(d: Option<&Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// CPU time of a process's live threads, in nanoseconds from each one's schedstat (/proc's
/// stat counts in 10 ms ticks, too coarse for an init).
fn threads_cpu(pid: u32) -> Option<Duration> {
    let mut ns = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

/// One cold start: (init, init's CPU, first request), or an error message.
async fn cold_start(bin: &Path, prefix: &str) -> Result<(Duration, Duration, Duration), String> {
    let api = RuntimeApi::start().await;
    let mut cmd = blackbox::runtime_api::lambda_command(bin, &api, prefix);
    cmd.env("_HANDLER", "createTask")
        .env("AWS_LAMBDA_FUNCTION_NAME", "create-task");
    let spawned = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let result = async {
        let init = loop {
            if let Some(t) = api.first_poll() {
                break t.duration_since(spawned);
            }
            if spawned.elapsed() > Duration::from_secs(30) {
                return Err("no /next poll within 30 s".to_string());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited during init: {status}"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // The process's CPU once it polls: what its init took (it waits idle on /next).
        let init_cpu = threads_cpu(child.id()).ok_or("no CPU time in /proc")?;
        let tq = blackbox::task_queue_id();
        let id = blackbox::slugid();
        let event = apigw_v2_event(
            "PUT",
            &format!("/api/queue/v1/task/{id}"),
            Some(&blackbox::task_def(&tq)),
        );
        let t = Instant::now();
        let reply = api
            .invoke(event, Duration::from_secs(30))
            .await
            .map_err(|e| format!("createTask failed: {e}"))?;
        let first = t.elapsed();
        if reply["statusCode"] != 200 {
            return Err(format!("createTask answered {reply}"));
        }
        Ok((init, init_cpu, first))
    }
    .await;
    child.kill().ok();
    child.wait().ok();
    result
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Zips `file` as `bootstrap` into `zip`, with the `zip` CLI or else Python's zipfile.
fn zip_as_bootstrap(file: &Path, zip: &Path) -> Result<&'static str, String> {
    let dir = file.parent().ok_or("no parent directory")?;
    let bootstrap = dir.join("bootstrap");
    if file != bootstrap {
        std::fs::copy(file, &bootstrap).map_err(|e| e.to_string())?;
    }
    let cli = Command::new("zip")
        .arg("-q")
        .arg("-9")
        .arg("-j")
        .arg(zip)
        .arg(&bootstrap)
        .status();
    if cli.is_ok_and(|s| s.success()) {
        return Ok("zip -9");
    }
    let py = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as z:\n\
             \x20   z.write(sys.argv[2], 'bootstrap')",
        )
        .arg(zip)
        .arg(&bootstrap)
        .status();
    if py.is_ok_and(|s| s.success()) {
        return Ok("python3 zipfile (deflate 9)");
    }
    Err("neither zip nor python3 could write the zip".into())
}

#[tokio::main]
async fn main() {
    let n: usize = env_num("BENCH_COLD_STARTS", 20usize).max(1);
    let with_stripped = env_num("BENCH_STRIPPED", 1u8) == 1;
    let bin = std::env::var("BENCH_LAMBDA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| default_binary());
    if !bin.exists() {
        eprintln!(
            "{} is missing: cargo build --release -p functions --bin lambda (or set BENCH_LAMBDA_BIN)",
            bin.display()
        );
        std::process::exit(2);
    }
    if std::env::var("AWS_ENDPOINT_URL").is_err() && std::env::var("TCQ_LOCALSTACK").is_err() {
        eprintln!("needs the AWS (LocalStack) environment: see the header of this file");
        std::process::exit(2);
    }

    // Sizes: a stripped copy and a zip of it, in a scratch directory (the binary is left as is).
    let scratch = tempfile::tempdir().expect("temp dir");
    let stripped = scratch.path().join("bootstrap");
    let strip_ok = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&bin)
        .status()
        .is_ok_and(|s| s.success());
    if !strip_ok {
        eprintln!("strip failed; the zip holds the unstripped binary");
        std::fs::copy(&bin, &stripped).expect("copy binary");
    }
    let zip = scratch.path().join("bootstrap.zip");
    let zipper = zip_as_bootstrap(&stripped, &zip);

    let prefix = localstack_tables("cold", false).await;
    let mut runs: Vec<(&str, PathBuf)> = vec![("as built", bin.clone())];
    if with_stripped && strip_ok {
        runs.push(("stripped", stripped.clone()));
    }
    let mut init: Vec<Vec<Duration>> = vec![vec![]; runs.len()];
    let mut first: Vec<Vec<Duration>> = vec![vec![]; runs.len()];
    let mut init_cpu: Vec<Vec<Duration>> = vec![vec![]; runs.len()];
    let mut failures = 0;
    for i in 0..n {
        for (j, (_, path)) in runs.iter().enumerate() {
            match cold_start(path, &prefix).await {
                Ok((a, c, b)) => {
                    init[j].push(a);
                    init_cpu[j].push(c);
                    first[j].push(b);
                }
                Err(e) => {
                    failures += 1;
                    eprintln!("start {i} of {}: {e}", path.display());
                }
            }
        }
    }

    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("== Lambda cold start through the Runtime API emulator ==");
    println!(
        "binary: {} ({} bytes as built), function create-task (_HANDLER=createTask), \
         {n} starts each, nproc={nproc}, failures={failures}",
        bin.display(),
        size(&bin)
    );
    println!();
    println!("| binary | starts | init min ms | init p50 ms | init max ms | init CPU p50 / max ms | first request p50 ms | first request max ms |");
    println!("|---|---|---|---|---|---|---|---|");
    for (j, (name, _)) in runs.iter().enumerate() {
        let v = &init[j];
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.0} / {:.0} | {:.1} | {:.1} |",
            v.len(),
            ms(v.iter().min()),
            pct(v, 50.0),
            ms(v.iter().max()),
            pct(&init_cpu[j], 50.0),
            ms(init_cpu[j].iter().max()),
            pct(&first[j], 50.0),
            ms(first[j].iter().max()),
        );
    }
    println!();
    println!("| what | bytes | MB |");
    println!("|---|---|---|");
    for (name, bytes) in [
        ("binary as built", size(&bin)),
        ("stripped (strip)", size(&stripped)),
    ] {
        println!("| {name} | {bytes} | {:.1} |", bytes as f64 / 1e6);
    }
    match &zipper {
        Ok(how) => println!(
            "| zip of the stripped binary ({how}) | {} | {:.1} |",
            size(&zip),
            size(&zip) as f64 / 1e6
        ),
        Err(e) => println!("| zip | failed: {e} | |"),
    }
    // The target is about what ships: the stripped binary when it was measured.
    let (shipped, _) = runs[runs.len() - 1];
    let p50 = pct(&init[runs.len() - 1], 50.0);
    let zip_mb = size(&zip) as f64 / 1e6;
    println!();
    println!(
        "targets: init p50 ({shipped}) {p50:.1} ms (< 50 ms: {}), zip {zip_mb:.1} MB \
         (< 10 MB: {})",
        if p50 < 50.0 { "met" } else { "MISSED" },
        if zipper.is_ok() && zip_mb < 10.0 {
            "met"
        } else {
            "MISSED"
        }
    );
}
