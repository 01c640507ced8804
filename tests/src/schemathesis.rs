//! Schemathesis (PyPI) against a server's OpenAPI documents, one run per service: every
//! operation, requests signed with Hawk as the root client by `tests/python/schemathesis_hooks.py`
//! (which also checks every error body), the checks of `tests/schemathesis.toml`. Used by the
//! bounded black-box test (`openapi::schemathesis_finds_nothing_on_any_service`) and the longer
//! script (`scripts/schemathesis.sh`).

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// How much to generate.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Examples per operation in the fuzzing phase (`--max-examples`).
    pub max_examples: u32,
    /// Hypothesis's seed (`--seed`).
    pub seed: u64,
    /// The phases to run (`--phases`), e.g. `examples,coverage,fuzzing,stateful`.
    pub phases: &'static str,
}

/// What one service's run found.
#[derive(Debug)]
pub struct Outcome {
    /// The service.
    pub service: &'static str,
    /// Whether schemathesis exited 0 (no failure, no error).
    pub passed: bool,
    /// Operations tested.
    pub operations: u64,
    /// Test cases generated (one request each, a stateful scenario one per step).
    pub requests: u64,
    /// Distinct failures (a check failing on one operation) and errors.
    pub failures: u64,
    /// Its wall time.
    pub wall: Duration,
    /// What it printed, for a failure's message.
    pub output: String,
}

/// The venv's Python with schemathesis (`TCQ_PYTHON`, set by scripts/test.sh), or `None` and a
/// note when it is not set. Set but without schemathesis: a failure (test.sh installs it).
pub fn python() -> Option<String> {
    let Ok(python) = std::env::var("TCQ_PYTHON") else {
        eprintln!(
            "TCQ_PYTHON is not set: run through scripts/test.sh, which installs schemathesis"
        );
        return None;
    };
    let ok = std::process::Command::new(&python)
        .args(["-c", "import schemathesis, mohawk"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{python} lacks schemathesis: scripts/test.sh installs it (pip install schemathesis)"
    );
    Some(python)
}

/// Runs schemathesis on `service`'s document at `root_url` and reads its JSON report.
pub async fn run(
    python: &str,
    root_url: &str,
    service: &'static shared::api::declare::Service,
    budget: Budget,
) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = dir.path().join("report.json");
    let url = format!("{root_url}{}", shared::api::openapi::path(service));
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-m", "schemathesis.cli", "--no-color", "--config-file"])
        .arg(manifest.join("schemathesis.toml"))
        .args([
            "run",
            &url,
            "--workers",
            "1",
            "--generation-database",
            "none",
        ])
        .args(["--max-examples", &budget.max_examples.to_string()])
        .args(["--seed", &budget.seed.to_string()])
        .args(["--phases", budget.phases])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report)
        // Nothing is written into the repository (hypothesis keeps its files in the cwd).
        .current_dir(dir.path())
        .env(
            "SCHEMATHESIS_HOOKS",
            manifest.join("python/schemathesis_hooks.py"),
        )
        .env("TASKCLUSTER_CLIENT_ID", crate::ROOT_CLIENT_ID)
        .env("TASKCLUSTER_ACCESS_TOKEN", crate::ROOT_ACCESS_TOKEN)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("schemathesis runs");
    let wall = started.elapsed();
    let output = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = std::fs::read(&report)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let (operations, requests, failures) = figures(&report);
    Outcome {
        service: service.name,
        passed: out.status.success(),
        operations,
        requests,
        failures,
        wall,
        output,
    }
}

/// Operations, test cases and failures from schemathesis's JSON report.
fn figures(report: &Value) -> (u64, u64, u64) {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let errors = report["errors"].as_array().map_or(0, |e| e.len() as u64);
    (
        n(&report["operations"]["tested"]),
        n(&report["test_cases"]["generated"]),
        n(&report["test_cases"]["unique_failures"]) + errors,
    )
}

/// One line per service and a total.
pub fn print(outcomes: &[Outcome]) -> String {
    let mut out = String::from("service    operations  requests  failures  wall\n");
    for o in outcomes {
        out.push_str(&format!(
            "{:<10} {:>10}  {:>8}  {:>8}  {:.1} s{}\n",
            o.service,
            o.operations,
            o.requests,
            o.failures,
            o.wall.as_secs_f64(),
            if o.passed { "" } else { "  FAILED" }
        ));
    }
    let sum = |f: fn(&Outcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    out.push_str(&format!(
        "{:<10} {:>10}  {:>8}  {:>8}  {:.1} s\n",
        "total",
        sum(|o| o.operations),
        sum(|o| o.requests),
        sum(|o| o.failures),
        outcomes.iter().map(|o| o.wall.as_secs_f64()).sum::<f64>()
    ));
    out
}
