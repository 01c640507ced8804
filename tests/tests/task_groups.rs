//! Task groups: getTaskGroup, listTaskGroup (stable pagination), schedulerId consistency.
mod common;

use blackbox::*;
use common::*;
use serde_json::{json, Value};
use std::collections::HashSet;

fn in_group(tq: &str, group: &str) -> Value {
    def_with(tq, json!({ "taskGroupId": group }))
}

/// Every taskId of a group, page by page.
async fn members(app: &TestServer, group: &str, limit: Option<&str>) -> Vec<String> {
    let q = app.queue();
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let r = q
            .listTaskGroup(group, token.as_deref(), limit)
            .await
            .unwrap();
        shared::schema::check("list-task-group-response", &r).unwrap();
        assert_eq!(r["taskGroupId"], group);
        for t in r["tasks"].as_array().unwrap() {
            assert_eq!(t["task"]["taskGroupId"], group);
            out.push(t["status"]["taskId"].as_str().unwrap().to_string());
        }
        match r["continuationToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => return out,
        }
    }
}

#[tokio::test]
async fn get_task_group_describes_the_group() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let id = create(&app, &in_group(&tq, &group)).await;
    let g = q.getTaskGroup(&group).await.unwrap();
    shared::schema::check("task-group-response", &g).unwrap();
    assert_eq!(g["taskGroupId"], group.as_str());
    assert_eq!(g["schedulerId"], "-");
    assert!(g.get("sealed").is_none(), "not sealed: {g}");
    let task_expires = q.task(&id).await.unwrap()["expires"].clone();
    let (ge, te) = (
        g["expires"].as_str().unwrap(),
        task_expires.as_str().unwrap(),
    );
    assert!(ge >= te, "the group outlives its tasks: {ge} < {te}");

    assert_eq!(err_status(q.getTaskGroup(&slugid()).await), 404);
    assert_eq!(
        err_status(q.listTaskGroup(&slugid(), None, None).await),
        404
    );
    let anon = app.queue_as(None);
    assert_eq!(err_status(anon.getTaskGroup(&group).await), 403);
    assert_eq!(
        err_status(anon.listTaskGroup(&group, None, None).await),
        403
    );
}

#[tokio::test]
async fn list_task_group_returns_every_member_once_across_pages() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let a = create(&app, &in_group(&tq, &group)).await;
    let b = create(&app, &in_group(&tq, &group)).await;
    let r = q.listTaskGroup(&group, None, None).await.unwrap();
    assert!(r.get("continuationToken").is_none());
    let mut all: Vec<String> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["taskId"].as_str().unwrap().to_string())
        .collect();
    all.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(all, want);

    let first = q.listTaskGroup(&group, None, Some("1")).await.unwrap();
    assert_eq!(first["tasks"].as_array().unwrap().len(), 1);
    let token = first["continuationToken"].as_str().unwrap().to_string();
    let second = q
        .listTaskGroup(&group, Some(&token), Some("1"))
        .await
        .unwrap();
    assert_eq!(second["tasks"].as_array().unwrap().len(), 1);
    assert_ne!(
        first["tasks"][0]["status"]["taskId"],
        second["tasks"][0]["status"]["taskId"]
    );
}

#[tokio::test]
async fn paging_while_tasks_are_added_never_repeats_or_skips_an_existing_task() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let mut before = HashSet::new();
    for _ in 0..30 {
        before.insert(create(&app, &in_group(&tq, &group)).await);
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let r = q
            .listTaskGroup(&group, token.as_deref(), Some("7"))
            .await
            .unwrap();
        for t in r["tasks"].as_array().unwrap() {
            seen.push(t["status"]["taskId"].as_str().unwrap().to_string());
        }
        // More tasks join between pages.
        for _ in 0..3 {
            create(&app, &in_group(&tq, &group)).await;
        }
        match r["continuationToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no task listed twice");
    for id in &before {
        assert!(seen.contains(id), "{id} existed before paging began");
    }
    assert!(members(&app, &group, None).await.len() >= 30 + 3);
}

#[tokio::test]
async fn a_group_keeps_its_scheduler_id() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    create(&app, &in_group(&tq, &group)).await;
    let other = def_with(&tq, json!({ "taskGroupId": group, "schedulerId": "other" }));
    assert_eq!(err_status(q.createTask(&slugid(), &other).await), 409);
    assert_eq!(members(&app, &group, None).await.len(), 1);
}
