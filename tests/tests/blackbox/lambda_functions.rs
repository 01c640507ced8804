//! Real Lambda function binaries, run through a Runtime API emulator against DynamoDB on
//! LocalStack: an HTTP endpoint answering API Gateway v2 events (with `%2F` in the path) and a
//! scheduled job answering an EventBridge event.
use blackbox::runtime_api::{apigw_v2_event, localstack_tables, start_function, RuntimeApi};
use blackbox::*;
use std::time::Duration;

fn localstack() -> bool {
    if not_in_shape("drives Lambda binaries of its own; the LocalStack pass runs it") {
        return false;
    }
    let on = std::env::var("TCQ_LOCALSTACK").as_deref() == Ok("1");
    if !on {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
    }
    on
}

#[tokio::test]
async fn http_functions_answer_api_gateway_events() {
    if !localstack() {
        return;
    }
    let prefix = localstack_tables("fn", false).await;
    let tq = task_queue_id();
    let id = slugid();

    let api = RuntimeApi::start().await;
    let (mut create, spawned) = start_function("create-task", &api, &prefix, &[]);
    let event = apigw_v2_event(
        "PUT",
        &format!("/api/queue/v1/task/{id}"),
        Some(&task_def(&tq)),
    );
    let reply = api
        .invoke(event, Duration::from_secs(30))
        .await
        .expect("createTask answered");
    let init = api.first_poll().map(|t| t.duration_since(spawned));
    eprintln!("create-task init (spawn to first /next): {init:?}");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let body: serde_json::Value =
        serde_json::from_str(reply["body"].as_str().unwrap_or_default()).expect("JSON body");
    assert_eq!(body["status"]["state"], "pending");
    // The function serves only its own endpoint.
    let other = api
        .invoke(
            apigw_v2_event("GET", "/api/queue/v1/ping", None),
            Duration::from_secs(30),
        )
        .await
        .expect("answered");
    assert_eq!(other["statusCode"], 404);
    create.kill().ok();

    // The gateway passes taskQueueId's slash percent-encoded; the function must decode it.
    let api = RuntimeApi::start().await;
    let (mut pending, _) = start_function("pending-tasks", &api, &prefix, &[]);
    let encoded = tq.replace('/', "%2F");
    let reply = api
        .invoke(
            apigw_v2_event("GET", &format!("/api/queue/v1/pending/{encoded}"), None),
            Duration::from_secs(30),
        )
        .await
        .expect("pendingTasks answered");
    let body: serde_json::Value =
        serde_json::from_str(reply["body"].as_str().unwrap_or_default()).expect("JSON body");
    assert_eq!(body["taskQueueId"], tq.as_str());
    assert_eq!(body["pendingTasks"], 1);
    pending.kill().ok();

    // One function serves the auth service; the events are signed with the root client.
    let api = RuntimeApi::start().await;
    let (mut auth, _) = start_function("auth", &api, &prefix, &[]);
    let reply = api
        .invoke(
            apigw_v2_event("GET", "/api/auth/v1/scopes/current", None),
            Duration::from_secs(30),
        )
        .await
        .expect("currentScopes answered");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let body: serde_json::Value =
        serde_json::from_str(reply["body"].as_str().unwrap_or_default()).expect("JSON body");
    assert_eq!(body["scopes"], serde_json::json!(["*"]));
    let queue_route = api
        .invoke(
            apigw_v2_event("GET", "/api/queue/v1/ping", None),
            Duration::from_secs(30),
        )
        .await
        .expect("answered");
    assert_eq!(queue_route["statusCode"], 404);
    auth.kill().ok();
}

#[tokio::test]
async fn scheduled_functions_answer_eventbridge_events() {
    if !localstack() {
        return;
    }
    let prefix = localstack_tables("fn", false).await;
    let api = RuntimeApi::start().await;
    let (mut reaper, spawned) = start_function("claim-reaper", &api, &prefix, &[]);
    let event = serde_json::json!({
        "version": "0", "id": "e", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "000000000000", "time": "2026-11-22T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:000000000000:rule/claim-reaper"], "detail": {}
    });
    let reply = api
        .invoke(event, Duration::from_secs(30))
        .await
        .expect("reaper answered");
    eprintln!(
        "claim-reaper init (spawn to first /next): {:?}",
        api.first_poll().map(|t| t.duration_since(spawned))
    );
    assert_eq!(reply["job"], shared::jobs::declare::CLAIM_REAPER.name);
    assert_eq!(reply["done"], 0);
    reaper.kill().ok();
}
