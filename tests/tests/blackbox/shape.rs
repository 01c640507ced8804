//! What only the deployed shape shows (run with `TCQ_TEST_BACKEND=shape`): every function its
//! own process, background work keeping up with bursts, and Lambda's limits. The byte-bounded
//! pages are checked against whichever server runs, so that both answer the same.

use crate::common::*;
use blackbox::burst::{due, held_deadline, seed};
use blackbox::*;
use serde_json::{json, Value};
use shared::jobs::declare::{Job, DEADLINE_REAPER, EXPIRY_REAPER};
use shared::records::task::index;
use shared::time::Ts;
use std::time::{Duration, Instant};

fn shape_only() -> bool {
    if !in_shape() {
        eprintln!("TCQ_TEST_BACKEND is not shape: this test is for the deployed shape");
    }
    in_shape()
}

/// How long a burst of `n`, seeded in `seeded`, may take to be handled here: two minutes plus
/// LocalStack's pace, 200 ms a task or four times the seeding, whichever is longer. Handling a
/// task writes about as many items as creating it (alone, 5,000 tasks seeded in 728 s were
/// deleted in 722 s), but its pace falls while another heavy test loads LocalStack's one
/// DynamoDB process: in one CI run beside `task_groups::a_group_too_large…`, 300 tasks took
/// 40 s to seed and their expiry outlasted 180 s (68264dd).
fn bound(n: usize, seeded: Duration) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(200 * n as u64).max(seeded * 4)
}

#[tokio::test]
async fn every_function_is_its_own_process() {
    if !shape_only() {
        return;
    }
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "wkr").await;
    app.queue()
        .reportCompleted(&id, "0")
        .await
        .expect("complete");
    let shape = app.shape().expect("shape");
    // With ClaimMode=service, claimWork is the claim service's (see claim_modes::).
    let handlers: &[&str] = if claims_on_service() {
        &["createTask", "reportCompleted"]
    } else {
        &["createTask", "claimWork", "reportCompleted"]
    };
    for h in handlers {
        assert!(shape.invocations(h) >= 1, "{h} was invoked");
    }
    let pids: Vec<usize> = handlers
        .iter()
        .map(|h| {
            shape
                .functions
                .all()
                .filter(|p| p.def.handler == *h)
                .map(|p| p.instances())
                .sum()
        })
        .collect();
    assert!(
        pids.iter().all(|n| *n >= 1),
        "each has an instance: {pids:?}"
    );
    // The events came through the tables' stream and the publisher function.
    wait_for_events(
        &app,
        &id,
        &[
            "task-defined",
            "task-pending",
            "task-running",
            "task-completed",
        ],
    )
    .await;
    assert!(shape.invocations("publisher") >= 1);
}

/// Waits until the task's events include every one of `names`.
async fn wait_for_events(app: &TestServer, id: &str, names: &[&str]) {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: Vec<String> = app
            .events()
            .iter()
            .filter(|e| e.payload["status"]["taskId"] == id)
            .map(|e| short_name(e).to_string())
            .collect();
        if names.iter().all(|n| seen.iter().any(|s| s == n)) {
            return;
        }
        assert!(Instant::now() < until, "events of {id}: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Enables the schedule of `handler` (held while a burst was seeded) and counts its
/// invocations from then until `done` holds; returns them.
async fn invocations_until<F, Fut>(
    app: &TestServer,
    handler: &str,
    timeout: Duration,
    done: F,
) -> usize
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let shape = app.shape().expect("shape");
    let before = shape.invocations(handler);
    shape.set_schedule_enabled(handler, true);
    let until = Instant::now() + timeout;
    while !done().await {
        assert!(
            Instant::now() < until,
            "{handler} did not finish in {timeout:?} ({} invocations began)",
            shape.invocations(handler) - before
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shape.invocations(handler) - before
}

/// Asserts that `passes` scheduled invocations of `job`, which took `took` to do all that was
/// due, each used the passes' whole budget while work was due: at most the whole budgets in
/// `took` and two (a pass that stopped early while work was due, or an instance killed
/// past its timeout, would take more). How many invocations a burst takes depends on the
/// store's pace (the hourly expiry is sized for 12,500 tasks in one 240 s budget, 52 a
/// second; LocalStack here deleted 6.9 a second, 2026-11-27); BENCHMARKS gives the figures.
fn assert_passes_use_their_budget(job: &'static Job, passes: usize, took: Duration) {
    let budget = Duration::from_secs(job.timeout_secs as u64).mul_f64(shared::jobs::BUDGET_SHARE);
    // Whole budgets in the time taken, the one that finished the work, and one more whose
    // firing may have begun as the work ended.
    let most = (took.as_secs_f64() / budget.as_secs_f64()).floor() as usize + 2;
    eprintln!(
        "{}: {passes} invocations in {took:?} at a budget of {budget:?} each (at most {most})",
        job.name
    );
    assert!(
        passes <= most,
        "{passes} invocations of {} in {took:?}",
        job.name
    );
}

#[tokio::test]
async fn a_deadline_burst_resolves_within_two_scheduled_invocations() {
    if !shape_only() {
        return;
    }
    // The minute's schedule fires every 10 s: a sped-up firing is skipped while the last
    // invocation runs, so passes never overlap, and each invocation counted is one pass with
    // the function's whole budget, as deployed. It is held while the burst is seeded.
    let app = spawn_app_alone_with(|c| c.reaper_interval_ms = 10_000).await;
    app.shape()
        .expect("shape")
        .set_schedule_enabled(DEADLINE_REAPER.name, false);
    let queue = app.domain_queue().await;
    let tq = task_queue_id();
    let n = shape_burst();
    let (started, deadline) = (Instant::now(), held_deadline());
    seed(&queue, n, |_| {
        def_with(&tq, json!({ "deadline": deadline.to_string() }))
    })
    .await;
    let seeded = started.elapsed();
    eprintln!("seeded {n} tasks in {seeded:?}");
    while Ts::now() <= deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (q, since) = (queue.clone(), Instant::now());
    let passes = invocations_until(&app, DEADLINE_REAPER.name, bound(n, seeded), || {
        let q = q.clone();
        async move { due(&q, index::DEADLINE, Ts::now()).await == 0 }
    })
    .await;
    eprintln!(
        "{n} past-deadline tasks resolved in {passes} scheduled invocations, {:?}",
        since.elapsed()
    );
    assert!(passes <= 2, "{passes} invocations");
}

/// One task with a burst of dependents (5,000 in `scripts/test-shape.sh`): completing it
/// releases them all through the stream-triggered dependency resolver, whose writes to the
/// task's partition are paced (`TCQ_DEPENDENTS_PER_SEC`, 400 as deployed). The time from
/// reportCompleted to the last dependent pending is printed. Meanwhile another task of the
/// same shard, in another of the resolver's lanes (`ParallelizationFactor`), completes: its
/// one dependent is released without waiting for the burst.
#[tokio::test]
async fn a_burst_of_dependents_is_released_through_the_stream() {
    if !shape_only() {
        return;
    }
    let app = spawn_app_alone().await;
    let queue = app.domain_queue().await;
    let (tq, dependents_tq) = (task_queue_id(), task_queue_id());
    let a = create(&app, &task_def(&tq)).await;
    let n = shape_burst();
    let started = Instant::now();
    seed(&queue, n, |_| {
        def_with(&dependents_tq, json!({ "dependencies": [a] }))
    })
    .await;
    let seeded = started.elapsed();
    eprintln!("seeded {n} dependents in {seeded:?}");
    // A small release whose stream records go to another lane than the burst's.
    let lane = |id: &str| {
        let record = json!({ "dynamodb": { "Keys": { "pk": { "S": id } } } });
        blackbox::shape::streams::lane_of(&record, 10)
    };
    let (small_tq, small_dependent_tq) = (task_queue_id(), task_queue_id());
    let b = std::iter::repeat_with(slugid)
        .find(|b| lane(b) != lane(&a))
        .expect("another lane");
    let q = app.queue();
    q.createTask(&b, &task_def(&small_tq))
        .await
        .expect("createTask");
    let d = create(
        &app,
        &def_with(&small_dependent_tq, json!({ "dependencies": [b] })),
    )
    .await;
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], a.as_str());
    complete(&app, &a, 0).await;
    let resolved = Instant::now();
    // Once the burst's batch is being handled, so that the small one comes in a later batch.
    poll(
        bound(n, seeded),
        "the burst's release under way",
        || async {
            let pending = q.pendingTasks(&dependents_tq).await.unwrap()["pendingTasks"].clone();
            (pending.as_u64() > Some(0)).then_some(())
        },
    )
    .await;
    let claim = claim_one(&app, &small_tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], b.as_str());
    complete(&app, &b, 0).await;
    let small = wait_status(&app, &d, bound(n, seeded), |s| s["state"] == "pending").await;
    assert_eq!(small["state"], "pending");
    let small_took = resolved.elapsed();
    let burst_pending = q.pendingTasks(&dependents_tq).await.unwrap()["pendingTasks"].clone();
    all_pending(&app, &dependents_tq, n, bound(n, seeded)).await;
    let took = resolved.elapsed();
    eprintln!(
        "{n} dependents pending {took:?} after reportCompleted ({:.0} a second); the other \
         lane's dependent after {small_took:?}, when {burst_pending} of the burst were",
        n as f64 / took.as_secs_f64(),
    );
    assert!(
        burst_pending.as_u64() < Some(n as u64),
        "the small release waited for the burst: {small_took:?}, {took:?}"
    );
    let least = (n - 16) as f64 / f64::from(shared::queue::DEPENDENTS_PER_SEC);
    assert!(
        took.as_secs_f64() >= least,
        "{took:?}: faster than the pace"
    );
}

#[tokio::test]
async fn expired_tasks_are_deleted_by_invocations_that_use_their_whole_budget() {
    if !shape_only() {
        return;
    }
    // The expiry reaper's hour becomes 10 s (passes never overlap; see the deadline burst).
    // The deadline reaper keeps an hour: deployed, tasks expire months after their deadline
    // was handled, so here it would only add 5,000 resolutions and their events, which expiry
    // then waits for, to the pass timed. Expiry's schedule is held while the burst is seeded.
    let app = spawn_app_alone_with(|c| {
        c.artifact_reaper_interval_ms = 10_000;
        c.reaper_interval_ms = 3_600_000;
    })
    .await;
    app.shape()
        .expect("shape")
        .set_schedule_enabled(EXPIRY_REAPER.name, false);
    let queue = app.domain_queue().await;
    let tq = task_queue_id();
    let n = shape_burst();
    let (started, deadline) = (Instant::now(), held_deadline());
    seed(&queue, n, |_| {
        def_with(
            &tq,
            json!({
                "deadline": deadline.to_string(),
                "expires": deadline.plus(1).to_string()
            }),
        )
    })
    .await;
    let seeded = started.elapsed();
    eprintln!("seeded {n} tasks in {seeded:?}");
    while Ts::now() <= deadline.plus(1) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (q, since) = (queue.clone(), Instant::now());
    let passes = invocations_until(&app, EXPIRY_REAPER.name, bound(n, seeded), || {
        let q = q.clone();
        async move { due(&q, index::TASK_EXPIRY, Ts::now()).await == 0 }
    })
    .await;
    let took = since.elapsed();
    eprintln!(
        "{n} expired tasks deleted in {passes} scheduled invocations, {took:?} ({:.1} a second)",
        n as f64 / took.as_secs_f64()
    );
    assert_passes_use_their_budget(&EXPIRY_REAPER, passes, took);
}

/// A definition with a payload of `bytes` (6 KB is ordinary for Firefox's tasks).
fn big_def(tq: &str, group: &str, bytes: usize) -> Value {
    def_with(
        tq,
        json!({ "taskGroupId": group, "payload": { "env": { "BLOB": "x".repeat(bytes) } } }),
    )
}

#[tokio::test]
async fn listings_page_by_bytes_with_6_kb_definitions() {
    let app = spawn_app().await;
    let queue = app.domain_queue().await;
    let (tq, group) = (task_queue_id(), slugid());
    // 6 MB of definitions: a thousand of 6 KB (in the bounded deployed shape, fewer and larger).
    let n = many(1000);
    let bytes = 6_000_000 / n;
    seed(&queue, n, |_| big_def(&tq, &group, bytes)).await;
    let client = reqwest::Client::new();
    // Every page is under 5 MB and carries a token until the last; together they hold each
    // task once.
    for path in [
        format!("/task-group/{group}/list"),
        format!("/task-queues/{}/pending", tq.replace('/', "%2F")),
    ] {
        let mut seen = std::collections::HashSet::new();
        let mut token: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut url = app.url(&path);
            if let Some(t) = &token {
                url = format!("{url}?continuationToken={t}");
            }
            let res = client
                .get(&url)
                .header("authorization", root_authorization("GET", &url))
                .send()
                .await
                .expect("GET");
            assert_eq!(res.status(), 200, "{url}");
            let body = res.bytes().await.expect("body");
            assert!(body.len() < 5_200_000, "a page of {} bytes", body.len());
            let v: Value = serde_json::from_slice(&body).expect("JSON");
            for t in v["tasks"].as_array().expect("tasks") {
                let id = t["status"]["taskId"]
                    .as_str()
                    .or(t["taskId"].as_str())
                    .expect("taskId")
                    .to_string();
                assert!(seen.insert(id), "a task twice");
            }
            pages += 1;
            match v["continuationToken"].as_str() {
                Some(t) => token = Some(t.to_string()),
                None => break,
            }
        }
        assert_eq!(seen.len(), n, "{path}");
        assert!(
            pages >= 2,
            "{path}: 6 MB of definitions do not fit one page"
        );
    }
}

#[tokio::test]
async fn a_request_over_lambdas_limit_is_refused_and_leaves_nothing() {
    if !shape_only() {
        return;
    }
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    let mut def = task_def(&tq);
    def["payload"] = json!({ "blob": "x".repeat(7 * 1024 * 1024) });
    let url = app.url(&format!("/task/{id}"));
    let body = serde_json::to_vec(&def).expect("JSON");
    let res = reqwest::Client::new()
        .put(&url)
        .header("content-type", "application/json")
        .header(
            "authorization",
            hawk_authorization(
                ROOT_CLIENT_ID,
                ROOT_ACCESS_TOKEN,
                "PUT",
                &url,
                Some(("application/json", &body)),
            ),
        )
        .body(body)
        .send()
        .await
        .expect("PUT");
    let status = res.status().as_u16();
    let text = res.text().await.unwrap_or_default();
    eprintln!("7 MB createTask: {status} {text}");
    // API Gateway refuses it before the function: its own body, not the queue's error shape.
    assert_eq!(status, 413, "{text}");
    assert_eq!(
        status_of(&app.queue().task(&id).await.unwrap_err()),
        Some(404),
        "nothing was created"
    );
}
