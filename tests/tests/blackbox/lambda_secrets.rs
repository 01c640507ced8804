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
