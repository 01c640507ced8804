//! 409 RequestConflict and 404 ResourceNotFound for calls that don't fit the task's state.

use crate::common::*;
use blackbox::*;
use serde_json::json;

#[tokio::test]
async fn another_worker_cannot_claim_a_claimed_run() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    q.claimTask(&id, "0", &claimer("g", "w1")).await.unwrap();
    for (g, w) in [("g", "w2"), ("other", "w1")] {
        let got = raw(
            &app,
            "POST",
            &format!("/task/{id}/runs/0/claim"),
            Some(&claimer(g, w)),
        )
        .await;
        assert_error(&got, 409, "RequestConflict");
    }
    // Also when the first claim came from claimWork.
    let id2 = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w1").await;
    assert_eq!(
        err_status(q.claimTask(&id2, "0", &claimer("g", "w2")).await),
        409
    );
    assert_eq!(status(&app, &id2).await["runs"][0]["workerId"], "w1");
}

#[tokio::test]
async fn a_pending_run_cannot_be_resolved_or_reclaimed() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    for (path, body) in [
        ("completed", None),
        ("failed", None),
        ("exception", Some(json!({"reason": "worker-shutdown"}))),
        ("reclaim", None),
    ] {
        let got = raw(
            &app,
            "POST",
            &format!("/task/{id}/runs/0/{path}"),
            body.as_ref(),
        )
        .await;
        assert_error(&got, 409, "RequestConflict");
    }
    assert_eq!(status(&app, &id).await["state"], "pending");
    assert_eq!(status(&app, &id).await["runs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_resolved_run_cannot_be_reclaimed_or_claimed() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    complete(&app, &id, 0).await;
    let got = raw(&app, "POST", &format!("/task/{id}/runs/0/reclaim"), None).await;
    assert_error(&got, 409, "RequestConflict");
    assert_eq!(
        err_status(q.claimTask(&id, "0", &claimer("g", "w")).await),
        409
    );
    assert_eq!(
        err_status(q.claimTask(&id, "0", &claimer("g", "other")).await),
        409
    );
}

#[tokio::test]
async fn an_unscheduled_task_has_no_run_to_claim_or_resolve() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    q.createTask(&id, &def_with(&tq, json!({"dependencies": [id]})))
        .await
        .unwrap();
    let got = raw(
        &app,
        "POST",
        &format!("/task/{id}/runs/0/claim"),
        Some(&claimer("g", "w")),
    )
    .await;
    assert_error(&got, 404, "ResourceNotFound");
    let got = raw(&app, "POST", &format!("/task/{id}/runs/0/completed"), None).await;
    assert_error(&got, 404, "ResourceNotFound");
}

#[tokio::test]
async fn unknown_runs_are_404() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    for (path, body) in [
        ("claim", Some(claimer("g", "w"))),
        ("reclaim", None),
        ("completed", None),
        ("failed", None),
        ("exception", Some(json!({"reason": "internal-error"}))),
    ] {
        for run in ["1", "7", "999"] {
            let got = raw(
                &app,
                "POST",
                &format!("/task/{id}/runs/{run}/{path}"),
                body.as_ref(),
            )
            .await;
            assert_error(&got, 404, "ResourceNotFound");
        }
    }
    assert_eq!(status(&app, &id).await["state"], "running");
}

#[tokio::test]
async fn a_task_group_belongs_to_one_scheduler() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    create(
        &app,
        &def_with(&tq, json!({"taskGroupId": group, "schedulerId": "sched-a"})),
    )
    .await;
    create(
        &app,
        &def_with(&tq, json!({"taskGroupId": group, "schedulerId": "sched-a"})),
    )
    .await;
    let id = slugid();
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{id}"),
        Some(&def_with(
            &tq,
            json!({"taskGroupId": group, "schedulerId": "sched-b"}),
        )),
    )
    .await;
    assert_error(&got, 409, "RequestConflict");
    assert_eq!(err_status(q.task(&id).await), 404, "not created");
}

#[tokio::test]
async fn rerun_stops_at_fifty_runs() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
    for run in 0..50u32 {
        let r = run.to_string();
        q.claimTask(&id, &r, &claimer("g", "w")).await.unwrap();
        q.reportFailed(&id, &r).await.unwrap();
        if run < 49 {
            let s = q.rerunTask(&id).await.unwrap();
            assert_eq!(
                s["status"]["runs"].as_array().unwrap().len(),
                run as usize + 2
            );
        }
    }
    let got = raw(&app, "POST", &format!("/task/{id}/rerun"), None).await;
    assert_error(&got, 409, "RequestConflict");
    let s = status(&app, &id).await;
    assert_eq!(s["runs"].as_array().unwrap().len(), 50);
    assert_eq!(s["state"], "failed");
}

#[tokio::test]
async fn automatic_retries_stop_at_fifty_runs() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 49}))).await;
    for run in 0..50u32 {
        let r = run.to_string();
        q.claimTask(&id, &r, &claimer("g", "w")).await.unwrap();
        let s = q
            .reportException(&id, &r, &json!({"reason": "worker-shutdown"}))
            .await
            .unwrap();
        let n = s["status"]["runs"].as_array().unwrap().len();
        assert_eq!(n, (run as usize + 2).min(50));
    }
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "exception");
    assert_eq!(s["retriesLeft"], 0);
}
