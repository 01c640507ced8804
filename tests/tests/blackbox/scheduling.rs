//! Unscheduled tasks (defineTask, self-dependency), scheduleTask, rerunTask and cancelTask.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::time::Duration;

/// defineTask is not in the official client: raw `POST /task/<id>/define`.
async fn define(app: &TestServer, id: &str, def: &Value) -> Value {
    let (code, body) = raw(app, "POST", &format!("/task/{id}/define"), Some(def)).await;
    assert_eq!(code, 200, "defineTask: {body:#}");
    body
}

fn self_dependent(tq: &str, id: &str) -> Value {
    def_with(tq, json!({ "dependencies": [id] }))
}

#[tokio::test]
async fn define_task_stays_unscheduled_until_schedule_task() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    let r = define(&app, &id, &def).await;
    assert_eq!(r["status"]["state"], "unscheduled");
    assert_eq!(r["status"]["runs"], json!([]));
    shared::schema::check("task-status-response", &r).unwrap();
    assert_dates(&r);
    assert_eq!(q.task(&id).await.unwrap()["payload"], json!({}));

    // Nothing is pending: claimWork finds nothing (harness claimWork timeout is 2 s).
    assert_eq!(q.pendingTasks(&tq).await.unwrap()["pendingTasks"], 0);
    let empty = q.claimWork(&tq, &worker("g", "w", 1)).await.unwrap();
    assert_eq!(empty["tasks"], json!([]));
    wait_events(&app, &id, "task-defined", None, 1).await;
    assert!(!names_of(&app, &id).contains(&"task-pending".to_string()));

    let s = q.scheduleTask(&id).await.unwrap();
    assert_eq!(s["status"]["state"], "pending");
    assert_eq!(s["status"]["runs"][0]["reasonCreated"], "scheduled");
    wait_events(&app, &id, "task-pending", Some(0), 1).await;
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id.as_str());
    complete(&app, &id, 0).await;
}

#[tokio::test]
async fn define_task_is_idempotent_and_conflicts_on_a_different_definition() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    let a = define(&app, &id, &def).await;
    let b = define(&app, &id, &def).await;
    assert_eq!(a, b);
    let other = def_with(&tq, json!({"payload": {"different": true}}));
    let got = raw(&app, "POST", &format!("/task/{id}/define"), Some(&other)).await;
    assert_error(&got, 409, "RequestConflict");
}

#[tokio::test]
async fn self_dependency_stays_unscheduled_until_schedule_task() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let r = q.createTask(&id, &self_dependent(&tq, &id)).await.unwrap();
    assert_eq!(r["status"]["state"], "unscheduled");
    assert_eq!(r["status"]["runs"], json!([]));
    assert_eq!(q.task(&id).await.unwrap()["dependencies"], json!([id]));

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status(&app, &id).await["state"], "unscheduled");
    assert_eq!(q.pendingTasks(&tq).await.unwrap()["pendingTasks"], 0);
    // (In the deployed shape events come through the table's stream, after the answer.)
    wait_events(&app, &id, "task-defined", None, 1).await;
    assert_eq!(names_of(&app, &id), ["task-defined"]);

    let s = q.scheduleTask(&id).await.unwrap();
    assert_eq!(s["status"]["state"], "pending");
    assert_eq!(s["status"]["runs"].as_array().unwrap().len(), 1);
    // Scheduling again is a no-op.
    let again = q.scheduleTask(&id).await.unwrap();
    assert_eq!(again, s);
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id.as_str());
    // Scheduling a running task changes nothing either.
    let running = q.scheduleTask(&id).await.unwrap();
    assert_eq!(running["status"]["state"], "running");
    assert_eq!(running["status"]["runs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn schedule_task_on_a_pending_task_is_a_no_op_and_unknown_is_404() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let before = status(&app, &id).await;
    let r = q.scheduleTask(&id).await.unwrap();
    assert_eq!(r["status"], before);
    assert_eq!(err_status(q.scheduleTask(&slugid()).await), 404);
    let got = raw(&app, "POST", &format!("/task/{}/schedule", slugid()), None).await;
    assert_error(&got, 404, "ResourceNotFound");
}

#[tokio::test]
async fn cancel_a_pending_task_is_idempotent() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let r = q.cancelTask(&id).await.unwrap();
    let s = &r["status"];
    assert_eq!(s["state"], "exception");
    assert_eq!(s["runs"].as_array().unwrap().len(), 1);
    assert_eq!(s["runs"][0]["reasonCreated"], "scheduled");
    assert_eq!(s["runs"][0]["reasonResolved"], "canceled");
    assert!(s["runs"][0]["resolved"].is_string());
    wait_events(&app, &id, "task-exception", Some(0), 1).await;

    let again = q.cancelTask(&id).await.unwrap();
    assert_eq!(again, r, "a second cancel returns the same status");
    // ...and re-sends the message.
    wait_events(&app, &id, "task-exception", Some(0), 2).await;
    assert_eq!(q.pendingTasks(&tq).await.unwrap()["pendingTasks"], 0);
    // A canceled task can't be claimed or resolved any more.
    let claim = q.claimTask(&id, "0", &claimer("g", "w")).await;
    assert_eq!(err_status(claim), 409);
}

#[tokio::test]
async fn cancel_a_running_task_stops_the_worker() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    let r = q.cancelTask(&id).await.unwrap();
    assert_eq!(r["status"]["state"], "exception");
    assert_eq!(r["status"]["runs"][0]["reasonResolved"], "canceled");
    assert_eq!(r["status"]["runs"][0]["workerId"], "w");
    assert_eq!(
        r["status"]["runs"].as_array().unwrap().len(),
        1,
        "cancel never retries"
    );
    assert_eq!(q.cancelTask(&id).await.unwrap(), r);
    assert_eq!(err_status(q.reclaimTask(&id, "0").await), 409);
    assert_eq!(err_status(q.reportCompleted(&id, "0").await), 409);
    let ev = wait_events(&app, &id, "task-exception", Some(0), 1).await;
    assert_eq!(ev[0].payload["workerId"], "w");
}

#[tokio::test]
async fn cancel_an_unscheduled_task_adds_an_exception_run() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    q.createTask(&id, &self_dependent(&tq, &id)).await.unwrap();
    let r = q.cancelTask(&id).await.unwrap();
    let s = &r["status"];
    assert_eq!(s["state"], "exception");
    assert_eq!(s["runs"].as_array().unwrap().len(), 1);
    assert_eq!(s["runs"][0]["state"], "exception");
    assert_eq!(s["runs"][0]["reasonCreated"], "exception");
    assert_eq!(s["runs"][0]["reasonResolved"], "canceled");
    assert_eq!(q.cancelTask(&id).await.unwrap(), r);
    // A canceled task is not scheduled by scheduleTask.
    let sched = q.scheduleTask(&id).await.unwrap();
    assert_eq!(sched["status"]["state"], "exception");
}

async fn concurrent_cancels_agree(app: &TestServer, id: &str, reason_created: &str) {
    let calls = (0..10).map(|_| {
        let q = app.queue();
        let id = id.to_string();
        tokio::spawn(async move { q.cancelTask(&id).await })
    });
    let mut results = vec![];
    for c in calls {
        results.push(c.await.unwrap().expect("cancel succeeds"));
    }
    for r in &results {
        assert_eq!(r, &results[0], "all concurrent cancels agree");
        let runs = r["status"]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0]["reasonCreated"], reason_created);
        assert_eq!(runs[0]["reasonResolved"], "canceled");
    }
    assert_eq!(status(app, id).await, results[0]["status"]);
}

#[tokio::test]
async fn ten_concurrent_cancels_of_a_pending_task_agree() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    concurrent_cancels_agree(&app, &id, "scheduled").await;
}

#[tokio::test]
async fn ten_concurrent_cancels_of_an_unscheduled_task_agree() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    app.queue()
        .createTask(&id, &self_dependent(&tq, &id))
        .await
        .unwrap();
    concurrent_cancels_agree(&app, &id, "exception").await;
}

#[tokio::test]
async fn cancel_of_a_completed_task_changes_nothing() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    let done = complete(&app, &id, 0).await;
    let r = q.cancelTask(&id).await.unwrap();
    assert_eq!(r, done);
    wait_events(&app, &id, "task-completed", Some(0), 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!names_of(&app, &id).contains(&"task-exception".to_string()));
}

#[tokio::test]
async fn rerun_of_a_pending_or_running_task_is_a_no_op() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let before = status(&app, &id).await;
    assert_eq!(q.rerunTask(&id).await.unwrap()["status"], before);
    claim_one(&app, &tq, "g", "w").await;
    let running = status(&app, &id).await;
    assert_eq!(q.rerunTask(&id).await.unwrap()["status"], running);
    assert_eq!(running["runs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn rerun_of_a_resolved_task_adds_a_pending_run() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    for how in ["completed", "failed", "exception"] {
        let id = create(&app, &def_with(&tq, json!({"retries": 3}))).await;
        claim_one(&app, &tq, "g", "w").await;
        match how {
            "completed" => q.reportCompleted(&id, "0").await.unwrap(),
            "failed" => q.reportFailed(&id, "0").await.unwrap(),
            _ => q
                .reportException(&id, "0", &json!({"reason": "malformed-payload"}))
                .await
                .unwrap(),
        };
        let r = q.rerunTask(&id).await.unwrap();
        let runs = r["status"]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{how}");
        assert_eq!(runs[0]["state"], how);
        assert_eq!(runs[1]["state"], "pending");
        assert_eq!(runs[1]["reasonCreated"], "rerun");
        assert_eq!(r["status"]["state"], "pending");
        assert_eq!(r["status"]["retriesLeft"], 3);
        wait_events(&app, &id, "task-pending", Some(1), 1).await;
        // Repeating is idempotent: no run 2.
        let again = q.rerunTask(&id).await.unwrap();
        assert_eq!(again["status"]["runs"].as_array().unwrap().len(), 2);
        // The new run is claimable.
        let claim = claim_one(&app, &tq, "g", "w").await;
        assert_eq!(claim["status"]["taskId"], id.as_str());
        assert_eq!(claim["runId"], 1);
        complete(&app, &id, 1).await;
    }
    assert_eq!(err_status(q.rerunTask(&slugid()).await), 404);
}

#[tokio::test]
async fn rerun_of_an_unscheduled_task_makes_run_zero_pending() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    q.createTask(&id, &self_dependent(&tq, &id)).await.unwrap();
    let r = q.rerunTask(&id).await.unwrap();
    assert_eq!(r["status"]["state"], "pending");
    assert_eq!(r["status"]["runs"].as_array().unwrap().len(), 1);
    wait_events(&app, &id, "task-pending", Some(0), 1).await;
    claim_one(&app, &tq, "g", "w").await;
}

#[tokio::test]
async fn dependencies_already_satisfied_at_creation_schedule_the_task_at_once() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let other = task_queue_id();
    let done = create(&app, &task_def(&other)).await;
    let failed = create(&app, &task_def(&other)).await;
    let pending = create(&app, &task_def(&other)).await;
    for id in [&done, &failed] {
        q.claimTask(id, "0", &claimer("g", "w")).await.unwrap();
    }
    complete(&app, &done, 0).await;
    q.reportFailed(&failed, "0").await.unwrap();

    let state_of = |deps: Value, requires: &str| {
        let def = def_with(&tq, json!({ "dependencies": deps, "requires": requires }));
        let q = app.queue();
        async move {
            let id = slugid();
            let r = q.createTask(&id, &def).await.unwrap();
            r["status"]["state"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(state_of(json!([done]), "all-completed").await, "pending");
    assert_eq!(
        state_of(json!([done, failed]), "all-completed").await,
        "unscheduled"
    );
    assert_eq!(
        state_of(json!([done, failed]), "all-resolved").await,
        "pending"
    );
    assert_eq!(
        state_of(json!([pending]), "all-resolved").await,
        "unscheduled"
    );
    // A dependency on itself keeps a task unscheduled even when the others are satisfied.
    let id = slugid();
    let r = q
        .createTask(&id, &def_with(&tq, json!({ "dependencies": [done, id] })))
        .await
        .unwrap();
    assert_eq!(r["status"]["state"], "unscheduled");
}
