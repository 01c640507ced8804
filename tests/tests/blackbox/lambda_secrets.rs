//! In AWS the functions read their access tokens from Secrets Manager: a function started
//! with only the secrets' names (no tokens in its environment) authenticates the root client.
//! Runs against LocalStack; skipped without it.
use blackbox::runtime_api::{
    apigw_v2_event, localstack_json, localstack_tables, start_function, RuntimeApi,
};
use blackbox::*;
use serde_json::{json, Value};
use std::time::Duration;

/// One Secrets Manager call (JSON protocol; LocalStack does not check signatures).
async fn secretsmanager(op: &str, body: Value) -> Value {
    localstack_json(
        "secretsmanager",
        "1.1",
        &format!("secretsmanager.{op}"),
        body,
    )
    .await
    .unwrap_or_else(|e| panic!("{op}: {e}"))
}

#[tokio::test]
async fn functions_read_their_tokens_from_secrets_manager() {
    if not_in_shape("drives Lambda binaries of its own; the LocalStack pass runs it") {
        return;
    }
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let prefix = localstack_tables("sm", false).await;
    let (root_secret, queue_secret) = (format!("{prefix}root"), format!("{prefix}queue"));
    secretsmanager(
        "CreateSecret",
        json!({ "Name": root_secret, "ClientRequestToken": format!("{}{}", slugid(), slugid()), "SecretString": json!({
            "clientId": "static/taskcluster/root", "accessToken": ROOT_ACCESS_TOKEN
        }).to_string() }),
    )
    .await;
    secretsmanager(
        "CreateSecret",
        json!({ "Name": queue_secret, "ClientRequestToken": format!("{}{}", slugid(), slugid()), "SecretString": "a-queue-token-from-the-secret" }),
    )
    .await;

    let api = RuntimeApi::start().await;
    let (mut function, _) = start_function(
        "auth",
        &api,
        &prefix,
        &[
            ("TCQ_QUEUE_ACCESS_TOKEN", ""),
            ("TCQ_ROOT_ACCESS_TOKEN", ""),
            ("TCQ_QUEUE_ACCESS_TOKEN_SECRET", &queue_secret),
            ("TCQ_ROOT_ACCESS_TOKEN_SECRET", &root_secret),
        ],
    );
    let reply = api
        .invoke(
            apigw_v2_event("GET", "/api/auth/v1/scopes/current", None),
            Duration::from_secs(30),
        )
        .await
        .expect("currentScopes answered");
    function.kill().ok();
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let body: Value =
        serde_json::from_str(reply["body"].as_str().unwrap_or_default()).expect("JSON body");
    assert_eq!(body["scopes"], json!(["*"]));
}

/// Tokens rotated where they are kept reach the running deployment without a redeploy
/// (`shared::tokens`): in the deployed shape, with the tokens read from the stack's secrets,
/// the root and queue tokens are rotated (PutSecretValue) while a worker holds a claim.
/// - The new root token works at its first use (its mismatch reads the secret again) on every
///   function, and the old one is refused once the refresh has passed.
/// - The worker's credentials, signed with the old queue token, still reclaim during the
///   grace; within the refresh every function signs with the new token; after the grace the
///   old token's credentials are refused.
#[tokio::test]
async fn a_rotated_token_works_without_a_redeploy() {
    use crate::common::{credentials_of, err_status, worker};
    use std::time::Instant;
    use taskcluster::Credentials;
    if !in_shape() {
        eprintln!("for the deployed shape, whose functions read the tokens from its secrets");
        return;
    }
    const REFRESH_MS: u64 = 3_000;
    const GRACE_MS: u64 = 25_000;
    let app = spawn_shape_alone_with(&[], |cfg| {
        // Read from the stack's secret, as deployed, rather than given.
        cfg.root_access_token = None;
        cfg.queue.token_refresh_ms = REFRESH_MS as i64;
        cfg.queue.token_grace_ms = GRACE_MS as i64;
        cfg.queue.claim_timeout_secs = 600;
    })
    .await;
    let shape = app.shape().expect("the deployed shape");
    let root_url = app.root_url();
    let as_root = |token: &str| {
        taskcluster::Queue::new(builder(
            &root_url,
            Some(Credentials::new(ROOT_CLIENT_ID, token)),
        ))
        .expect("client")
    };
    let old_root = shape.root_access_token.clone();
    let q = as_root(&old_root);
    let tq = task_queue_id();
    // Creates `n` tasks as the client `q` (each phase passes the one it means to test).
    async fn task(q: &taskcluster::Queue, tq: &str, n: usize) -> Vec<String> {
        let ids: Vec<String> = (0..n).map(|_| slugid()).collect();
        for id in &ids {
            q.createTask(id, &task_def(tq)).await.expect("createTask");
        }
        ids
    }
    let ids = task(&q, &tq, 1).await;
    let claimed = q
        .claimWork(&tq, &worker("g", "w", 1))
        .await
        .expect("claimWork");
    assert_eq!(claimed["tasks"][0]["status"]["taskId"], ids[0].as_str());
    let before = credentials_of(&claimed["tasks"][0]);

    // The rotation, as an operator does it: a new version of each secret.
    let (new_root, new_queue) = (
        format!("rotated-root-{}", slugid()),
        format!("rotated-queue-{}", slugid()),
    );
    let secret = |id: &str| shape.secrets.get(id).expect("the stack's secret").clone();
    let rotated = Instant::now();
    for (id, client, token) in [
        ("RootAccessTokenSecret", ROOT_CLIENT_ID, &new_root),
        (
            "QueueAccessTokenSecret",
            "static/taskcluster/queue",
            &new_queue,
        ),
    ] {
        let value = json!({ "clientId": client, "accessToken": token }).to_string();
        blackbox::shape::resources::put_secret_value(&secret(id), &value)
            .await
            .expect("PutSecretValue");
    }

    // The new root token, at once, on the functions it meets (a few routes).
    let q = as_root(&new_root);
    let more = task(&q, &tq, 3).await;
    q.status(&more[0])
        .await
        .expect("status with the new root token");
    let works_after = rotated.elapsed();
    eprintln!("the new root token worked {works_after:?} after the rotation");
    assert!(works_after < Duration::from_secs(60), "{works_after:?}");

    // The worker's credentials from before still reclaim: the grace.
    let wq = |c: Credentials| taskcluster::Queue::new(builder(&root_url, Some(c))).expect("client");
    let r = wq(before.clone())
        .reclaimTask(&ids[0], "0")
        .await
        .expect("credentials signed with the old queue token reclaim during the grace");
    drop(r);

    // Past the refresh every function has read again: the old root token is refused and new
    // credentials are signed with the new queue token.
    tokio::time::sleep(Duration::from_millis(REFRESH_MS + 1_000)).await;
    for _ in 0..3 {
        assert_eq!(err_status(as_root(&old_root).status(&more[0]).await), 401);
        assert_eq!(
            err_status(
                as_root(&old_root)
                    .claimWork(&tq, &worker("g", "x", 1))
                    .await
            ),
            401
        );
    }
    let r = wq(before.clone())
        .reclaimTask(&ids[0], "0")
        .await
        .expect("reclaim");
    let after = credentials_of(&r);
    let cert: Value = serde_json::from_str(after.certificate.as_deref().expect("a certificate"))
        .expect("certificate JSON");
    let seed = cert["seed"].as_str().expect("seed");
    assert_eq!(
        after.access_token,
        shared::auth::cert::temp_access_token(&new_queue, seed),
        "signed with the new queue token"
    );
    wq(after.clone())
        .reclaimTask(&ids[0], "0")
        .await
        .expect("the new credentials reclaim");

    // After the grace, what the old queue token signed is refused.
    let grace_ends = Duration::from_millis(GRACE_MS + 1_000);
    if let Some(left) = grace_ends.checked_sub(rotated.elapsed()) {
        tokio::time::sleep(left).await;
    }
    assert_eq!(err_status(wq(before).reclaimTask(&ids[0], "0").await), 401);
    let r = wq(after)
        .reportCompleted(&ids[0], "0")
        .await
        .expect("the new credentials resolve");
    assert_eq!(r["status"]["state"], "completed");
}
