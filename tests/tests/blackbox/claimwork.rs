//! claimWork's long poll: an empty queue answers `{tasks: []}` after the configured wait;
//! work that appears while a worker waits is handed out at once.

use crate::common::*;
use blackbox::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn an_empty_queue_answers_empty_after_the_timeout() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 1_500).await;
    let q = app.queue();
    let tq = task_queue_id();
    let start = Instant::now();
    let r = q.claimWork(&tq, &worker("g", "w", 4)).await.unwrap();
    let took = start.elapsed();
    assert_eq!(r, json!({"tasks": []}));
    assert!(
        took >= Duration::from_millis(1_400),
        "returned early: {took:?}"
    );
    assert!(took < Duration::from_secs(30), "waited too long: {took:?}");
}

#[tokio::test]
async fn a_task_created_while_waiting_is_returned_promptly() {
    // A long poll far longer than any load can delay a wake-up: returning well before it
    // ends shows the waiter was woken, not timed out.
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 60_000).await;
    let tq = task_queue_id();
    let waiting = {
        let q = app.queue();
        let tq = tq.clone();
        tokio::spawn(async move {
            let r = q.claimWork(&tq, &worker("g", "w", 1)).await;
            (r, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "claimWork should still be waiting");
    let id = create(&app, &task_def(&tq)).await;
    let created_at = Instant::now();
    let (r, done_at) = waiting.await.unwrap();
    let r = r.unwrap();
    let latency = done_at.saturating_duration_since(created_at);
    assert!(
        latency < Duration::from_secs(30),
        "took {latency:?} after creation: woken by the poll's end, not by the task"
    );
    assert_eq!(r["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(r["tasks"][0]["status"]["taskId"], id.as_str());
}

#[tokio::test]
async fn work_from_schedule_task_and_retries_wakes_waiting_workers() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 60_000).await;
    let q = app.queue();
    let tq = task_queue_id();
    // An unscheduled task, scheduled while a worker waits.
    let defined = slugid();
    q.createTask(&defined, &def_with(&tq, json!({"dependencies": [defined]})))
        .await
        .unwrap();
    // A claimed task that will be retried while a worker waits.
    let retried = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;

    let triggers = [
        ("scheduleTask", defined.clone()),
        ("worker-shutdown retry", retried.clone()),
    ];
    for (what, id) in triggers {
        let waiting = {
            let q = app.queue();
            let tq = tq.clone();
            tokio::spawn(async move { q.claimWork(&tq, &worker("g", "w2", 1)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "{what}: nothing to claim yet");
        let start = Instant::now();
        if what == "scheduleTask" {
            q.scheduleTask(&id).await.unwrap();
        } else {
            q.reportException(&id, "0", &json!({"reason": "worker-shutdown"}))
                .await
                .unwrap();
        }
        let r = waiting.await.unwrap().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: woken by the poll's end, not by the work"
        );
        assert_eq!(r["tasks"][0]["status"]["taskId"], id.as_str(), "{what}");
    }
}

#[tokio::test]
async fn one_task_goes_to_exactly_one_of_several_waiting_workers() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 2_500).await;
    let tq = task_queue_id();
    let waiters: Vec<_> = (0..5)
        .map(|i| {
            let q = app.queue();
            let tq = tq.clone();
            tokio::spawn(async move { q.claimWork(&tq, &worker("g", &format!("w{i}"), 1)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = create(&app, &task_def(&tq)).await;
    let mut got = 0;
    for w in waiters {
        let r = w.await.unwrap().unwrap();
        for t in r["tasks"].as_array().unwrap() {
            assert_eq!(t["status"]["taskId"], id.as_str());
            got += 1;
        }
    }
    assert_eq!(got, 1, "claimed exactly once");
}

#[tokio::test]
async fn claim_work_returns_up_to_the_requested_number() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 60_000).await;
    let q = app.queue();
    let tq = task_queue_id();
    for _ in 0..5 {
        create(&app, &task_def(&tq)).await;
    }
    let start = Instant::now();
    let r = q.claimWork(&tq, &worker("g", "w", 3)).await.unwrap();
    assert_eq!(r["tasks"].as_array().unwrap().len(), 3);
    // Fewer available than asked: returns what there is, without waiting.
    let r = q.claimWork(&tq, &worker("g", "w", 32)).await.unwrap();
    assert_eq!(r["tasks"].as_array().unwrap().len(), 2);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "no long poll (60 s here) when work exists"
    );
    for t in r["tasks"].as_array().unwrap() {
        assert_eq!(t["workerGroup"], "g");
        assert_eq!(t["workerId"], "w");
        assert!(t["credentials"]["accessToken"].is_string());
    }
    shared::schema::check("claim-work-response", &r).unwrap();
    // `tasks` defaults to 1.
    create(&app, &task_def(&tq)).await;
    create(&app, &task_def(&tq)).await;
    let r = q
        .claimWork(&tq, &json!({"workerGroup": "g", "workerId": "w"}))
        .await
        .unwrap();
    assert_eq!(r["tasks"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn claim_work_only_sees_its_own_task_queue() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 500).await;
    let q = app.queue();
    let tq = task_queue_id();
    let other = task_queue_id();
    create(&app, &task_def(&other)).await;
    let r = q.claimWork(&tq, &worker("g", "w", 1)).await.unwrap();
    assert_eq!(r["tasks"], json!([]));
    let r = q.claimWork(&other, &worker("g", "w", 1)).await.unwrap();
    assert_eq!(r["tasks"].as_array().unwrap().len(), 1);
}
