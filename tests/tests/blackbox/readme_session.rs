//! README's example session as a new user runs it: start the queue the way README says
//! (`cargo run`'s binary, or `bash scripts/deployed-shape.sh` with `TCQ_TEST_BACKEND=shape`),
//! take the `export` lines it prints, and run README's Python block with nothing else in the
//! environment's TASKCLUSTER_* variables. Needs `TCQ_PYTHON` (scripts/test.sh sets it).

use blackbox::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Python block of README's "Example session" section.
fn readme_python() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## Example session")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an Example session section");
    section
        .split("```python\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("the section has a Python block")
        .to_string()
}

/// The queue as README starts it, killed (SIGTERM, then SIGKILL) when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        // SIGTERM lets the deployed shape stop every process it started.
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and reads its stdout until the three `export` lines; returns them as pairs.
fn start_and_read_exports(mut cmd: Command) -> (Started, Vec<(String, String)>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the queue starts");
    let stdout = child.stdout.take().expect("stdout");
    let started = Started(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut exports = vec![];
    let until = Instant::now() + Duration::from_secs(300);
    while exports.len() < 3 {
        let left = until.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("the queue prints its export lines");
        if let Some((k, v)) = line
            .strip_prefix("export ")
            .and_then(|kv| kv.split_once('='))
        {
            exports.push((k.to_string(), v.to_string()));
        }
    }
    (started, exports)
}

#[test]
fn readmes_example_session_works_as_pasted() {
    let Ok(python) = std::env::var("TCQ_PYTHON") else {
        eprintln!("TCQ_PYTHON is not set: run through scripts/test.sh");
        return;
    };
    if std::env::var("TCQ_TEST_BACKEND").as_deref() == Ok("localstack") {
        // README's `cargo run` is the embedded backend: the embedded run shows it.
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port().to_string();
    let cmd = if in_shape() {
        let mut c = Command::new("bash");
        c.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/deployed-shape.sh"
        ))
        .args(["--port", &port, "--data-dir"])
        .arg(dir.path())
        .args(["--stack", &format!("readme{}", port), "--delete-on-exit"]);
        // As from a user's shell: without the variables cargo sets for a test. Build scripts
        // watch some (ring's: CARGO_PKG_NAME, CARGO_MANIFEST_DIR, OUT_DIR), so the script's
        // `cargo build` saw them change, rebuilt ring and all above it under the test's
        // timeout, and the next `cargo test` rebuilt it all back.
        const PREFIXES: [&str; 7] = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_",
        ];
        for (k, _) in std::env::vars_os() {
            let Some(name) = k.to_str() else { continue };
            if ["CARGO", "OUT_DIR"].contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
            {
                c.env_remove(&k);
            }
        }
        c
    } else {
        let mut c = Command::new(runtime_api::built_binary("tc-queue"));
        c.args(["--port", &port, "--data-dir"]).arg(dir.path());
        c
    };
    let (_queue, exports) = start_and_read_exports(cmd);
    let names: Vec<&str> = exports.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "TASKCLUSTER_ROOT_URL",
            "TASKCLUSTER_CLIENT_ID",
            "TASKCLUSTER_ACCESS_TOKEN"
        ]
    );
    // README's block, then one line of ours: the task's state as root sees it.
    let script = format!(
        "{}\nprint(q.status(task_id)[\"status\"][\"state\"])\n",
        readme_python()
    );
    let out = Command::new(python)
        .args(["-c", &script])
        .env_remove("TASKCLUSTER_CERTIFICATE")
        .envs(exports)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "README's session failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "completed");
}
