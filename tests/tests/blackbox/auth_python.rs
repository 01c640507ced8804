//! The official Python client (PyPI `taskcluster`) through a full worker loop against a
//! spawned server: root, a limited worker client, the claim's temporary credentials with
//! and without `authorizedScopes`, a signed URL and client-minted temporary credentials.
//! `scripts/test.sh` installs the client in a venv and sets `TCQ_PYTHON` to its interpreter.

use blackbox::*;
use serde_json::{json, Value};
use std::process::Command;

#[tokio::test]
async fn the_python_client_runs_a_worker_loop() {
    let Ok(python) = std::env::var("TCQ_PYTHON") else {
        eprintln!(
            "TCQ_PYTHON is not set: run through scripts/test.sh, which installs the Python client"
        );
        return;
    };
    let app = spawn_app().await;
    let tq = task_queue_id();
    let worker_id = format!("test/python-{}", slugid());
    let worker = app
        .auth()
        .createClient(
            &worker_id,
            &json!({
                "description": "python worker",
                "expires": ts(3_600_000),
                "scopes": [format!("queue:claim-work:{tq}"), "queue:worker-id:py/w1"],
            }),
        )
        .await
        .expect("createClient");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/worker_loop.py");
    let root_url = app.root_url();
    let output = tokio::task::spawn_blocking({
        let token = worker["accessToken"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let tq = tq.clone();
        move || {
            Command::new(python)
                .arg(script)
                .env("TASKCLUSTER_ROOT_URL", root_url)
                .env("TASKCLUSTER_CLIENT_ID", ROOT_CLIENT_ID)
                .env("TASKCLUSTER_ACCESS_TOKEN", ROOT_ACCESS_TOKEN)
                .env_remove("TASKCLUSTER_CERTIFICATE")
                .env("WORKER_CLIENT_ID", worker_id)
                .env("WORKER_ACCESS_TOKEN", token)
                .env("TASK_QUEUE_ID", tq)
                .output()
                .expect("python runs")
        }
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let id = out["taskId"].as_str().expect("taskId");
    assert_eq!(out["worker_create"], 403);
    assert!(out["tempClientId"]
        .as_str()
        .unwrap_or_default()
        .starts_with(&format!("task-client/{id}/0/on/py/w1/until/")));
    let temp_scopes = out["tempScopes"].as_array().expect("scopes");
    assert!(temp_scopes.contains(&json!("python:scope")));
    assert!(temp_scopes.contains(&json!(format!("queue:resolve-task:{id}/0"))));
    assert_eq!(out["proxy_resolve"], 403);
    assert_eq!(out["resolved"], "completed");
    assert_eq!(out["signedUrlStatus"], 200);
    assert_eq!(out["unsignedStatus"], 403);
    assert!(out["mintedScopes"]
        .as_array()
        .expect("scopes")
        .contains(&json!("queue:status:*")));
    assert_eq!(out["mintedStatus"], "completed");
    assert_eq!(out["bad"], 401);
    // The server agrees.
    let st = app.queue().status(id).await.expect("status");
    assert_eq!(st["status"]["state"], "completed");
}
