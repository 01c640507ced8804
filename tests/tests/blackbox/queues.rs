//! Queue inspection: pendingTasks, taskQueueCounts, listPendingTasks, listClaimedTasks —
//! counts, pagination, and task queue ids with `/` raw or percent-encoded.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::collections::HashSet;

async fn counts(app: &TestServer, tq: &str) -> (u64, u64) {
    settle_indexes().await;
    let c = app.queue().taskQueueCounts(tq).await.unwrap();
    assert_eq!(c["taskQueueId"], tq);
    (
        c["pendingTasks"].as_u64().unwrap(),
        c["claimedTasks"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn counts_follow_creation_claims_and_resolution() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = tq.split_once('/').unwrap();
    let empty = q.pendingTasks(&tq).await.unwrap();
    assert_eq!(
        empty,
        json!({"provisionerId": prov, "workerType": wt, "taskQueueId": tq, "pendingTasks": 0})
    );
    let c = q.taskQueueCounts(&tq).await.unwrap();
    assert_eq!(c["provisionerId"], prov);
    assert_eq!(c["workerType"], wt);
    assert_eq!(counts(&app, &tq).await, (0, 0));

    let def = task_def(&tq);
    let first = slugid();
    q.createTask(&first, &def).await.unwrap();
    create(&app, &task_def(&tq)).await;
    create(&app, &task_def(&tq)).await;
    assert_eq!(counts(&app, &tq).await, (3, 0));
    // Re-creating an existing task does not count it twice.
    q.createTask(&first, &def).await.unwrap();
    settle_indexes().await;
    assert_eq!(q.pendingTasks(&tq).await.unwrap()["pendingTasks"], 3);

    let c1 = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(counts(&app, &tq).await, (2, 1));
    let more = q.claimWork(&tq, &worker("g", "w", 5)).await.unwrap();
    assert_eq!(more["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(counts(&app, &tq).await, (0, 3));
    complete(&app, c1["status"]["taskId"].as_str().unwrap(), 0).await;
    assert_eq!(counts(&app, &tq).await, (0, 2));
    // Unscheduled tasks are not pending.
    let id = slugid();
    q.createTask(&id, &def_with(&tq, json!({"dependencies": [id]})))
        .await
        .unwrap();
    assert_eq!(counts(&app, &tq).await, (0, 2));
    // Other queues are separate.
    assert_eq!(counts(&app, &task_queue_id()).await, (0, 0));
}

#[tokio::test]
async fn list_pending_tasks_pages_in_insertion_order() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let empty = q.listPendingTasks(&tq, None, None).await.unwrap();
    assert_eq!(empty["tasks"], json!([]));
    assert!(empty.get("continuationToken").is_none());

    let mut ids = vec![];
    for _ in 0..10 {
        ids.push(create(&app, &task_def(&tq)).await);
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    settle_indexes().await;
    let p1 = q.listPendingTasks(&tq, None, Some("6")).await.unwrap();
    let items1 = p1["tasks"].as_array().unwrap();
    assert_eq!(items1.len(), 6);
    let token = p1["continuationToken"].as_str().expect("a token for more");
    let p2 = q
        .listPendingTasks(&tq, Some(token), Some("6"))
        .await
        .unwrap();
    let items2 = p2["tasks"].as_array().unwrap();
    assert_eq!(items2.len(), 4);
    assert!(p2.get("continuationToken").is_none(), "{p2:#}");
    let listed: Vec<&str> = items1
        .iter()
        .chain(items2)
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let mut last = String::new();
    for item in items1.iter().chain(items2) {
        assert_eq!(item["runId"], 0);
        let inserted = item["inserted"].as_str().unwrap().to_string();
        assert!(inserted >= last, "oldest first");
        last = inserted;
        let tid = item["taskId"].as_str().unwrap();
        assert_eq!(item["task"], q.task(tid).await.unwrap());
    }
    assert_dates(&p1);
    shared::schema::check("list-pending-tasks-response", &p1).unwrap();
    // Without a limit everything comes in one page.
    settle_indexes().await;
    let all = q.listPendingTasks(&tq, None, None).await.unwrap();
    assert_eq!(all["tasks"].as_array().unwrap().len(), 10);
    // Claimed tasks leave the pending list.
    claim_one(&app, &tq, "g", "w").await;
    settle_indexes().await;
    let after = q.listPendingTasks(&tq, None, None).await.unwrap();
    assert_eq!(after["tasks"].as_array().unwrap().len(), 9);
}

#[tokio::test]
async fn list_claimed_tasks_pages_and_describes_the_claim() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    assert_eq!(
        q.listClaimedTasks(&tq, None, None).await.unwrap()["tasks"],
        json!([])
    );
    let mut ids = HashSet::new();
    for _ in 0..5 {
        ids.insert(create(&app, &task_def(&tq)).await);
    }
    settle_indexes().await;
    let claimed = q.claimWork(&tq, &worker("grp", "wkr", 5)).await.unwrap();
    assert_eq!(claimed["tasks"].as_array().unwrap().len(), 5);

    settle_indexes().await;
    let mut seen = HashSet::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = q
            .listClaimedTasks(&tq, token.as_deref(), Some("2"))
            .await
            .unwrap();
        pages += 1;
        shared::schema::check("list-claimed-tasks-response", &page).unwrap();
        assert_dates(&page);
        for item in page["tasks"].as_array().unwrap() {
            assert_eq!(item["runId"], 0);
            assert_eq!(item["workerGroup"], "grp");
            assert_eq!(item["workerId"], "wkr");
            assert!(item["claimed"].is_string());
            let tid = item["taskId"].as_str().unwrap().to_string();
            assert_eq!(item["task"]["taskQueueId"], tq.as_str());
            assert!(seen.insert(tid), "listed twice");
        }
        token = page["continuationToken"].as_str().map(String::from);
        if token.is_none() {
            break;
        }
        assert!(pages < 10);
    }
    assert_eq!(pages, 3, "5 items in pages of 2");
    assert_eq!(seen, ids);
    // Resolved tasks leave the claimed list.
    let one = ids.iter().next().unwrap();
    complete(&app, one, 0).await;
    settle_indexes().await;
    let after = q.listClaimedTasks(&tq, None, None).await.unwrap();
    assert_eq!(after["tasks"].as_array().unwrap().len(), 4);
}

/// GET a path both with the `/` of the task queue id raw and as `%2F` (either case).
async fn both_encodings(app: &TestServer, tq: &str, tail: &str) -> Vec<Value> {
    let mut out = vec![];
    let mut encodings = vec![tq.to_string(), tq.replace('/', "%2F")];
    // As deployed the gateway hands the path on decoded, and it is signed again as the
    // official clients encode it (`%2F`): only that spelling authenticates there
    // (docs/differences.md).
    if !in_shape() {
        encodings.push(tq.replace('/', "%2f"));
    }
    for enc in encodings {
        let (code, body) = raw(app, "GET", &tail.replace("{tq}", &enc), None).await;
        assert_eq!(code, 200, "{tail} with {enc}: {body:#}");
        out.push(body);
    }
    out
}

#[tokio::test]
async fn task_queue_ids_work_raw_and_percent_encoded() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    for _ in 0..3 {
        create(&app, &task_def(&tq)).await;
    }
    settle_indexes().await;
    // claimWork, raw and encoded.
    for enc in [tq.clone(), tq.replace('/', "%2F")] {
        let (code, body) = raw(
            &app,
            "POST",
            &format!("/claim-work/{enc}"),
            Some(&worker("g", "w", 1)),
        )
        .await;
        assert_eq!(code, 200, "{body:#}");
        assert_eq!(body["tasks"].as_array().unwrap().len(), 1);
        assert_eq!(body["tasks"][0]["task"]["taskQueueId"], tq.as_str());
    }
    settle_indexes().await;
    for body in both_encodings(&app, &tq, "/pending/{tq}").await {
        assert_eq!(body["pendingTasks"], 1);
        assert_eq!(body["taskQueueId"], tq.as_str());
    }
    for body in both_encodings(&app, &tq, "/task-queues/{tq}/counts").await {
        assert_eq!(body["pendingTasks"], 1);
        assert_eq!(body["claimedTasks"], 2);
        assert_eq!(body["taskQueueId"], tq.as_str());
    }
    for body in both_encodings(&app, &tq, "/task-queues/{tq}/pending").await {
        assert_eq!(body["tasks"].as_array().unwrap().len(), 1);
    }
    for body in both_encodings(&app, &tq, "/task-queues/{tq}/claimed?limit=1").await {
        assert_eq!(body["tasks"].as_array().unwrap().len(), 1);
        assert!(body["continuationToken"].is_string());
    }
    // The official client percent-encodes: same answers.
    let q = app.queue();
    assert_eq!(q.pendingTasks(&tq).await.unwrap()["pendingTasks"], 1);
    assert_eq!(q.taskQueueCounts(&tq).await.unwrap()["claimedTasks"], 2);
}

#[tokio::test]
async fn a_continuation_token_only_continues_its_own_listing() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    for _ in 0..3 {
        create(&app, &task_def(&tq)).await;
    }
    settle_indexes().await;
    let p1 = q.listPendingTasks(&tq, None, Some("1")).await.unwrap();
    let token = p1["continuationToken"].as_str().unwrap();
    let p2 = q
        .listPendingTasks(&tq, Some(token), Some("1"))
        .await
        .unwrap();
    assert_ne!(p1["tasks"][0]["taskId"], p2["tasks"][0]["taskId"]);
    // The same token is repeatable.
    let p2b = q
        .listPendingTasks(&tq, Some(token), Some("1"))
        .await
        .unwrap();
    assert_eq!(p2["tasks"][0]["taskId"], p2b["tasks"][0]["taskId"]);
}

#[tokio::test]
async fn claimed_tasks_are_listed_in_claim_order() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let mut ids = vec![];
    for _ in 0..4 {
        ids.push(create(&app, &task_def(&tq)).await);
    }
    // Claim in reverse creation order, a few milliseconds apart.
    for (i, id) in ids.iter().rev().enumerate() {
        q.claimTask(id, "0", &claimer("g", &format!("w{i}")))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    settle_indexes().await;
    let listed = q.listClaimedTasks(&tq, None, None).await.unwrap();
    let order: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(order, expected);
}
