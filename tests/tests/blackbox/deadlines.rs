//! Deadlines: tasks created with `created = now-5s`, `deadline = now+3s` are resolved
//! `exception/deadline-exceeded` by the reaper; afterwards a task is immutable.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A deadline close enough to wait for: 3 s, or 8 s in the deployed shape, where a
/// createTask and a claim on a loaded LocalStack took more than 3 s together.
fn deadline_ms() -> i64 {
    local_or_shape(3_000, 8_000)
}
const WAIT: Duration = Duration::from_secs(20);

fn is_resolved(s: &Value) -> bool {
    s["state"] == "exception"
}

/// Every state-changing call after the deadline is 409.
async fn assert_immutable(app: &TestServer, id: &str) {
    let q = app.queue();
    let before = status(app, id).await;
    assert_eq!(err_status(q.scheduleTask(id).await), 409, "scheduleTask");
    assert_eq!(err_status(q.rerunTask(id).await), 409, "rerunTask");
    assert_eq!(err_status(q.cancelTask(id).await), 409, "cancelTask");
    assert_eq!(
        err_status(q.claimTask(id, "0", &claimer("g", "w")).await),
        409,
        "claimTask"
    );
    assert_eq!(err_status(q.reclaimTask(id, "0").await), 409, "reclaimTask");
    assert_eq!(
        err_status(
            q.changeTaskPriority(id, &json!({"newPriority": "highest"}))
                .await
        ),
        409,
        "changeTaskPriority"
    );
    let got = raw(app, "POST", &format!("/task/{id}/rerun"), None).await;
    assert_error(&got, 409, "RequestConflict");
    assert_eq!(status(app, id).await, before, "nothing changed");
}

fn deadline_of(def: &Value) -> String {
    def["deadline"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_pending_task_past_its_deadline_is_resolved() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let def = short_deadline_def(&tq, deadline_ms());
    let id = create(&app, &def).await;
    assert_eq!(status(&app, &id).await["state"], "pending");

    let s = wait_status(&app, &id, WAIT, is_resolved).await;
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["reasonCreated"], "scheduled");
    assert_eq!(runs[0]["reasonResolved"], "deadline-exceeded");
    assert!(runs[0]["resolved"].as_str().unwrap() >= deadline_of(&def).as_str());
    counts_settle(&app, &tq, Some(0), None).await;
    let ev = wait_events(&app, &id, "task-exception", Some(0), 1).await;
    let words: Vec<&str> = ev[0].routing_key.split('.').collect();
    assert_eq!(words[1], id.as_str());
    assert_eq!(words[2], "0");
    assert_eq!(
        (words[3], words[4]),
        ("_", "_"),
        "no worker: {}",
        ev[0].routing_key
    );
    assert_immutable(&app, &id).await;
}

#[tokio::test]
async fn a_running_task_past_its_deadline_is_resolved() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &short_deadline_def(&tq, deadline_ms())).await;
    claim_one(&app, &tq, "g", "w").await;
    let s = wait_status(&app, &id, WAIT, is_resolved).await;
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "no retry after a deadline");
    assert_eq!(runs[0]["reasonCreated"], "scheduled");
    assert_eq!(runs[0]["reasonResolved"], "deadline-exceeded");
    assert_eq!(runs[0]["workerId"], "w");
    wait_events(&app, &id, "task-exception", Some(0), 1).await;
    assert_eq!(err_status(q.reportCompleted(&id, "0").await), 409);
    counts_settle(&app, &tq, None, Some(0)).await;
    assert_immutable(&app, &id).await;
}

async fn unscheduled_task_past_its_deadline(define: bool) {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    if define {
        let def = short_deadline_def(&tq, deadline_ms());
        let got = raw(&app, "POST", &format!("/task/{id}/define"), Some(&def)).await;
        assert_eq!(got.0, 200, "{:#}", got.1);
    } else {
        let mut def = short_deadline_def(&tq, deadline_ms());
        def["dependencies"] = json!([id]);
        app.queue().createTask(&id, &def).await.unwrap();
    }
    assert_eq!(status(&app, &id).await["state"], "unscheduled");
    let s = wait_status(&app, &id, WAIT, is_resolved).await;
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["state"], "exception");
    assert_eq!(runs[0]["reasonCreated"], "exception");
    assert_eq!(runs[0]["reasonResolved"], "deadline-exceeded");
    let ev = wait_events(&app, &id, "task-exception", Some(0), 1).await;
    assert_eq!(ev[0].payload["task"]["tags"], json!({}));
    assert_immutable(&app, &id).await;
}

#[tokio::test]
async fn an_unscheduled_self_dependent_task_past_its_deadline_gets_an_exception_run() {
    unscheduled_task_past_its_deadline(false).await;
}

#[tokio::test]
async fn a_defined_task_past_its_deadline_gets_an_exception_run() {
    unscheduled_task_past_its_deadline(true).await;
}

#[tokio::test]
async fn a_completed_task_is_untouched_by_its_deadline() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let def = short_deadline_def(&tq, deadline_ms());
    let id = create(&app, &def).await;
    claim_one(&app, &tq, "g", "w").await;
    let done = complete(&app, &id, 0).await;
    let deadline = shared::time::Ts::parse(&deadline_of(&def)).unwrap();
    let left = deadline.millis() - shared::time::Ts::now().millis();
    // Past the deadline plus a few reaper passes.
    tokio::time::sleep(Duration::from_millis(left.max(0) as u64 + 700)).await;
    assert_eq!(status(&app, &id).await, done["status"]);
    assert!(!names_of(&app, &id).contains(&"task-exception".to_string()));
    // rerun/cancel/schedule are 409 after the deadline even for a completed task.
    assert_immutable(&app, &id).await;
}

#[tokio::test]
async fn a_deadline_wins_over_an_expired_claim() {
    // Claims last 1 s, but the deadline (8 s: room for a slow claim on a loaded machine) is
    // reached while the retry run is pending or running: the task ends deadline-exceeded,
    // never pending again.
    let app = spawn_app_with(|c| c.queue.claim_timeout_secs = 1).await;
    let tq = task_queue_id();
    let id = create(&app, &short_deadline_def(&tq, 8_000)).await;
    claim_one(&app, &tq, "g", "w").await;
    let s = wait_status(&app, &id, Duration::from_secs(30), |s| {
        s["state"] == "exception"
            && s["runs"]
                .as_array()
                .and_then(|r| r.last())
                .is_some_and(|r| r["reasonResolved"] == "deadline-exceeded")
    })
    .await;
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs[0]["reasonResolved"], "claim-expired");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(status(&app, &id).await, s, "resolved for good");
}

/// A deadline ends a task when it passes, not when the reaper comes by (as deployed once a
/// minute; here once an hour): a report after it answers 409, and the status shows
/// `deadline-exceeded` at once, with no retry.
#[tokio::test]
async fn a_report_after_the_deadline_is_refused_however_late_the_reaper_comes() {
    let app = spawn_app_with(|cfg| cfg.reaper_interval_ms = 3_600_000).await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &short_deadline_def(&tq, deadline_ms())).await;
    claim_one(&app, &tq, "g", "w").await;
    tokio::time::sleep(Duration::from_millis(deadline_ms() as u64 + 500)).await;
    assert_eq!(err_status(q.reportCompleted(&id, "0").await), 409);
    let s = status(&app, &id).await;
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "no retry after a deadline");
    assert_eq!(runs[0]["state"], "exception");
    assert_eq!(runs[0]["reasonResolved"], "deadline-exceeded");
    assert_eq!(err_status(q.reclaimTask(&id, "0").await), 409);
    wait_events(&app, &id, "task-exception", Some(0), 1).await;
}
