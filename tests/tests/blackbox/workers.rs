//! Worker metadata: task queues, provisioners, worker types and workers recorded by claims,
//! quarantine, declareWorker and their expiry.

use crate::common::*;
use blackbox::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use shared::records::worker::{pk_workers, PK_TASK_QUEUES, TABLE};
use shared::store::SkRange;
use shared::time::{Ts, DAY, HOUR};
use std::time::{Duration, Instant};

fn split(tq: &str) -> (&str, &str) {
    tq.split_once('/').expect("a task queue id")
}

/// Milliseconds from now to an ISO date in a reply.
fn from_now(v: &Value) -> i64 {
    let t = Ts::parse(v.as_str().expect("a date")).expect("a date");
    t.millis() - Ts::now().millis()
}

/// A server whose every claimed run reaches its worker's recentTasks at its next background
/// tick (a claim that hands out work answers before it records anything).
async fn recording_app() -> TestServer {
    spawn_app_with(|c| c.queue.recent_tasks_batch = 1).await
}

/// The worker once its recentTasks holds `n` runs.
async fn recorded(q: &taskcluster::Queue, tq: &str, worker: (&str, &str), n: usize) -> Value {
    let (prov, wt) = split(tq);
    poll(
        Duration::from_secs(20),
        "the worker's recording",
        || async {
            let w = q.getWorker(prov, wt, worker.0, worker.1).await.ok()?;
            (w["recentTasks"].as_array()?.len() == n).then_some(w)
        },
    )
    .await
}

#[tokio::test]
async fn claims_record_the_task_queue_and_the_worker() {
    // Lists every provisioner and every worker type of test-prov: alone in the deployed shape.
    let app = spawn_app_alone_with(|c| c.queue.recent_tasks_batch = 1).await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let first = create(&app, &task_def(&tq)).await;
    let second = create(&app, &task_def(&tq)).await;
    let third = create(&app, &task_def(&tq)).await;
    let a = claim_one(&app, &tq, "grp", "wa").await;
    let b = claim_one(&app, &tq, "grp", "wa").await;
    q.claimTask(&third, "0", &claimer("grp", "wb"))
        .await
        .expect("claimTask");
    q.reclaimTask(&third, "0").await.expect("reclaim");
    let claimed: Vec<&str> = [&a, &b]
        .iter()
        .map(|c| c["status"]["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(claimed, vec![first.as_str(), second.as_str()]);

    let wa = recorded(&q, &tq, ("grp", "wa"), 2).await;
    let wb = recorded(&q, &tq, ("grp", "wb"), 1).await;

    // The task queue, and the provisioner and worker type read off it.
    let got = q.getTaskQueue(&tq).await.expect("getTaskQueue");
    assert_eq!(got["taskQueueId"], tq.as_str());
    assert_eq!(got["stability"], "experimental");
    assert_eq!(got["description"], "");
    // Five days on, rounded up to the hour.
    let left = from_now(&got["expires"]);
    assert!((5 * DAY - 60_000..=5 * DAY + HOUR).contains(&left), "{got}");
    assert!(from_now(&got["lastDateActive"]).abs() < 60_000, "{got}");
    assert_dates(&got);
    let listed = all_pages("taskQueues", 1000, |t| {
        let q = app.queue();
        async move { q.listTaskQueues(t.as_deref(), None).await.expect("list") }
    })
    .await;
    assert!(listed.iter().any(|x| x == &got), "{listed:?}");
    let p = q.getProvisioner(prov).await.expect("getProvisioner");
    assert_eq!(p["provisionerId"], prov);
    assert_eq!(p["expires"], got["expires"]);
    let provs = q
        .listProvisioners(None, None)
        .await
        .expect("listProvisioners");
    assert!(provs["provisioners"].as_array().unwrap().contains(&p));
    let t = q.getWorkerType(prov, wt).await.expect("getWorkerType");
    assert_eq!(
        (&t["workerType"], &t["taskQueueId"]),
        (&json!(wt), &json!(tq))
    );
    let types = q.listWorkerTypes(prov, None, None).await.expect("types");
    assert_eq!(types["workerTypes"], json!([t]));

    // The workers, and what each claimed.
    assert_eq!(
        wa["recentTasks"],
        json!([{"taskId": first, "runId": 0}, {"taskId": second, "runId": 0}])
    );
    assert_eq!(
        (&wa["provisionerId"], &wa["workerType"]),
        (&json!(prov), &json!(wt))
    );
    let left = from_now(&wa["expires"]);
    assert!((DAY - 60_000..=DAY + HOUR).contains(&left), "{wa}");
    assert!(
        from_now(&wa["quarantineUntil"]) < 0,
        "never quarantined: {wa}"
    );
    assert_dates(&wa);
    assert_eq!(wb["recentTasks"], json!([{"taskId": third, "runId": 0}]));
    let workers = q
        .listWorkers(prov, wt, None, None, None)
        .await
        .expect("list");
    let names: Vec<&str> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workerId"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["wa", "wb"]);
    assert_eq!(
        workers["workers"][0]["latestTask"],
        json!({"taskId": second, "runId": 0})
    );
    assert!(workers["workers"][0].get("quarantineUntil").is_none());

    // Unknown things are 404, bad ids 400, and scopes come before lookups.
    for r in [
        q.getProvisioner("no-such-prov").await,
        q.getWorkerType(prov, "no-such-type").await,
        q.getTaskQueue(&format!("{prov}/no-such-type")).await,
        q.getWorker(prov, wt, "grp", "nobody").await,
        q.getWorker("no-such-prov", wt, "grp", "wa").await,
        q.quarantineWorker(
            prov,
            wt,
            "grp",
            "nobody",
            &json!({"quarantineUntil": ts(1_000)}),
        )
        .await,
    ] {
        assert_eq!(err_status(r), 404);
    }
    for r in [
        q.getProvisioner("bad.id").await,
        q.getWorker(prov, wt, "grp", &"x".repeat(39)).await,
        q.getTaskQueue("no-slash").await,
        q.listWorkers(prov, wt, None, None, Some("maybe")).await,
        q.quarantineWorker(prov, wt, "grp", "wa", &json!({"quarantineUntil": "soon"}))
            .await,
    ] {
        assert_eq!(err_status(r), 400);
    }
    let nobody = app.queue_as(Some(client_with(&app, &[]).await));
    assert_eq!(
        err_status(nobody.getWorker(prov, wt, "grp", "nobody").await),
        403
    );
    assert_eq!(err_status(nobody.getProvisioner("no-such-prov").await), 403);
}

/// A worker's first sighting, and its task queue's, are written before claimWork and
/// claimTask answer (as upstream's claims await theirs): a script can read the worker and the
/// task queue, and quarantine the worker, right after its first claim. Its later claims go
/// out in `recentTasks` batches (here, the default: after they wait).
#[tokio::test]
async fn a_first_claim_is_recorded_before_it_answers() {
    // Background ticks a minute apart: none writes the sighting in time for the reads.
    let app = spawn_app_with(|c| c.reaper_interval_ms = 60_000).await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let a = create(&app, &task_def(&tq)).await;
    let b = create(&app, &task_def(&tq)).await;
    let got = claim_one(&app, &tq, "grp", "first").await;
    assert_eq!(got["status"]["taskId"], a.as_str());
    let t = q.getTaskQueue(&tq).await.expect("the task queue, at once");
    assert_eq!(t["taskQueueId"], tq.as_str());
    let w = q
        .getWorker(prov, wt, "grp", "first")
        .await
        .expect("the worker, at once");
    assert_eq!(w["recentTasks"], json!([{"taskId": a, "runId": 0}]));
    q.claimTask(&b, "0", &claimer("grp", "second"))
        .await
        .expect("claimTask");
    let w = q
        .getWorker(prov, wt, "grp", "second")
        .await
        .expect("claimTask's worker, at once");
    assert_eq!(w["recentTasks"], json!([{"taskId": b, "runId": 0}]));
    let until = json!({ "quarantineUntil": ts(3_600_000) });
    let w = q
        .quarantineWorker(prov, wt, "grp", "first", &until)
        .await
        .expect("quarantined right after its first claim");
    assert!(from_now(&w["quarantineUntil"]) > 0, "{w}");
}

#[tokio::test]
async fn recent_tasks_hold_the_last_twenty_claims() {
    let app = recording_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let mut ids = vec![];
    for _ in 0..23 {
        ids.push(create(&app, &task_def(&tq)).await);
    }
    let mut claimed = vec![];
    while claimed.len() < ids.len() {
        let r = q
            .claimWork(&tq, &worker("grp", "w", 5))
            .await
            .expect("claim");
        for t in r["tasks"].as_array().unwrap() {
            claimed.push(t["status"]["taskId"].as_str().unwrap().to_string());
        }
    }
    let w = poll(
        Duration::from_secs(20),
        "the last claims recorded",
        || async {
            let w = q.getWorker(prov, wt, "grp", "w").await.ok()?;
            let last = w["recentTasks"].as_array()?.last()?["taskId"].clone();
            (last == json!(claimed.last())).then_some(w)
        },
    )
    .await;
    let recent: Vec<Value> = claimed[3..]
        .iter()
        .map(|id| json!({"taskId": id, "runId": 0}))
        .collect();
    assert_eq!(w["recentTasks"], json!(recent));
}

#[tokio::test]
async fn claimed_runs_are_held_back_and_written_together() {
    // Held-back runs leave with the next invocation of the same function there.
    if not_in_shape("a held-back run waits for its own function's next call") {
        return;
    }
    // The default batch: five runs per write, or a run that waited long enough.
    let app = spawn_app_with(|c| c.queue.recent_tasks_delay_ms = 5_000).await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    for _ in 0..7 {
        create(&app, &task_def(&tq)).await;
    }
    let mut claimed = vec![];
    for _ in 0..7 {
        let c = claim_one(&app, &tq, "grp", "w").await;
        claimed.push(json!({"taskId": c["status"]["taskId"], "runId": 0}));
    }
    // The first claim created the worker; the next five went out together; the last waits.
    let w = recorded(&q, &tq, ("grp", "w"), 6).await;
    assert_eq!(w["recentTasks"], json!(claimed[..6]));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let w = q.getWorker(prov, wt, "grp", "w").await.expect("getWorker");
    assert_eq!(
        w["recentTasks"],
        json!(claimed[..6]),
        "the seventh is held back"
    );
    // Then the delay passes and the background tick writes it.
    let all = json!(claimed);
    poll(Duration::from_secs(20), "the held-back run", || async {
        let w = q.getWorker(prov, wt, "grp", "w").await.ok()?;
        (w["recentTasks"] == all).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_quarantined_worker_gets_nothing_and_another_worker_gets_the_task() {
    let app = recording_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    q.declareWorker(prov, wt, "grp", "bad", &json!({"expires": ts(DAY)}))
        .await
        .expect("declareWorker");
    let until = ts(3_600_000);
    let r = q
        .quarantineWorker(
            prov,
            wt,
            "grp",
            "bad",
            &json!({"quarantineUntil": until, "quarantineInfo": "disk full"}),
        )
        .await
        .expect("quarantineWorker");
    assert_eq!(r["quarantineUntil"], until.as_str());
    let d = &r["quarantineDetails"][0];
    assert_eq!(d["clientId"], ROOT_CLIENT_ID);
    assert_eq!(
        (&d["quarantineUntil"], &d["quarantineInfo"]),
        (&json!(until), &json!("disk full"))
    );

    let id = create(&app, &task_def(&tq)).await;
    // claimWork answers empty only after the whole wait (2 s here), so the worker can't spin.
    let started = Instant::now();
    let r = q
        .claimWork(&tq, &worker("grp", "bad", 1))
        .await
        .expect("claimWork");
    assert_eq!(r["tasks"], json!([]));
    assert!(
        started.elapsed() >= Duration::from_millis(1_900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status(&app, &id).await["state"], "pending");
    // claimTask claims nothing either: 409, the run stays pending.
    let r = q.claimTask(&id, "0", &claimer("grp", "bad")).await;
    assert_eq!(err_status(r), 409);
    assert_eq!(status(&app, &id).await["state"], "pending");
    let good = claim_one(&app, &tq, "grp", "good").await;
    assert_eq!(good["status"]["taskId"], id.as_str());

    let listing = |filter: Option<&'static str>| {
        let q = app.queue();
        async move {
            let r = q
                .listWorkers(prov, wt, None, None, filter)
                .await
                .expect("list");
            r["workers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["workerId"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    recorded(&q, &tq, ("grp", "good"), 1).await;
    assert_eq!(listing(Some("true")).await, vec!["bad"]);
    assert_eq!(listing(Some("false")).await, vec!["good"]);
    assert_eq!(listing(None).await, vec!["bad", "good"]);
    let bad = q
        .listWorkers(prov, wt, None, None, Some("true"))
        .await
        .unwrap();
    assert_eq!(bad["workers"][0]["quarantineUntil"], until.as_str());

    // Lifting it (a time past) lets the worker claim again; the history keeps both changes.
    let r = q
        .quarantineWorker(
            prov,
            wt,
            "grp",
            "bad",
            &json!({"quarantineUntil": ts(-1_000)}),
        )
        .await
        .expect("lift");
    assert_eq!(r["quarantineDetails"].as_array().unwrap().len(), 2);
    assert_eq!(r["quarantineDetails"][1]["quarantineInfo"], "[unspecified]");
    let next = create(&app, &task_def(&tq)).await;
    let c = claim_one(&app, &tq, "grp", "bad").await;
    assert_eq!(c["status"]["taskId"], next.as_str());
    assert_eq!(listing(Some("true")).await, Vec::<String>::new());
}

#[tokio::test]
async fn declare_worker_needs_a_scope_per_property_and_never_shortens_expiry() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let empty = q.declareWorker(prov, wt, "grp", "w", &json!({})).await;
    assert_eq!(err_status(empty), 400);
    let later = ts(3 * DAY);
    let scope = format!("queue:declare-worker:{tq}/grp/w#expires");
    let other = format!("queue:declare-worker:{tq}/grp/w#quarantineUntil");
    let without = app.queue_as(Some(client_with(&app, &[other]).await));
    let r = without
        .declareWorker(prov, wt, "grp", "w", &json!({"expires": later}))
        .await;
    assert_eq!(err_status(r), 403);
    let with = app.queue_as(Some(client_with(&app, &[scope]).await));
    let w = with
        .declareWorker(prov, wt, "grp", "w", &json!({"expires": later}))
        .await
        .expect("declareWorker");
    assert_eq!(w["expires"], later.as_str());
    assert_eq!(w["recentTasks"], json!([]));
    // quarantineUntil is not a property declareWorker takes.
    let r = q
        .declareWorker(prov, wt, "grp", "w", &json!({"quarantineUntil": later}))
        .await;
    assert_eq!(err_status(r), 400);
    // An earlier expiry leaves the later one.
    let w = q
        .declareWorker(prov, wt, "grp", "w", &json!({"expires": ts(DAY)}))
        .await
        .expect("declareWorker");
    assert_eq!(w["expires"], later.as_str());
    assert_eq!(
        q.getTaskQueue(&tq).await.unwrap()["expires"],
        later.as_str()
    );
}

#[tokio::test]
async fn twenty_five_hundred_workers_page_through_listings() {
    // 2,500 (in the bounded deployed shape, fewer) on a stack of its own; the page sizes and
    // the share quarantined follow the count (1000, 333 and 700 of 2,500).
    let app = spawn_app_alone().await;
    let n = many(2_500);
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let domain = app.domain_queue().await;
    let now = Ts::now();
    let ids: Vec<String> = (0..n).map(|n| format!("w{n:04}")).collect();
    futures_util::stream::iter(ids.iter())
        .map(|id| {
            let domain = domain.clone();
            let tq = tq.clone();
            async move {
                domain
                    .declare_worker((&tq, "grp", id), now.plus(DAY), now)
                    .await
                    .expect("declare")
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    // Quarantine 25 of them, evenly spread.
    for id in ids.iter().step_by(n / 25) {
        q.quarantineWorker(prov, wt, "grp", id, &json!({"quarantineUntil": ts(DAY)}))
            .await
            .expect("quarantine");
    }
    let names = |ws: Vec<Value>| -> Vec<String> {
        ws.iter()
            .map(|w| w["workerId"].as_str().unwrap().to_string())
            .collect()
    };
    for (limit, filter, expect) in [
        (n * 2 / 5, None, ids.clone()),
        (n * 2 / 15, None, ids.clone()),
        (
            n * 7 / 25,
            Some("true"),
            ids.iter().step_by(n / 25).cloned().collect::<Vec<_>>(),
        ),
    ] {
        let got = all_pages("workers", limit, |t| {
            let q = app.queue();
            let l = limit.to_string();
            async move {
                q.listWorkers(prov, wt, t.as_deref(), Some(&l), filter)
                    .await
                    .expect("listWorkers")
            }
        })
        .await;
        assert_eq!(names(got), expect, "limit {limit}, quarantined {filter:?}");
    }
}

#[tokio::test]
async fn expired_task_queues_and_workers_are_deleted_but_quarantined_workers_stay() {
    let app = spawn_app_with(|c| c.artifact_reaper_interval_ms = 100).await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let soon = json!({"expires": ts(1_500)});
    q.declareWorker(prov, wt, "grp", "gone", &soon)
        .await
        .expect("declare");
    q.declareWorker(prov, wt, "grp", "kept", &soon)
        .await
        .expect("declare");
    q.quarantineWorker(
        prov,
        wt,
        "grp",
        "kept",
        &json!({"quarantineUntil": ts(DAY)}),
    )
    .await
    .expect("quarantine");
    // The quarantine pushed `kept`'s expiry a day out; set it back so only quarantine keeps it.
    let domain = app.domain_queue().await;
    let (mut rec, v) = domain
        .read_worker((&tq, "grp", "kept"), true)
        .await
        .unwrap()
        .expect("kept");
    rec.expires = Ts::now().plus(1_500);
    domain
        .store
        .write(shared::store::WriteOp::Put {
            table: TABLE,
            item: rec.to_item(),
            cond: shared::store::Cond::Version(v),
        })
        .await
        .expect("rewrite");

    let keys = |pk: String| {
        let domain = domain.clone();
        async move {
            let page = domain
                .store
                .query(TABLE, &pk, &SkRange::default(), None, 100)
                .await
                .unwrap();
            page.items.into_iter().map(|i| i.sk).collect::<Vec<_>>()
        }
    };
    poll(Duration::from_secs(60), "the expiry job", || async {
        let workers = keys(pk_workers(&tq)).await;
        let queues = keys(PK_TASK_QUEUES.to_string()).await;
        (workers == vec!["grp/kept".to_string()] && !queues.contains(&tq)).then_some(())
    })
    .await;
    assert_eq!(err_status(q.getTaskQueue(&tq).await), 404);
    assert_eq!(err_status(q.getWorker(prov, wt, "grp", "gone").await), 404);
    // Still listed while quarantined, though expired.
    let listed = q.listWorkers(prov, wt, None, None, None).await.unwrap();
    assert_eq!(listed["workers"].as_array().unwrap().len(), 1);
    assert_eq!(listed["workers"][0]["workerId"], "kept");
}

/// When worker-manager says a worker stopped or was removed (`worker-stopped`,
/// `worker-removed`: messages of upstream's `pulse-worker-message` shape on a real RabbitMQ),
/// the runs that worker still holds are resolved `exception`/`worker-shutdown` at once and
/// retried, with their `task-exception` and `task-pending`; another worker's run and a run the
/// worker already resolved are left alone; a second message for the worker changes nothing;
/// messages that name no worker are skipped, not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_worker_that_worker_manager_removed_are_resolved_and_retried() {
    use blackbox::amqp::{amqp_url, broker_addr};
    use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{FieldTable, ShortString};
    use lapin::{BasicProperties, Connection, ConnectionProperties};
    let slug = slugid();
    let wm = format!("exchange/tcq-test-{slug}/worker-manager/v1/");
    let feeds = format!("tcq-test-{slug}-");
    let mut app = spawn_app_with(|c| {
        c.amqp_url = Some(amqp_url(&broker_addr()));
        c.queue.worker_manager_exchange_prefix = wm.clone();
        c.queue.feed_queue_prefix = feeds.clone();
    })
    .await;
    let q = app.queue();
    let tq = task_queue_id();
    let (prov, wt) = split(&tq);
    let gone = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "gone").await;
    let other = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "other").await;
    let done = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "gone").await;
    q.reportCompleted(&done, "0")
        .await
        .expect("reportCompleted");
    let stopping = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "stopping").await;

    // The server's queue, bound to worker-manager's exchanges and consumed: the server
    // declares it as it starts (deployed, the publishers and exchangeDeclarer do).
    let feed = shared::jobs::declare::WORKER_GONE_RESOLVER
        .broker
        .as_ref()
        .expect("a feed");
    let queue = app.feed_queue(feed);
    let conn = Connection::connect(&amqp_url(&broker_addr()), ConnectionProperties::default())
        .await
        .expect("RabbitMQ");
    // The queue's (messages ready, consumers), if it exists.
    let counts = || async {
        let ch = conn.create_channel().await.ok()?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let q = ch
            .queue_declare(
                ShortString::from(queue.as_str()),
                passive,
                FieldTable::default(),
            )
            .await
            .ok()?;
        Some((q.message_count(), q.consumer_count()))
    };
    poll(
        local_or_shape(Duration::from_secs(10), Duration::from_secs(60)),
        "a consumer of the feed queue",
        || async { counts().await.filter(|(_, consumers)| *consumers > 0) },
    )
    .await;
    let ch = conn.create_channel().await.expect("channel");
    let publish = |exchange: &'static str, body: Vec<u8>| {
        let ch = ch.clone();
        let (wm, prov, wt) = (wm.clone(), prov.to_string(), wt.to_string());
        async move {
            let key = format!("primary.static.{prov}.{wt}.grp.gone._._");
            ch.basic_publish(
                ShortString::from(format!("{wm}{exchange}")),
                ShortString::from(key),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirmed");
        }
    };
    let message = |extra: serde_json::Value| {
        let mut m = json!({
            "workerPoolId": tq, "providerId": "static", "workerGroup": "grp",
            "workerId": "gone", "capacity": 1, "timestamp": ts(0),
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            m[k] = v;
        }
        serde_json::to_vec(&m).expect("JSON")
    };
    // Two that name no worker first: skipped, and the queue goes on.
    publish("worker-removed", b"not JSON".to_vec()).await;
    publish("worker-removed", message(json!({ "workerId": null }))).await;
    let sent = Instant::now();
    publish("worker-removed", message(json!({ "reason": "terminated" }))).await;
    // Its run was claimed moments ago, so it may take a second look, once the index settles.
    let st = poll(
        local_or_shape(Duration::from_secs(2), Duration::from_secs(30)) + index_settle() * 2,
        "the removed worker's run resolved",
        || async {
            let st = q.status(&gone).await.ok()?;
            (st["status"]["runs"].as_array()?.len() == 2).then_some(st)
        },
    )
    .await;
    eprintln!("resolved {:?} after the message", sent.elapsed());
    let runs = &st["status"]["runs"];
    assert_eq!(runs[0]["state"], "exception");
    assert_eq!(runs[0]["reasonResolved"], "worker-shutdown");
    assert_eq!(runs[1]["state"], "pending");
    assert_eq!(runs[1]["reasonCreated"], "retry");
    let exception = |e: &shared::events::Event| {
        e.exchange.ends_with("task-exception") && e.payload["status"]["taskId"] == gone.as_str()
    };
    app.wait_for_event(Duration::from_secs(20), exception)
        .await
        .expect("task-exception published");
    app.wait_for_event(Duration::from_secs(20), |e| {
        e.exchange.ends_with("task-pending")
            && e.payload["status"]["taskId"] == gone.as_str()
            && e.payload["runId"] == 1
    })
    .await
    .expect("the retry's task-pending published");
    // worker-stopped for the same worker, later: nothing more. worker-stopped alone resolves
    // another worker's run.
    publish("worker-stopped", message(json!({}))).await;
    publish("worker-stopped", message(json!({ "workerId": "stopping" }))).await;
    // The consumer takes one message at a time, and the two before this one each wait for
    // the indexes to settle before their second look.
    poll(
        local_or_shape(Duration::from_secs(2), Duration::from_secs(30)) + index_settle() * 3,
        "the stopped worker's run resolved",
        || async {
            let st = q.status(&stopping).await.ok()?;
            (st["status"]["runs"][0]["reasonResolved"] == "worker-shutdown").then_some(())
        },
    )
    .await;
    let st = q.status(&gone).await.expect("status");
    assert_eq!(st["status"]["runs"].as_array().map(Vec::len), Some(2));
    let sent: Vec<_> = app.events().into_iter().filter(|e| exception(e)).collect();
    assert_eq!(sent.len(), 1, "one task-exception: {sent:?}");
    // Another worker's run, and the run the worker resolved, are as they were.
    let st = q.status(&other).await.expect("status");
    assert_eq!(st["status"]["runs"][0]["state"], "running");
    let st = q.status(&done).await.expect("status");
    assert_eq!(st["status"]["state"], "completed");
    assert_eq!(st["status"]["runs"].as_array().map(Vec::len), Some(1));
    // Nothing left in the queue once its consumer is gone (an unacknowledged message would
    // be back in it): the skipped messages were acknowledged, not put back.
    if in_shape() {
        return;
    }
    // A batch acknowledges after its second look, which waits for the index to settle.
    tokio::time::sleep(index_settle() * 2).await;
    app.stop().await;
    assert_eq!(counts().await, Some((0, 0)));
    let ch = conn.create_channel().await.expect("channel");
    let _ = ch
        .queue_delete(
            ShortString::from(queue.as_str()),
            QueueDeleteOptions::default(),
        )
        .await;
}

use shared::ids::TaskQueueId;
use shared::queue::{workers::Flush, Queue, QueueConfig};

/// Two processes' `Queue`s over one SQLite store: the first counts its requests.
fn two_processes(
    cfg: QueueConfig,
) -> (
    tempfile::TempDir,
    std::sync::Arc<blackbox::counting::Counting>,
    Queue,
    Queue,
) {
    use shared::creds::IssuerCredentials;
    use shared::signal::LocalSignal;
    use shared::store::{sqlite::SqliteStore, Store};
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir.path().join("db")).expect("SQLite"));
    let store = Arc::new(blackbox::counting::Counting::new(sqlite.clone()));
    let issuer = IssuerCredentials {
        client_id: "static/taskcluster/queue".into(),
        access_token: "test".into(),
    };
    let queue = |store: Arc<dyn Store>| {
        Queue::new(
            store,
            Arc::new(LocalSignal::default()),
            issuer.clone(),
            cfg.clone(),
        )
    };
    let (claimer, other) = (queue(store.clone()), queue(sqlite));
    (dir, store, claimer, other)
}

/// A claim of a task another process created reads the worker's record and the task's
/// definition in one request, between the pending query and the claim's write; a
/// quarantined worker's claim makes the same reads and writes nothing.
#[tokio::test]
async fn a_claim_reads_its_worker_and_the_definition_in_one_request() {
    let cfg = QueueConfig {
        claim_work_timeout_ms: 300,
        ..QueueConfig::default()
    };
    let (_dir, store, claimer, other) = two_processes(cfg);
    let tq = TaskQueueId::parse(&task_queue_id()).expect("queue id");
    let key = (tq.as_str(), "g", "w");
    // The worker's first claim also reads and writes its task queue's record; the second
    // finds both recorded.
    for n in 0..2 {
        let id = new_task(&other, &tq, false).await;
        let before = store.counts();
        let got = claimer
            .claim_work(&tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claimWork");
        let spent = store.counts() - before;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].record.task_id, id.as_str());
        assert_eq!(got[0].task["taskQueueId"], tq.as_str(), "the definition");
        assert_eq!(spent.refused, 0);
        if n == 1 {
            assert_eq!(spent.reads, 2, "the pending query, then one batched read");
        }
    }
    other
        .quarantine_worker(key, Ts::now().plus(HOUR), "disk full", "tester", Ts::now())
        .await
        .expect("quarantine");
    let id = new_task(&other, &tq, false).await;
    let (before, started) = (store.counts(), Instant::now());
    let got = claimer
        .claim_work(&tq, "g", "w", 1, &Ts::now)
        .await
        .expect("claimWork");
    let spent = store.counts() - before;
    assert!(got.is_empty(), "a quarantined worker claims nothing");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "after the whole wait"
    );
    assert_eq!(
        (spent.reads, spent.writes),
        (2, 0),
        "read, then nothing written"
    );
    let status = other.status(&id, Ts::now()).await.expect("status");
    assert_eq!(
        status.runs[0].state,
        shared::records::task::RunState::Pending
    );
}

/// The runs a worker's claims hold go out in one write that starts from the record the last
/// of those claims read (for its quarantine), conditioned on that record's version: no read
/// of its own. A record changed since (here, quarantined by another process) fails the
/// condition and is read again, so the quarantine stays and the runs are added to it.
#[tokio::test]
async fn held_runs_are_written_from_the_claims_read_and_a_change_since_is_kept() {
    // Five runs a write, and none written for their age during the test.
    let cfg = QueueConfig {
        recent_tasks_batch: 5,
        recent_tasks_delay_ms: HOUR,
        ..QueueConfig::default()
    };
    let (_dir, store, claimer, other) = two_processes(cfg);
    let tq = TaskQueueId::parse(&task_queue_id()).expect("queue id");
    let key = (tq.as_str(), "g", "w");
    let mut claimed = vec![];
    // The first claim writes the new worker before it answers; the next five are held.
    claim(&claimer, &tq, 6, &mut claimed).await;
    // The held runs' write: its (reads, writes, refused writes), and the worker after it.
    let flush = async |claimed: &[String]| {
        let before = store.counts();
        claimer.flush_seen(Ts::now(), Flush::Due).await;
        let spent = store.counts() - before;
        let w = claimer
            .get_worker(key, Ts::now())
            .await
            .expect("the worker");
        let recent: Vec<String> = w.recent_tasks.iter().map(|r| r.task_id.clone()).collect();
        assert_eq!(recent, claimed, "every run recorded");
        ((spent.reads, spent.writes, spent.refused), w)
    };
    let (spent, _) = flush(&claimed).await;
    assert_eq!(spent, (0, 1, 0), "one write, from the last claim's read");

    // Five more; another process quarantines the worker after the last claim read it.
    claim(&claimer, &tq, 5, &mut claimed).await;
    let until = Ts::now().plus(HOUR);
    other
        .quarantine_worker(key, until, "disk full", "tester", Ts::now())
        .await
        .expect("quarantine");
    let (spent, w) = flush(&claimed).await;
    assert_eq!(
        spent,
        (1, 1, 1),
        "refused on the changed version, read again, written"
    );
    assert_eq!(w.quarantine_until, Some(until), "the quarantine kept");
    assert_eq!(w.quarantine_details.len(), 1);
}

/// `n` tasks created on `tq` and claimed by worker `g/w` one by one, their ids added to
/// `claimed`.
async fn claim(
    queue: &shared::queue::Queue,
    tq: &shared::ids::TaskQueueId,
    n: usize,
    claimed: &mut Vec<String>,
) {
    for _ in 0..n {
        let id = new_task(queue, tq, false).await;
        let got = queue
            .claim_work(tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claimWork");
        assert_eq!(got.len(), 1, "claim {} of {n}", claimed.len());
        assert_eq!(got[0].record.task_id, id.as_str());
        claimed.push(id.to_string());
    }
}
