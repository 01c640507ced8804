//! Delegated authentication (`TCQ_AUTH_ROOT_URL`): a queue that stands in for an existing
//! deployment's queue authenticates every request through that deployment's
//! `authenticateHawk`. A second local server plays the deployment (its auth service, clients
//! and roles); the queue under test has none of them.

use crate::common::*;
use blackbox::*;
use serde_json::json;
use std::time::Duration;
use taskcluster::Credentials;

/// The queue's own client, as the deployment configures it: the queue signs workers'
/// temporary credentials with it, and the deployment checks them.
const QUEUE_TOKEN: &str = "delegated-test-queue-token-not-a-secret-00000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployments_clients_and_roles_authenticate_every_call() {
    if not_in_shape("it reads the server process's cache of the deployment's answers") {
        return;
    }
    let deployment = spawn_app_with(|c| c.queue_access_token = Some(QUEUE_TOKEN.into())).await;
    let root = deployment.root_url();
    let app = spawn_app_with(move |c| {
        c.queue_access_token = Some(QUEUE_TOKEN.into());
        c.queue.auth_root_url = Some(root);
    })
    .await;
    let tq = task_queue_id();
    // A role and a client that exist only in the deployment.
    let role = format!("project:{}", slugid());
    deployment
        .auth()
        .createRole(
            &role,
            &json!({"description": "", "scopes": [
                format!("queue:create-task:highest:{tq}"), "queue:scheduler-id:-",
                "queue:create-task:project:none",
                format!("queue:claim-work:{tq}"), "queue:worker-id:grp/*", "queue:status:*",
            ]}),
        )
        .await
        .expect("createRole");
    let creds = client_with(&deployment, &[format!("assume:{role}")]).await;
    let q = app.queue_as(Some(creds.clone()));

    // The deployment's client, through its role, runs a task through this queue.
    let id = slugid();
    q.createTask(&id, &task_def(&tq)).await.expect("createTask");
    let claimed = q
        .claimWork(&tq, &worker("grp", "w", 1))
        .await
        .expect("claimWork");
    assert_eq!(claimed["tasks"][0]["status"]["taskId"], id.as_str());
    // The run's temporary credentials, signed with the queue's client as the deployment
    // knows it, are accepted there.
    let temp = credentials_of(&claimed["tasks"][0]);
    let done = app
        .queue_as(Some(temp))
        .reportCompleted(&id, "0")
        .await
        .expect("reportCompleted with the claim's credentials");
    assert_eq!(done["status"]["state"], "completed");

    // What the role does not grant is 403, an unknown client or a wrong token 401, as the
    // deployment decides.
    assert_eq!(
        err_status(q.createTask(&slugid(), &task_def(&task_queue_id())).await),
        403
    );
    let unknown = Credentials::new("no-such-client", "x".repeat(44));
    assert_eq!(
        err_status(app.queue_as(Some(unknown)).status(&id).await),
        401
    );
    let wrong = Credentials::new(creds.client_id.clone(), "y".repeat(44));
    assert_eq!(err_status(app.queue_as(Some(wrong)).status(&id).await), 401);
    // A body that is not the one the client signed is refused here: the deployment never
    // sees the body, only the signed hash.
    let url = app.url(&format!("/task/{}", slugid()));
    let body = serde_json::to_vec(&task_def(&tq)).expect("JSON");
    let signed = hawk_authorization(
        &creds.client_id,
        &creds.access_token,
        "PUT",
        &url,
        Some(("application/json", b"{}".as_slice())),
    );
    let resp = reqwest::Client::new()
        .put(&url)
        .header("authorization", signed)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status(), 401);

    // This queue's own auth API is not served: the deployment's is the authority.
    assert_eq!(
        err_status(app.auth().listClients(None, None, None).await),
        404
    );
    assert_eq!(err_status(app.auth().currentScopes().await), 404);

    // Unsigned calls share one cached answer: the deployment's anonymous scopes (here
    // public artifacts only, so a status is 403).
    let anonymous = app.queue_as(None);
    for _ in 0..20 {
        assert_eq!(err_status(anonymous.status(&id).await), 403);
    }
    let (hits, misses) = app.api().delegated.as_ref().expect("delegated").lookups();
    eprintln!(
        "delegated authentication: {hits} cache hits, {misses} misses ({:.0} % hits)",
        100.0 * hits as f64 / (hits + misses).max(1) as f64
    );
    assert!(hits >= 19, "{hits} hits, {misses} misses");
    // The same signed request again (a signed URL fetched twice) is answered from the cache.
    let status_url = app.url(&format!("/task/{id}/status"));
    let signed = hawk_authorization(
        &creds.client_id,
        &creds.access_token,
        "GET",
        &status_url,
        None,
    );
    for _ in 0..2 {
        let resp = reqwest::Client::new()
            .get(&status_url)
            .header("authorization", signed.as_str())
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status(), 200);
    }
    let remote = app.api().delegated.clone().expect("delegated");
    assert_eq!(remote.lookups(), (hits + 1, misses + 1), "the repeat hit");
    // A role change in the deployment reaches this queue's next signed call: a new signature
    // is never in the cache.
    deployment
        .auth()
        .updateRole(&role, &json!({"description": "", "scopes": []}))
        .await
        .expect("updateRole");
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = q.status(&id).await;
        if err_status(r) == 403 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the role change never arrived"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
