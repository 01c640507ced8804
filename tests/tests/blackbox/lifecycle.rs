//! The full life cycle through the official client: create, claim, reclaim, resolve, read back.

use crate::common::*;
use blackbox::*;
use serde_json::json;

#[tokio::test]
async fn create_claim_work_reclaim_and_complete() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let def = task_def(&tq);

    let created = q.createTask(&id, &def).await.unwrap();
    let s = &created["status"];
    assert_eq!(s["taskId"], id.as_str());
    assert_eq!(s["state"], "pending");
    assert_eq!(s["taskQueueId"], tq.as_str());
    assert_eq!(s["provisionerId"], "test-prov");
    assert_eq!(s["workerType"], tq.split('/').nth(1).unwrap());
    assert_eq!(s["retriesLeft"], 5);
    assert_eq!(s["runs"].as_array().unwrap().len(), 1);
    assert_eq!(s["runs"][0]["runId"], 0);
    assert_eq!(s["runs"][0]["state"], "pending");
    assert_eq!(s["runs"][0]["reasonCreated"], "scheduled");
    assert!(
        s["runs"][0].get("workerGroup").is_none(),
        "absent keys are omitted"
    );
    assert!(s["runs"][0].get("started").is_none());
    assert!(assert_dates(&created) >= 3);
    assert_eq!(
        q.status(&id).await.unwrap(),
        created,
        "status() equals the create reply"
    );

    let before = ts(0);
    let claim = claim_one(&app, &tq, "my-group", "my-worker").await;
    assert_eq!(claim["runId"], 0);
    assert_eq!(claim["workerGroup"], "my-group");
    assert_eq!(claim["workerId"], "my-worker");
    let taken_until = claim["takenUntil"].as_str().unwrap().to_string();
    assert!(taken_until >= before, "takenUntil {taken_until} < {before}");
    assert_eq!(claim["status"]["state"], "running");
    assert_eq!(claim["status"]["runs"][0]["state"], "running");
    assert_eq!(claim["status"]["runs"][0]["workerGroup"], "my-group");
    assert_eq!(claim["status"]["runs"][0]["workerId"], "my-worker");
    assert_eq!(
        claim["status"]["runs"][0]["takenUntil"],
        taken_until.as_str()
    );
    assert!(claim["status"]["runs"][0]["started"].is_string());
    assert_eq!(
        claim["task"],
        q.task(&id).await.unwrap(),
        "embedded task = task()"
    );
    assert_eq!(
        claim["status"],
        status(&app, &id).await,
        "embedded status = status()"
    );
    let creds = &claim["credentials"];
    let client_id = creds["clientId"].as_str().unwrap();
    assert!(
        client_id.starts_with(&format!("task-client/{id}/0/on/my-group/my-worker/until/")),
        "{client_id}"
    );
    assert!(creds["accessToken"].as_str().is_some_and(|t| !t.is_empty()));
    let cert: serde_json::Value = serde_json::from_str(
        creds["certificate"]
            .as_str()
            .expect("certificate is a string"),
    )
    .expect("certificate is JSON");
    let scopes: Vec<&str> = cert["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    for want in [
        format!("queue:reclaim-task:{id}/0"),
        format!("queue:resolve-task:{id}/0"),
        format!("queue:create-artifact:{id}/0"),
    ] {
        assert!(
            scopes.contains(&want.as_str()),
            "{want} missing in {scopes:?}"
        );
    }
    assert_dates(&claim);

    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let re = q.reclaimTask(&id, "0").await.unwrap();
    assert_eq!(re["runId"], 0);
    assert_eq!(re["workerGroup"], "my-group");
    assert_eq!(re["workerId"], "my-worker");
    assert!(
        re.get("task").is_none(),
        "reclaim carries no task definition"
    );
    let new_until = re["takenUntil"].as_str().unwrap();
    assert!(
        new_until > taken_until.as_str(),
        "{new_until} <= {taken_until}"
    );
    assert_eq!(re["status"]["runs"][0]["takenUntil"], new_until);
    assert!(re["credentials"]["clientId"].is_string());
    assert_dates(&re);

    let done = q.reportCompleted(&id, "0").await.unwrap();
    let s = &done["status"];
    assert_eq!(s["state"], "completed");
    assert_eq!(s["runs"][0]["state"], "completed");
    assert_eq!(s["runs"][0]["reasonResolved"], "completed");
    assert!(s["runs"][0]["resolved"].is_string());
    assert_eq!(
        s["runs"][0]["takenUntil"], new_until,
        "takenUntil stays after resolution"
    );
    assert_dates(&done);
    assert_eq!(status(&app, &id).await, *s);
    // Nothing is left to claim.
    counts_settle(&app, &tq, Some(0), None).await;
}

#[tokio::test]
async fn claim_task_then_report_failed() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;

    let claim = q
        .claimTask(&id, "0", &json!({"workerGroup": "g1", "workerId": "w1"}))
        .await
        .unwrap();
    assert_eq!(claim["runId"], 0);
    assert_eq!(claim["status"]["state"], "running");
    assert_eq!(claim["workerGroup"], "g1");
    assert_eq!(claim["workerId"], "w1");
    assert_eq!(claim["task"], q.task(&id).await.unwrap());
    assert_eq!(claim["status"], status(&app, &id).await);
    assert_dates(&claim);

    let failed = q.reportFailed(&id, "0").await.unwrap();
    assert_eq!(failed["status"]["state"], "failed");
    assert_eq!(failed["status"]["runs"][0]["reasonResolved"], "failed");
    assert_eq!(
        failed["status"]["runs"].as_array().unwrap().len(),
        1,
        "failures never retry"
    );
}

#[tokio::test]
async fn report_exception_after_claim_work_resolves_the_run() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
    claim_one(&app, &tq, "g", "w").await;
    let r = q
        .reportException(&id, "0", &json!({"reason": "malformed-payload"}))
        .await
        .unwrap();
    assert_eq!(r["status"]["state"], "exception");
    assert_eq!(
        r["status"]["runs"][0]["reasonResolved"],
        "malformed-payload"
    );
}

#[tokio::test]
async fn task_returns_the_definition_with_defaults_filled() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = tq.split_once('/').unwrap();
    // Only the legacy pair, no taskQueueId.
    let mut def = task_def(&tq);
    def.as_object_mut().unwrap().remove("taskQueueId");
    def["provisionerId"] = json!(prov);
    def["workerType"] = json!(wt);
    let id = create(&app, &def).await;

    let t = q.task(&id).await.unwrap();
    assert_eq!(t["taskQueueId"], tq.as_str());
    assert_eq!(t["provisionerId"], prov);
    assert_eq!(t["workerType"], wt);
    assert_eq!(t["schedulerId"], "-");
    assert_eq!(t["projectId"], "none");
    assert_eq!(t["taskGroupId"], id.as_str());
    assert_eq!(t["priority"], "lowest");
    assert_eq!(t["retries"], 5);
    assert_eq!(t["requires"], "all-completed");
    assert_eq!(t["dependencies"], json!([]));
    assert_eq!(t["routes"], json!([]));
    assert_eq!(t["scopes"], json!([]));
    assert_eq!(t["tags"], json!({}));
    assert_eq!(t["extra"], json!({}));
    assert_eq!(t["payload"], json!({}));
    assert_eq!(t["metadata"], def["metadata"]);
    assert_eq!(t["created"], def["created"]);
    assert_eq!(t["deadline"], def["deadline"]);
    let (deadline, expires) = (
        t["deadline"].as_str().unwrap(),
        t["expires"].as_str().unwrap(),
    );
    // Upstream: `expires.setFullYear(expires.getFullYear() + 1)` on the deadline.
    let year: i32 = deadline[..4].parse().unwrap();
    let same_day_next_year = if &deadline[5..10] == "02-29" {
        format!("{}-03-01{}", year + 1, &deadline[10..])
    } else {
        format!("{}{}", year + 1, &deadline[4..])
    };
    assert_eq!(
        expires, same_day_next_year,
        "default expires = deadline + 1 year"
    );
    assert!(assert_dates(&t) >= 3);
    shared::schema::check("task", &t).unwrap();

    let s = status(&app, &id).await;
    assert_eq!(s["taskQueueId"], tq.as_str());
    assert_eq!(s["provisionerId"], prov);
    assert_eq!(s["workerType"], wt);
    assert_eq!(s["schedulerId"], "-");
    assert_eq!(s["projectId"], "none");
    assert_eq!(s["taskGroupId"], id.as_str());
    assert_eq!(s["priority"], "lowest");
    assert_eq!(s["expires"], t["expires"]);
}

#[tokio::test]
async fn task_queue_id_alone_or_with_a_matching_pair_gives_all_three_fields() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = tq.split_once('/').unwrap();
    let a = create(&app, &task_def(&tq)).await;
    let b = create(
        &app,
        &def_with(&tq, json!({"provisionerId": prov, "workerType": wt})),
    )
    .await;
    for id in [a, b] {
        let t = q.task(&id).await.unwrap();
        assert_eq!(t["taskQueueId"], tq.as_str());
        assert_eq!(t["provisionerId"], prov);
        assert_eq!(t["workerType"], wt);
    }
}

#[tokio::test]
async fn explicit_fields_are_stored_as_given() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let def = def_with(
        &tq,
        json!({
            "schedulerId": "my-scheduler",
            "projectId": "my/project.x",
            "taskGroupId": group,
            "priority": "very-high",
            "retries": 2,
            "routes": ["index.some.very.long.dotted.route.that.goes.on.and.on.for.a.while.0123456789.abcdefghij"],
            "scopes": ["secrets:get:foo"],
            "tags": {"kind": "test", "empty": ""},
            "extra": {"nested": {"a": [1, 2, 3]}},
            "payload": {"command": ["echo", "hi"], "maxRunTime": 600},
            "expires": ts(10 * 86_400_000),
            "metadata": {"name": "n", "description": "d", "owner": "someone", "source": "ssh://git@example.com/repo"}
        }),
    );
    let id = create(&app, &def).await;
    let t = q.task(&id).await.unwrap();
    for k in [
        "schedulerId",
        "projectId",
        "taskGroupId",
        "priority",
        "retries",
        "routes",
        "scopes",
        "tags",
        "extra",
        "payload",
        "expires",
        "metadata",
    ] {
        assert_eq!(t[k], def[k], "field {k}");
    }
    let s = status(&app, &id).await;
    assert_eq!(s["retriesLeft"], 2);
    assert_eq!(s["priority"], "very-high");
    assert_eq!(s["schedulerId"], "my-scheduler");
    assert_eq!(s["projectId"], "my/project.x");
    assert_eq!(s["taskGroupId"], group.as_str());
}

#[tokio::test]
async fn metadata_source_may_be_a_git_at_address() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let def = def_with(
        &tq,
        json!({"metadata": {"name": "n", "description": "d", "owner": "o", "source": "git@github.com:org/repo.git"}}),
    );
    create(&app, &def).await;
}

#[tokio::test]
async fn tasks_and_statuses_batches_skip_unknown_ids_and_paginate() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let b = create(&app, &task_def(&tq)).await;
    let c = create(&app, &task_def(&tq)).await;
    let unknown = slugid();
    let body = json!({"taskIds": [a, unknown, b, c]});

    let all = q.tasks(&body, None, None).await.unwrap();
    let items = all["tasks"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{all:#}");
    assert!(all.get("continuationToken").is_none());
    for (item, id) in items.iter().zip([&a, &b, &c]) {
        assert_eq!(item["taskId"], id.as_str());
        assert_eq!(item["task"], q.task(id).await.unwrap());
    }

    let st = q.statuses(&body, None, None).await.unwrap();
    let items = st["statuses"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for (item, id) in items.iter().zip([&a, &b, &c]) {
        assert_eq!(item["taskId"], id.as_str());
        assert_eq!(item["status"], status(&app, id).await);
    }

    // Paging through with limit 1 visits every known id exactly once.
    for statuses in [false, true] {
        let mut seen = vec![];
        let mut token: Option<String> = None;
        for _ in 0..10 {
            let page = if statuses {
                q.statuses(&body, token.as_deref(), Some("1"))
                    .await
                    .unwrap()
            } else {
                q.tasks(&body, token.as_deref(), Some("1")).await.unwrap()
            };
            let key = if statuses { "statuses" } else { "tasks" };
            for item in page[key].as_array().unwrap() {
                seen.push(item["taskId"].as_str().unwrap().to_string());
            }
            token = page["continuationToken"].as_str().map(String::from);
            if token.is_none() {
                break;
            }
        }
        assert!(token.is_none(), "pagination did not end");
        assert_eq!(seen, vec![a.clone(), b.clone(), c.clone()]);
    }

    // Only unknown ids: empty, not an error.
    let none = q
        .statuses(&json!({"taskIds": [slugid()]}), None, None)
        .await
        .unwrap();
    assert_eq!(none["statuses"], json!([]));
}

#[tokio::test]
async fn ping_answers() {
    let app = spawn_app().await;
    let (code, body) = raw(&app, "GET", "/ping", None).await;
    assert_eq!(code, 200);
    assert_eq!(body["alive"], true);
    app.queue().ping().await.unwrap();
}
