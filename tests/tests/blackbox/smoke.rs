//! A first life cycle through the official client.
use blackbox::*;

#[tokio::test]
async fn a_task_goes_from_pending_to_completed() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let created = q.createTask(&id, &task_def(&tq)).await.unwrap();
    assert_eq!(created["status"]["state"], "pending");
    let claim = q
        .claimWork(
            &tq,
            &serde_json::json!({"workerGroup": "g", "workerId": "w", "tasks": 1}),
        )
        .await
        .unwrap();
    assert_eq!(claim["tasks"][0]["status"]["taskId"], id.as_str());
    let done = q.reportCompleted(&id, "0").await.unwrap();
    assert_eq!(done["status"]["state"], "completed");
}
