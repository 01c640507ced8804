//! Priorities: claim order, changeTaskPriority, and the removed `normal` priority.

use crate::common::*;
use blackbox::*;
use serde_json::json;

const ORDER: [&str; 7] = [
    "highest",
    "very-high",
    "high",
    "medium",
    "low",
    "very-low",
    "lowest",
];

#[tokio::test]
async fn a_high_task_is_claimed_before_an_older_lowest_one() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let low = create(&app, &def_with(&tq, json!({"priority": "lowest"}))).await;
    let high = create(&app, &def_with(&tq, json!({"priority": "high"}))).await;
    let first = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(first["status"]["taskId"], high.as_str());
    assert_eq!(first["task"]["priority"], "high");
    let second = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(second["status"]["taskId"], low.as_str());
}

#[tokio::test]
async fn claims_follow_all_seven_priorities() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    // Created lowest first, so insertion order is the opposite of the claim order.
    let mut ids = vec![];
    for p in ORDER.iter().rev() {
        ids.push((
            *p,
            create(&app, &def_with(&tq, json!({ "priority": p }))).await,
        ));
    }
    for want in ORDER {
        let c = claim_one(&app, &tq, "g", "w").await;
        let (_, id) = ids.iter().find(|(p, _)| *p == want).unwrap();
        assert_eq!(
            c["status"]["taskId"],
            id.as_str(),
            "expected the {want} task"
        );
        assert_eq!(c["status"]["priority"], want);
    }
}

#[tokio::test]
async fn one_claim_work_call_returns_the_highest_priorities_first() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    for p in ["low", "lowest", "medium", "lowest", "highest", "low"] {
        create(&app, &def_with(&tq, json!({ "priority": p }))).await;
    }
    let r = q.claimWork(&tq, &worker("g", "w", 3)).await.unwrap();
    let mut got: Vec<&str> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["priority"].as_str().unwrap())
        .collect();
    got.sort_by_key(|p| ORDER.iter().position(|o| o == p));
    assert_eq!(got, ["highest", "medium", "low"]);
}

#[tokio::test]
async fn change_task_priority_reorders_pending_work() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &def_with(&tq, json!({"priority": "lowest"}))).await;
    let b = create(&app, &def_with(&tq, json!({"priority": "medium"}))).await;
    let r = q
        .changeTaskPriority(&a, &json!({"newPriority": "highest"}))
        .await
        .unwrap();
    assert_eq!(r["status"]["priority"], "highest");
    assert_eq!(r["status"]["state"], "pending");
    assert_eq!(status(&app, &a).await["priority"], "highest");
    assert_eq!(q.task(&a).await.unwrap()["priority"], "highest");
    let ev = wait_events(&app, &a, "task-priority-changed", None, 1).await;
    assert_eq!(ev[0].payload["oldPriority"], "lowest");
    assert_eq!(ev[0].payload["newPriority"], "highest");

    let first = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(first["status"]["taskId"], a.as_str());
    assert_eq!(first["task"]["priority"], "highest");
    let second = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(second["status"]["taskId"], b.as_str());
}

#[tokio::test]
async fn change_task_priority_of_a_running_task_works() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    let r = q
        .changeTaskPriority(&id, &json!({"newPriority": "low"}))
        .await
        .unwrap();
    assert_eq!(r["status"]["priority"], "low");
    assert_eq!(r["status"]["state"], "running");
}

#[tokio::test]
async fn change_task_priority_conflicts_on_resolved_tasks_and_same_priority() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"priority": "medium"}))).await;
    let same = raw(
        &app,
        "POST",
        &format!("/task/{id}/priority"),
        Some(&json!({"newPriority": "medium"})),
    )
    .await;
    assert_error(&same, 409, "RequestConflict");
    claim_one(&app, &tq, "g", "w").await;
    complete(&app, &id, 0).await;
    let resolved = raw(
        &app,
        "POST",
        &format!("/task/{id}/priority"),
        Some(&json!({"newPriority": "high"})),
    )
    .await;
    assert_error(&resolved, 409, "RequestConflict");
    assert_eq!(status(&app, &id).await["priority"], "medium");
    let missing = q
        .changeTaskPriority(&slugid(), &json!({"newPriority": "high"}))
        .await;
    assert_eq!(err_status(missing), 404);
}

#[tokio::test]
async fn normal_priority_is_rejected() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{id}"),
        Some(&def_with(&tq, json!({"priority": "normal"}))),
    )
    .await;
    let msg = assert_error(&got, 400, "InputValidationError");
    assert!(msg.contains("priority"), "{msg}");
    assert_eq!(
        err_status(app.queue().status(&id).await),
        404,
        "not created"
    );

    let pending = create(&app, &task_def(&tq)).await;
    for bad in [json!("normal"), json!("urgent"), json!(3), json!(null)] {
        let got = raw(
            &app,
            "POST",
            &format!("/task/{pending}/priority"),
            Some(&json!({ "newPriority": bad })),
        )
        .await;
        let msg = assert_error(&got, 400, "InputValidationError");
        assert!(msg.contains("newPriority"), "{msg}");
    }
    let got = raw(
        &app,
        "POST",
        &format!("/task/{pending}/priority"),
        Some(&json!({})),
    )
    .await;
    assert_error(&got, 400, "InputValidationError");
    assert_eq!(status(&app, &pending).await["priority"], "lowest");
}

#[tokio::test]
async fn a_priority_change_is_kept_by_a_rerun() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    q.changeTaskPriority(&id, &json!({"newPriority": "very-high"}))
        .await
        .unwrap();
    claim_one(&app, &tq, "g", "w").await;
    complete(&app, &id, 0).await;
    create(&app, &def_with(&tq, json!({"priority": "high"}))).await;
    let r = q.rerunTask(&id).await.unwrap();
    assert_eq!(r["status"]["priority"], "very-high");
    // The rerun run outranks the newer high task.
    let c = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(c["status"]["taskId"], id.as_str());
    assert_eq!(c["runId"], 1);
}

#[tokio::test]
async fn equal_priorities_are_claimed_oldest_first() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let mut ids = vec![];
    for _ in 0..6 {
        ids.push(create(&app, &task_def(&tq)).await);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for id in &ids {
        let c = claim_one(&app, &tq, "g", "w").await;
        assert_eq!(
            c["status"]["taskId"],
            id.as_str(),
            "claims follow insertion order"
        );
    }
}
