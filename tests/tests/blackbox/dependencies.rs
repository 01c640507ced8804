//! Task dependencies: waiting, `requires`, self-dependency, validation, listDependentTasks,
//! fan-out and fan-in.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Generous: on LocalStack a thousand tasks take a while.
const WAIT: Duration = Duration::from_secs(120);

fn depends_on(tq: &str, deps: &[&str]) -> Value {
    def_with(tq, json!({ "dependencies": deps }))
}

async fn claim_and_complete(app: &TestServer, tq: &str, id: &str) {
    let claim = claim_one(app, tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id);
    complete(app, id, 0).await;
}

async fn claim_and_fail(app: &TestServer, tq: &str, id: &str) {
    let claim = claim_one(app, tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id);
    app.queue().reportFailed(id, "0").await.unwrap();
}

async fn wait_pending(app: &TestServer, id: &str) -> Value {
    wait_status(app, id, WAIT, |s| s["state"] == "pending").await
}

/// Every dependent taskId listed by listDependentTasks, page by page with `limit`.
async fn dependents(app: &TestServer, id: &str, limit: Option<&str>) -> Vec<String> {
    let q = app.queue();
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let r = q
            .listDependentTasks(id, token.as_deref(), limit)
            .await
            .unwrap();
        shared::schema::check("list-dependent-tasks-response", &r).unwrap();
        assert_eq!(r["taskId"], id);
        for t in r["tasks"].as_array().unwrap() {
            assert!(t["task"]["dependencies"]
                .as_array()
                .unwrap()
                .contains(&json!(id)));
            out.push(t["status"]["taskId"].as_str().unwrap().to_string());
        }
        match r["continuationToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => return out,
        }
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn a_dependent_waits_for_its_dependency_to_complete() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let b = slugid();
    let r = q.createTask(&b, &depends_on(&tq, &[&a])).await.unwrap();
    assert_eq!(r["status"]["state"], "unscheduled");
    assert_eq!(status(&app, &a).await["state"], "pending");
    wait_events(&app, &b, "task-defined", None, 1).await;
    assert_eq!(names_of(&app, &b), ["task-defined"]);

    assert_eq!(dependents(&app, &a, None).await, std::slice::from_ref(&b));
    assert!(dependents(&app, &b, None).await.is_empty());
    let anon = app.queue_as(None);
    assert_eq!(
        err_status(anon.listDependentTasks(&a, None, None).await),
        403
    );
    assert_eq!(
        err_status(q.listDependentTasks(&slugid(), None, None).await),
        404
    );

    // Only `a` is claimable; completing it makes `b` pending, with its event.
    claim_and_complete(&app, &tq, &a).await;
    let s = wait_pending(&app, &b).await;
    assert_eq!(s["runs"][0]["reasonCreated"], "scheduled");
    wait_events(&app, &b, "task-pending", Some(0), 1).await;
    claim_and_complete(&app, &tq, &b).await;
    assert_eq!(dependents(&app, &a, None).await, [b]);
}

#[tokio::test]
async fn a_completed_dependency_is_met_at_creation() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    claim_and_complete(&app, &tq, &a).await;
    let b = slugid();
    let r = app
        .queue()
        .createTask(&b, &depends_on(&tq, &[&a]))
        .await
        .unwrap();
    assert_eq!(r["status"]["state"], "pending");
    assert_eq!(dependents(&app, &a, None).await, [b]);
}

#[tokio::test]
async fn four_dependents_page_through_and_all_become_pending() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(create(&app, &depends_on(&tq, &[&a])).await);
    }
    let r = app
        .queue()
        .listDependentTasks(&a, None, Some("2"))
        .await
        .unwrap();
    assert_eq!(r["tasks"].as_array().unwrap().len(), 2);
    assert!(r["continuationToken"].is_string());
    let paged = dependents(&app, &a, Some("2")).await;
    assert_eq!(paged.len(), 4, "no duplicates, nothing skipped");
    assert_eq!(sorted(paged), sorted(ids.clone()));

    claim_and_complete(&app, &tq, &a).await;
    for id in &ids {
        wait_pending(&app, id).await;
    }
}

#[tokio::test]
async fn each_dependent_waits_for_all_of_its_dependencies() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let b = create(&app, &task_def(&tq)).await;
    let c = create(&app, &depends_on(&tq, &[&a, &b])).await;
    let d = create(&app, &depends_on(&tq, &[&a])).await;
    // Claim `a` specifically (both a and b are pending).
    app.queue()
        .claimTask(&a, "0", &claimer("g", "w"))
        .await
        .unwrap();
    complete(&app, &a, 0).await;
    wait_pending(&app, &d).await;
    assert_eq!(status(&app, &c).await["state"], "unscheduled");
    app.queue()
        .claimTask(&b, "0", &claimer("g", "w"))
        .await
        .unwrap();
    complete(&app, &b, 0).await;
    wait_pending(&app, &c).await;
}

#[tokio::test]
async fn a_self_dependency_waits_for_schedule_task_even_when_the_others_are_met() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let b = slugid();
    q.createTask(&b, &depends_on(&tq, &[&a, &b])).await.unwrap();
    // A witness that depends on `a` alone shows when a's dependents have been handled.
    let witness = create(&app, &depends_on(&tq, &[&a])).await;
    assert!(dependents(&app, &b, None).await.contains(&b));
    claim_and_complete(&app, &tq, &a).await;
    wait_pending(&app, &witness).await;
    assert_eq!(status(&app, &b).await["state"], "unscheduled");
    assert!(!names_of(&app, &b).contains(&"task-pending".to_string()));
    let s = q.scheduleTask(&b).await.unwrap();
    assert_eq!(s["status"]["state"], "pending");
}

#[tokio::test]
async fn requires_all_resolved_accepts_failure_and_all_completed_does_not() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let strict = create(&app, &depends_on(&tq, &[&a])).await;
    let lenient = create(
        &app,
        &def_with(
            &tq,
            json!({ "dependencies": [a], "requires": "all-resolved" }),
        ),
    )
    .await;
    claim_and_fail(&app, &tq, &a).await;
    wait_pending(&app, &lenient).await;
    assert_eq!(status(&app, &strict).await["state"], "unscheduled");

    // A cancelled dependency is resolved too, but not completed.
    let c = create(&app, &task_def(&tq)).await;
    let strict = create(&app, &depends_on(&tq, &[&c])).await;
    let lenient = create(
        &app,
        &def_with(
            &tq,
            json!({ "dependencies": [c], "requires": "all-resolved" }),
        ),
    )
    .await;
    app.queue().cancelTask(&c).await.unwrap();
    wait_pending(&app, &lenient).await;
    assert_eq!(status(&app, &strict).await["state"], "unscheduled");
}

#[tokio::test]
async fn a_rerun_dependency_that_completes_later_releases_its_dependents() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let b = create(&app, &depends_on(&tq, &[&a])).await;
    claim_and_fail(&app, &tq, &a).await;
    app.queue().rerunTask(&a).await.unwrap();
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], a.as_str());
    complete(&app, &a, 1).await;
    wait_pending(&app, &b).await;
}

#[tokio::test]
async fn bad_dependencies_are_refused_and_nothing_is_left_behind() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;

    // A missing dependency.
    let x = slugid();
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{x}"),
        Some(&depends_on(&tq, &[&a, &slugid()])),
    )
    .await;
    assert_error(&got, 400, "InputError");
    assert_eq!(err_status(q.status(&x).await), 404);
    assert_eq!(err_status(q.task(&x).await), 404);
    assert!(dependents(&app, &a, None).await.is_empty());

    // The same dependency twice.
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{x}"),
        Some(&depends_on(&tq, &[&a, &a])),
    )
    .await;
    assert_eq!(got.0, 400, "{:#}", got.1);
    assert_eq!(err_status(q.status(&x).await), 404);

    // More than 10,000.
    let many: Vec<String> = (0..10_001).map(|_| slugid()).collect();
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{x}"),
        Some(&def_with(&tq, json!({ "dependencies": many }))),
    )
    .await;
    assert_eq!(got.0, 400, "{:#}", got.1);
    assert_eq!(err_status(q.status(&x).await), 404);

    // A dependency that expires before this task's deadline.
    let short = create(
        &app,
        &def_with(
            &tq,
            json!({ "deadline": ts(600_000), "expires": ts(600_000) }),
        ),
    )
    .await;
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{x}"),
        Some(&depends_on(&tq, &[&short])),
    )
    .await;
    assert_error(&got, 400, "InputError");
    assert_eq!(err_status(q.status(&x).await), 404);
    assert!(dependents(&app, &a, None).await.is_empty());
    assert!(dependents(&app, &short, None).await.is_empty());
}

#[tokio::test]
async fn creating_a_dependent_twice_is_idempotent() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let b = slugid();
    let def = depends_on(&tq, &[&a]);
    q.createTask(&b, &def).await.unwrap();
    let again = q.createTask(&b, &def).await.unwrap();
    assert_eq!(again["status"]["state"], "unscheduled");
    assert_eq!(dependents(&app, &a, None).await, std::slice::from_ref(&b));
    claim_and_complete(&app, &tq, &a).await;
    let s = wait_pending(&app, &b).await;
    assert_eq!(s["runs"].as_array().unwrap().len(), 1, "one first run only");
}

/// Runs `f` over `items` with at most `n` calls in flight.
async fn bounded<T, F, Fut>(items: Vec<T>, n: usize, f: F)
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use futures_util::stream::StreamExt;
    futures_util::stream::iter(items)
        .for_each_concurrent(n, f)
        .await;
}

/// Calls these tests make at once: 16, and 4 in the deployed shape, where LocalStack's
/// DynamoDB takes one lock per write and 16 transactions at once queue past createTask's 15 s
/// function timeout on a loaded machine (the same writes, in the same total time).
fn at_once() -> usize {
    local_or_shape(16, 4)
}

/// Creates `n` tasks in `tq` that depend on `dependency`, a few at once; their ids. Each is
/// unscheduled until its dependency resolves.
async fn create_dependents(app: &TestServer, tq: &str, dependency: &str, n: usize) -> Vec<String> {
    let def = depends_on(tq, &[dependency]);
    let ids: Vec<String> = (0..n).map(|_| slugid()).collect();
    bounded(ids.clone(), at_once(), |id| {
        let def = &def;
        async move {
            let r = app.queue().createTask(&id, def).await.unwrap();
            assert_eq!(r["status"]["state"], "unscheduled");
        }
    })
    .await;
    ids
}

#[tokio::test]
async fn fan_out_one_task_releases_a_thousand_dependents() {
    // A thousand (in the bounded deployed shape, fewer) on a stack of its own.
    let app = spawn_app_alone().await;
    let n = many(1000);
    let tq = task_queue_id();
    let dependents_tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let ids = create_dependents(&app, &dependents_tq, &a, n).await;
    assert_eq!(dependents(&app, &a, None).await.len(), n);
    let q = app.queue();
    assert_eq!(
        q.pendingTasks(&dependents_tq).await.unwrap()["pendingTasks"],
        0
    );

    claim_and_complete(&app, &tq, &a).await;
    let resolved = Instant::now();
    // Deployed shape: every release goes through LocalStack's one DynamoDB process.
    let wait = if in_shape() { WAIT * 5 } else { WAIT };
    all_pending(&app, &dependents_tq, n, wait).await;
    println!(
        "fan-out: {n} dependents pending {:?} after their dependency completed",
        resolved.elapsed()
    );
    for id in ids.iter().step_by(97) {
        assert_eq!(status(&app, id).await["state"], "pending");
    }
}

/// A release is paced to its partition's share (`TCQ_DEPENDENTS_PER_SEC`): at 100 a second,
/// 600 dependents take at least 5.84 s, longer than the local server's 5 s pass, so the pass
/// that began it stops short with the task still marked and the next goes on. Every
/// dependent is released, once.
#[tokio::test]
async fn a_release_is_paced_to_its_partition_and_goes_on_past_a_pass() {
    let per_sec = 100;
    let app = spawn_app_alone_with(|c| c.queue.dependents_per_sec = Some(per_sec)).await;
    let n = many(600);
    let (tq, dependents_tq) = (task_queue_id(), task_queue_id());
    let a = create(&app, &task_def(&tq)).await;
    let ids = create_dependents(&app, &dependents_tq, &a, n).await;
    // Timed from before the claim and the completion: the release may begin before the
    // completion's answer is back, and the bound below is on the release alone.
    let completing = Instant::now();
    claim_and_complete(&app, &tq, &a).await;
    let wait = if in_shape() { WAIT * 5 } else { WAIT };
    all_pending(&app, &dependents_tq, n, wait).await;
    let took = completing.elapsed();
    println!("{n} dependents at {per_sec} a second pending {took:?} after their dependency");
    // Write k begins k / per_sec after the first; the last chunk (16) begins at (n - 16) / per_sec.
    let least = Duration::from_secs_f64((n - 16) as f64 / f64::from(per_sec));
    assert!(took >= least, "{took:?}: faster than {per_sec} a second");
    for id in ids.iter().step_by(53) {
        let s = status(&app, id).await;
        assert_eq!(s["state"], "pending");
        assert_eq!(s["runs"].as_array().unwrap().len(), 1, "released once");
    }
}

#[tokio::test]
async fn fan_in_a_thousand_dependencies_release_one_task() {
    // A thousand (in the bounded deployed shape, fewer) on a stack of its own.
    let app = spawn_app_alone().await;
    let n = many(1000);
    let tq = task_queue_id();
    let final_tq = task_queue_id();
    let deps: Vec<String> = (0..n).map(|_| slugid()).collect();
    let def = task_def(&tq);
    bounded(deps.clone(), at_once(), |id| {
        let (app, def) = (&app, &def);
        async move {
            app.queue().createTask(&id, def).await.unwrap();
        }
    })
    .await;
    let refs: Vec<&str> = deps.iter().map(String::as_str).collect();
    let last = slugid();
    // Checking 1,000 dependencies and writing 1,000 edges takes tens of seconds on LocalStack
    // under load: this one call gets a longer client timeout than the harness's 60 s.
    let patient = taskcluster::Queue::new(
        builder(&app.root_url(), Some(root_credentials())).timeout(Duration::from_secs(300)),
    )
    .unwrap();
    let started = Instant::now();
    let r = patient
        .createTask(&last, &depends_on(&final_tq, &refs))
        .await
        .unwrap();
    println!(
        "fan-in: createTask with {n} dependencies took {:?}",
        started.elapsed()
    );
    assert_eq!(r["status"]["state"], "unscheduled");

    // Claim in batches of 32 and complete every claim.
    let mut done = 0;
    while done < n {
        let r = app
            .queue()
            .claimWork(&tq, &worker("g", "w", 32))
            .await
            .unwrap();
        let ids: Vec<String> = r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["status"]["taskId"].as_str().unwrap().to_string())
            .collect();
        assert!(!ids.is_empty(), "claimWork found nothing after {done}");
        if done + ids.len() < n {
            assert_eq!(status(&app, &last).await["state"], "unscheduled");
        }
        done += ids.len();
        bounded(ids, at_once(), |id| {
            let app = &app;
            async move {
                complete(app, &id, 0).await;
            }
        })
        .await;
    }
    let resolved = Instant::now();
    wait_pending(&app, &last).await;
    let claim = claim_one(&app, &final_tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], last.as_str());
    println!(
        "fan-in: the dependent of {n} tasks was claimed {:?} after the last one completed",
        resolved.elapsed()
    );
}

/// Time from the last dependency resolving to its dependent being claimed, over a chain.
#[tokio::test]
async fn latency_from_resolution_to_claimable_dependent() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 20_000).await;
    let tq = task_queue_id();
    let mut prev = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    let mut samples = Vec::new();
    // Each sample waits for a stream batch in the deployed shape (about 2.5 s there).
    let n = if in_shape() { 10 } else { 50 };
    for _ in 0..n {
        let next = create(&app, &depends_on(&tq, &[&prev])).await;
        complete(&app, &prev, 0).await;
        let t = Instant::now();
        let claim = claim_one(&app, &tq, "g", "w").await;
        samples.push(t.elapsed());
        assert_eq!(claim["status"]["taskId"], next.as_str());
        prev = next;
    }
    samples.sort();
    println!(
        "dependency latency over {} samples: p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
        samples[samples.len() - 1]
    );
}
