//! Repeating a call gives the same answer (and re-sends its messages); changing it conflicts.

use crate::common::*;
use blackbox::*;
use serde_json::json;

#[tokio::test]
async fn same_definition_twice_returns_the_same_status_and_resends_events() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    let first = q.createTask(&id, &def).await.unwrap();
    wait_events(&app, &id, "task-pending", Some(0), 1).await;
    let second = q.createTask(&id, &def).await.unwrap();
    assert_eq!(first, second);
    wait_events(&app, &id, "task-defined", None, 2).await;
    wait_events(&app, &id, "task-pending", Some(0), 2).await;
    // Still a single pending run: asking for two claims gives one.
    counts_settle(&app, &tq, Some(1), None).await;
    let claims = q.claimWork(&tq, &worker("g", "w", 2)).await.unwrap();
    assert_eq!(claims["tasks"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn repeating_create_after_a_claim_returns_the_current_status() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    q.createTask(&id, &def).await.unwrap();
    claim_one(&app, &tq, "g", "w").await;
    let again = q.createTask(&id, &def).await.unwrap();
    assert_eq!(again["status"]["state"], "running");
    assert_eq!(again["status"], status(&app, &id).await);
    wait_events(&app, &id, "task-defined", None, 2).await;
    // The run is not pending, so no second task-pending.
    let pending = events_of(&app, &id)
        .iter()
        .filter(|e| short_name(e) == "task-pending")
        .count();
    assert_eq!(pending, 1);
}

#[tokio::test]
async fn dates_with_extra_fractional_digits_are_normalised() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    // "…SS.mmmZ" → "…SS.mmm4567Z": the same instant to the millisecond.
    let longer = |s: &serde_json::Value| {
        let s = s.as_str().unwrap();
        format!("{}4567Z", s.trim_end_matches('Z'))
    };
    let mut long = def.clone();
    long["created"] = json!(longer(&def["created"]));
    long["deadline"] = json!(longer(&def["deadline"]));
    let first = q.createTask(&id, &long).await.unwrap();
    let t = q.task(&id).await.unwrap();
    assert_eq!(
        t["created"], def["created"],
        "stored with millisecond precision"
    );
    assert_eq!(t["deadline"], def["deadline"]);
    assert_eq!(first["status"]["deadline"], def["deadline"]);
    let second = q.createTask(&id, &def).await.unwrap();
    assert_eq!(first, second);
    // A changed date is a different definition.
    let mut later = def.clone();
    later["deadline"] = json!(ts(3_700_000));
    assert_eq!(err_status(q.createTask(&id, &later).await), 409);
}

#[tokio::test]
async fn a_different_definition_for_the_same_task_id_conflicts() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    let first = q.createTask(&id, &def).await.unwrap();
    let variants = [
        def_with(
            &task_queue_id(),
            json!({"created": def["created"], "deadline": def["deadline"]}),
        ),
        def_with(
            &tq,
            json!({"created": def["created"], "deadline": def["deadline"], "payload": {"x": 1}}),
        ),
        def_with(
            &tq,
            json!({"created": def["created"], "deadline": def["deadline"], "retries": 1}),
        ),
        def_with(
            &tq,
            json!({"created": def["created"], "deadline": def["deadline"], "priority": "high"}),
        ),
    ];
    for v in variants {
        let got = raw(&app, "PUT", &format!("/task/{id}"), Some(&v)).await;
        assert_error(&got, 409, "RequestConflict");
    }
    assert_eq!(
        status(&app, &id).await,
        first["status"],
        "the task is unchanged"
    );
    assert_eq!(q.task(&id).await.unwrap()["payload"], json!({}));
}

#[tokio::test]
async fn explicit_defaults_equal_omitted_defaults() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    q.createTask(&id, &def).await.unwrap();
    let explicit = def_with(
        &tq,
        json!({
            "created": def["created"], "deadline": def["deadline"],
            "priority": "lowest", "retries": 5, "schedulerId": "-", "projectId": "none",
            "routes": [], "scopes": [], "tags": {}, "extra": {}, "dependencies": [],
            "requires": "all-completed"
        }),
    );
    q.createTask(&id, &explicit).await.unwrap();
}

#[tokio::test]
async fn ten_concurrent_identical_creates_make_one_task() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let q = app.queue();
            let (id, def) = (id.clone(), def.clone());
            tokio::spawn(async move { q.createTask(&id, &def).await })
        })
        .collect();
    for c in calls {
        let r = c.await.unwrap().expect("every identical create succeeds");
        assert_eq!(r["status"]["runs"].as_array().unwrap().len(), 1);
        assert_eq!(r["status"]["taskId"], id.as_str());
    }
    counts_settle(&app, &tq, Some(1), None).await;
}

#[tokio::test]
async fn resolutions_are_idempotent_and_resend_their_message() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    for (how, exch) in [("completed", "task-completed"), ("failed", "task-failed")] {
        let id = create(&app, &task_def(&tq)).await;
        claim_one(&app, &tq, "g", "w").await;
        let call = |id: String| {
            let q = app.queue();
            async move {
                if how == "completed" {
                    q.reportCompleted(&id, "0").await
                } else {
                    q.reportFailed(&id, "0").await
                }
            }
        };
        let a = call(id.clone()).await.unwrap();
        let b = call(id.clone()).await.unwrap();
        assert_eq!(a, b, "{how}");
        assert_eq!(a["status"]["state"], how);
        let ev = wait_events(&app, &id, exch, Some(0), 2).await;
        assert_eq!(ev[0].payload, ev[1].payload);
        // The other resolution conflicts.
        let other = if how == "completed" {
            q.reportFailed(&id, "0").await
        } else {
            q.reportCompleted(&id, "0").await
        };
        assert_eq!(err_status(other), 409);
        let exc = q
            .reportException(&id, "0", &json!({"reason": "internal-error"}))
            .await;
        assert_eq!(err_status(exc), 409);
        assert_eq!(status(&app, &id).await, a["status"]);
    }
}

#[tokio::test]
async fn claim_task_by_the_same_worker_twice_is_idempotent() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let body = json!({"workerGroup": "g", "workerId": "w"});
    let a = q.claimTask(&id, "0", &body).await.unwrap();
    let b = q.claimTask(&id, "0", &body).await.unwrap();
    assert_eq!(a["status"], b["status"]);
    assert_eq!(a["runId"], b["runId"]);
    assert_eq!(b["status"]["state"], "running");
}
