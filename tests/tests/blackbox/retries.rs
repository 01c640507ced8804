//! reportException: which reasons retry, how retries are counted, idempotency and conflicts.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};

async fn claimed_task(app: &TestServer, tq: &str, retries: u32) -> String {
    let id = create(app, &def_with(tq, json!({ "retries": retries }))).await;
    let c = claim_one(app, tq, "g", "w").await;
    assert_eq!(c["status"]["taskId"], id.as_str());
    id
}

async fn report(app: &TestServer, id: &str, run: u32, reason: &str) -> anyhow::Result<Value> {
    app.queue()
        .reportException(id, &run.to_string(), &json!({ "reason": reason }))
        .await
}

async fn retrying_reason(reason: &str, reason_created: &str) {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = claimed_task(&app, &tq, 1).await;

    let r = report(&app, &id, 0, reason).await.unwrap();
    let s = &r["status"];
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{reason} retries: {s:#}");
    assert_eq!(runs[0]["state"], "exception");
    assert_eq!(runs[0]["reasonResolved"], reason);
    assert_eq!(runs[1]["state"], "pending");
    assert_eq!(runs[1]["reasonCreated"], reason_created);
    assert_eq!(s["state"], "pending");
    assert_eq!(s["retriesLeft"], 0);
    let exc = wait_events(&app, &id, "task-exception", Some(0), 1).await;
    assert_eq!(
        exc[0].payload["status"]["runs"][0]["reasonResolved"],
        reason
    );
    wait_events(&app, &id, "task-pending", Some(1), 1).await;

    // Repeating the same report is idempotent and re-sends both messages.
    let again = report(&app, &id, 0, reason).await.unwrap();
    assert_eq!(again, r);
    wait_events(&app, &id, "task-exception", Some(0), 2).await;
    wait_events(&app, &id, "task-pending", Some(1), 2).await;

    // The retry run is claimable; with no retries left, the same reason is final.
    let c = claim_one(&app, &tq, "g", "w2").await;
    assert_eq!(c["runId"], 1);
    let last = report(&app, &id, 1, reason).await.unwrap();
    let runs = last["status"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "no retries left");
    assert_eq!(runs[1]["state"], "exception");
    assert_eq!(runs[1]["reasonResolved"], reason);
    assert_eq!(last["status"]["state"], "exception");
    counts_settle(&app, &tq, Some(0), None).await;
}

#[tokio::test]
async fn worker_shutdown_retries_with_reason_retry() {
    retrying_reason("worker-shutdown", "retry").await;
}

#[tokio::test]
async fn intermittent_task_retries_with_reason_task_retry() {
    retrying_reason("intermittent-task", "task-retry").await;
}

#[tokio::test]
async fn retrying_reasons_do_not_retry_without_retries() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    for reason in ["worker-shutdown", "intermittent-task"] {
        let id = claimed_task(&app, &tq, 0).await;
        let r = report(&app, &id, 0, reason).await.unwrap();
        assert_eq!(r["status"]["runs"].as_array().unwrap().len(), 1, "{reason}");
        assert_eq!(r["status"]["state"], "exception");
        assert_eq!(r["status"]["retriesLeft"], 0);
    }
}

#[tokio::test]
async fn retries_are_counted_down_to_zero() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = claimed_task(&app, &tq, 3).await;
    for run in 0..4u32 {
        if run > 0 {
            let c = claim_one(&app, &tq, "g", "w").await;
            assert_eq!(c["runId"], run);
        }
        let r = report(&app, &id, run, "worker-shutdown").await.unwrap();
        let expected_runs = (run + 2).min(4) as usize;
        assert_eq!(r["status"]["runs"].as_array().unwrap().len(), expected_runs);
        assert_eq!(r["status"]["retriesLeft"], 3u32.saturating_sub(run + 1));
    }
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "exception");
    assert_eq!(s["runs"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn other_reasons_never_retry_and_are_idempotent() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    for reason in [
        "malformed-payload",
        "resource-unavailable",
        "internal-error",
    ] {
        let id = claimed_task(&app, &tq, 5).await;
        let r = report(&app, &id, 0, reason).await.unwrap();
        let runs = r["status"]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{reason} must not retry");
        assert_eq!(runs[0]["reasonResolved"], reason);
        assert_eq!(r["status"]["state"], "exception");
        assert_eq!(r["status"]["retriesLeft"], 5, "{reason} uses no retry");
        let again = report(&app, &id, 0, reason).await.unwrap();
        assert_eq!(again, r, "{reason} is idempotent");
        let ev = wait_events(&app, &id, "task-exception", Some(0), 2).await;
        assert_eq!(ev[1].payload["status"]["runs"][0]["reasonResolved"], reason);
        assert_eq!(ev[0].payload["workerGroup"], "g");
        assert_eq!(ev[0].payload["workerId"], "w");
    }
}

#[tokio::test]
async fn a_second_report_with_a_different_reason_conflicts() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    for (first, second) in [
        ("malformed-payload", "internal-error"),
        ("internal-error", "resource-unavailable"),
        ("worker-shutdown", "intermittent-task"),
        ("intermittent-task", "malformed-payload"),
    ] {
        let id = claimed_task(&app, &tq, 1).await;
        let r = report(&app, &id, 0, first).await.unwrap();
        let got = report(&app, &id, 0, second).await;
        assert_eq!(err_status(got), 409, "{first} then {second}");
        assert_eq!(status(&app, &id).await, r["status"], "status unchanged");
        let raw_got = raw(
            &app,
            "POST",
            &format!("/task/{id}/runs/0/exception"),
            Some(&json!({"reason": second})),
        )
        .await;
        assert_error(&raw_got, 409, "RequestConflict");
        // Completing or failing the resolved run conflicts too.
        assert_eq!(err_status(app.queue().reportCompleted(&id, "0").await), 409);
        assert_eq!(err_status(app.queue().reportFailed(&id, "0").await), 409);
        // Drain the retry run, if any, so the next iteration claims its own task.
        if r["status"]["runs"].as_array().unwrap().len() == 2 {
            app.queue().cancelTask(&id).await.unwrap();
        }
    }
}

#[tokio::test]
async fn reasons_a_worker_may_not_report_are_rejected() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = claimed_task(&app, &tq, 1).await;
    for reason in [
        json!("canceled"),
        json!("claim-expired"),
        json!("deadline-exceeded"),
        json!("superseded"),
        json!("bogus"),
        json!(7),
    ] {
        let got = raw(
            &app,
            "POST",
            &format!("/task/{id}/runs/0/exception"),
            Some(&json!({ "reason": reason })),
        )
        .await;
        let msg = assert_error(&got, 400, "InputValidationError");
        assert!(msg.contains("reason"), "message names the field: {msg}");
    }
    let got = raw(
        &app,
        "POST",
        &format!("/task/{id}/runs/0/exception"),
        Some(&json!({})),
    )
    .await;
    assert_error(&got, 400, "InputValidationError");
    assert_eq!(
        status(&app, &id).await["state"],
        "running",
        "nothing changed"
    );
}

#[tokio::test]
async fn retry_runs_are_claimed_after_an_old_run_is_reported_again() {
    // Reporting on a superseded run (not the latest) other than an idempotent repeat conflicts.
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = claimed_task(&app, &tq, 2).await;
    report(&app, &id, 0, "worker-shutdown").await.unwrap();
    assert_eq!(err_status(q.reportCompleted(&id, "0").await), 409);
    assert_eq!(err_status(q.reclaimTask(&id, "0").await), 409);
    // Run 1 is pending, not running: resolving it conflicts until it is claimed.
    assert_eq!(err_status(q.reportCompleted(&id, "1").await), 409);
    claim_one(&app, &tq, "g", "w").await;
    let done = q.reportCompleted(&id, "1").await.unwrap();
    assert_eq!(done["status"]["state"], "completed");
    assert_eq!(
        done["status"]["runs"][0]["reasonResolved"],
        "worker-shutdown"
    );
}
