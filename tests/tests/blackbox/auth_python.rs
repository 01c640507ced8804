//! The official Python client (PyPI `taskcluster`) through a full worker loop against a
//! spawned server: root, a limited worker client, the claim's temporary credentials with
//! and without `authorizedScopes`, a signed URL and client-minted temporary credentials.
//! `scripts/test.sh` installs the client in a venv and sets `TCQ_PYTHON` to its interpreter.

use crate::common::*;
use blackbox::*;
use serde_json::json;

#[tokio::test]
async fn the_python_client_runs_a_worker_loop() {
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
    let token = worker["accessToken"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let envs = [
        ("WORKER_CLIENT_ID", worker_id),
        ("WORKER_ACCESS_TOKEN", token),
        ("TASK_QUEUE_ID", tq.clone()),
    ];
    let Some(out) = run_python(&app, "worker_loop.py", &envs).await else {
        return;
    };
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

/// Routes that end in `/` (`/clients/`, `/roles/`) and `/test-authenticate-get/`: the PyPI
/// client strips the trailing `/`, and signs the path so; upstream's router takes both.
#[tokio::test]
async fn the_python_client_lists_clients_and_roles_and_tests_authentication() {
    let app = spawn_app().await;
    let role = format!("test-role-{}", slugid());
    app.auth()
        .createRole(
            &role,
            &json!({"description": "a role", "scopes": ["queue:status:*"]}),
        )
        .await
        .expect("createRole");
    let Some(out) = run_python(&app, "auth_lists.py", &[]).await else {
        return;
    };
    assert!(out["clientIds"]
        .as_array()
        .expect("clients")
        .contains(&json!(ROOT_CLIENT_ID)));
    assert!(out["roleIds"]
        .as_array()
        .expect("roles")
        .contains(&json!(role)));
    assert_eq!(out["tested"]["clientId"], "tester");
}

/// A tc-admin-style apply with the PyPI client (`tests/python/tc_admin_apply.py`): the
/// current roles and clients under a prefix read, then created, changed (updateRole,
/// updateClient) and removed one call at a time to match what is desired, each apply leaving
/// nothing for a second one to do.
#[tokio::test]
async fn a_tc_admin_style_apply_creates_updates_and_deletes_roles_and_clients() {
    let app = spawn_app().await;
    let prefix = format!("tc-admin-{}/", slugid());
    let Some(out) = run_python(&app, "tc_admin_apply.py", &[("PREFIX", prefix.clone())]).await
    else {
        return;
    };
    let (role, client) = (format!("{prefix}ci"), format!("{prefix}worker"));
    assert_eq!(
        out["create"]["calls"],
        json!(["createRole", "createClient"])
    );
    assert_eq!(
        out["change"]["calls"],
        json!(["updateRole", "updateClient"])
    );
    assert_eq!(
        out["remove"]["calls"],
        json!(["deleteRole", "deleteClient"])
    );
    for step in ["create", "change", "remove"] {
        assert_eq!(out[step]["again"], false, "{step}: {out}");
    }
    assert_eq!(
        out["change"]["roles"][&role]["description"],
        "CI, and its secrets"
    );
    assert_eq!(
        out["change"]["clients"][&client]["scopes"],
        json!([format!("assume:{role}"), "queue:claim-work:proj/*"])
    );
    assert_eq!(out["remove"]["roles"], json!({}));
    assert_eq!(out["remove"]["clients"], json!({}));
    // The server agrees.
    assert_eq!(err_status(app.auth().role(&role).await), 404);
}
