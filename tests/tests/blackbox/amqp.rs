//! Events on a real RabbitMQ (`TCQ_TEST_AMQP_URL`, default the machine's broker at
//! 127.0.0.1:5672): what bound consumers receive for every kind of transition, one copy per
//! queue whatever the CCs, and no loss across a broker outage or a publisher SIGKILL.
//!
//! Each test publishes under an exchange prefix of its own, so that tests running at once
//! never see each other's messages; it deletes its exchanges at the end.

use crate::common::*;
use blackbox::amqp::*;
use blackbox::*;
use serde_json::json;
use shared::events::held::held_records;
use shared::records::task::TaskRecord;
use std::path::Path;
use std::time::Duration;

async fn server_publishing_to(url: String, prefix: &str) -> TestServer {
    let prefix = prefix.to_string();
    spawn_app_with(move |c| {
        c.amqp_url = Some(url);
        c.queue.exchange_prefix = prefix;
    })
    .await
}

/// The expected primary routing key of a task message.
fn key(id: &str, run: Option<u32>, worker: Option<(&str, &str)>, tq: &str) -> String {
    let (prov, wt) = tq.split_once('/').expect("provisioner/workerType");
    let run = run.map(|r| r.to_string()).unwrap_or("_".into());
    let (g, w) = worker.unwrap_or(("_", "_"));
    format!("primary.{id}.{run}.{g}.{w}.{prov}.{wt}.-.{id}._")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_consumers_see_every_transition() {
    let broker = Broker::connect().await;
    let app = server_publishing_to(amqp_url(&broker_addr()), &broker.prefix).await;
    let q = app.queue();
    let tq = task_queue_id();
    let (a, b, c) = (slugid(), slugid(), slugid());
    let everything = broker.bind(&ALL, "primary.#").await;
    let by_email = broker.bind(&ALL, "route.notify.by-email").await;
    let only_a = broker
        .bind(
            &["task-running", "task-completed"],
            &format!("primary.{a}.#"),
        )
        .await;

    // a: completed, b: failed, c: cancelled while pending. Only a has routes.
    let routed = def_with(&tq, json!({ "routes": ["notify.by-email", "other.route"] }));
    q.createTask(&a, &routed).await.expect("create a");
    claim_one(&app, &tq, "wg", "wi").await;
    complete(&app, &a, 0).await;
    q.createTask(&b, &task_def(&tq)).await.expect("create b");
    claim_one(&app, &tq, "wg", "wi").await;
    q.reportFailed(&b, "0").await.expect("fail b");
    q.createTask(&c, &task_def(&tq)).await.expect("create c");
    q.cancelTask(&c).await.expect("cancel c");

    // 11 task messages, and one task-group-resolved per group (each task is its own group).
    let got = broker.take(&everything, 14, Duration::from_secs(20)).await;
    let mut resolved_groups: Vec<String> = got
        .iter()
        .filter(|m| broker.short(m) == "task-group-resolved")
        .map(|m| m.routing_key.clone())
        .collect();
    resolved_groups.sort();
    let mut expected_groups: Vec<String> = [&a, &b, &c]
        .iter()
        .map(|id| format!("primary.{id}.-._"))
        .collect();
    expected_groups.sort();
    assert_eq!(resolved_groups, expected_groups);
    let seen = |id: &str| -> Vec<(String, String)> {
        got.iter()
            .filter(|m| m.payload["status"]["taskId"] == id)
            .map(|m| (broker.short(m).to_string(), m.routing_key.clone()))
            .collect()
    };
    let w = Some(("wg", "wi"));
    let expect = |v: &[(&str, String)]| -> Vec<(String, String)> {
        v.iter().map(|(e, k)| (e.to_string(), k.clone())).collect()
    };
    assert_eq!(
        seen(&a),
        expect(&[
            ("task-defined", key(&a, None, None, &tq)),
            ("task-pending", key(&a, Some(0), None, &tq)),
            ("task-running", key(&a, Some(0), w, &tq)),
            ("task-completed", key(&a, Some(0), w, &tq)),
        ])
    );
    assert_eq!(
        seen(&b),
        expect(&[
            ("task-defined", key(&b, None, None, &tq)),
            ("task-pending", key(&b, Some(0), None, &tq)),
            ("task-running", key(&b, Some(0), w, &tq)),
            ("task-failed", key(&b, Some(0), w, &tq)),
        ])
    );
    assert_eq!(
        seen(&c),
        expect(&[
            ("task-defined", key(&c, None, None, &tq)),
            ("task-pending", key(&c, Some(0), None, &tq)),
            ("task-exception", key(&c, Some(0), None, &tq)),
        ])
    );
    for m in &got {
        assert!(m.persistent, "persistent delivery: {m:?}");
        assert_eq!(m.content_type, "application/json");
        assert_eq!(m.payload["version"], 1);
        let schema = format!("{}-message", broker.short(m));
        if let Err(e) = shared::schema::check(&schema, &m.payload) {
            panic!("{schema}: {e:?} in {m:#?}");
        }
        let expected_cc: Vec<String> = if m.payload["status"]["taskId"] == a.as_str() {
            vec!["route.notify.by-email".into(), "route.other.route".into()]
        } else {
            vec![]
        };
        assert_eq!(m.cc, expected_cc, "{m:?}");
    }
    let done = got
        .iter()
        .find(|m| broker.short(m) == "task-completed")
        .expect("task-completed");
    assert_eq!(done.payload["workerId"], "wi");
    assert_eq!(done.payload["status"]["state"], "completed");

    let routed_msgs = broker.take(&by_email, 4, Duration::from_secs(10)).await;
    assert!(routed_msgs
        .iter()
        .all(|m| m.payload["status"]["taskId"] == a.as_str()));
    let a_only = broker.take(&only_a, 2, Duration::from_secs(10)).await;
    let names: Vec<&str> = a_only.iter().map(|m| broker.short(m)).collect();
    assert_eq!(names, ["task-running", "task-completed"]);
    // Nothing else arrives on the narrow bindings.
    assert!(broker
        .rest(&by_email, Duration::from_millis(500))
        .await
        .is_empty());
    assert!(broker.rest(&only_a, Duration::ZERO).await.is_empty());
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_binding_gets_one_copy_however_many_keys_match() {
    let broker = Broker::connect().await;
    let app = server_publishing_to(amqp_url(&broker_addr()), &broker.prefix).await;
    let all = broker.bind(&["task-defined"], "#").await;
    let tq = task_queue_id();
    let id = create(
        &app,
        &def_with(&tq, json!({ "routes": ["one.a", "one.b", "two"] })),
    )
    .await;
    let got = broker.take(&all, 1, Duration::from_secs(20)).await;
    assert_eq!(got[0].payload["status"]["taskId"], id.as_str());
    assert_eq!(got[0].cc.len(), 3);
    // The primary key and three CCs all match `#`: still one copy.
    let extra = broker.rest(&all, Duration::from_secs(1)).await;
    assert!(extra.is_empty(), "duplicates: {extra:#?}");
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_wait_out_a_broker_outage_and_api_calls_keep_working() {
    let broker = Broker::connect().await;
    let relay = Relay::start(false).await;
    let app = server_publishing_to(relay.url(), &broker.prefix).await;
    let all = broker.bind(&ALL, "#").await;
    let tq = task_queue_id();
    let mut ids = vec![];
    for _ in 0..3 {
        ids.push(create(&app, &task_def(&tq)).await);
    }
    let claimed = claim_one(&app, &tq, "wg", "wi").await;
    let claimed_id = claimed["status"]["taskId"].as_str().unwrap_or_default();
    complete(&app, claimed_id, 0).await;
    assert!(
        broker.rest(&all, Duration::from_secs(1)).await.is_empty(),
        "nothing can arrive while the broker is unreachable"
    );
    // Each task notes since when its events wait (what the sweeper's figure reads): in the
    // events the stream publisher held, or, publishing from the outboxes, in its record.
    let held = || async {
        let queue = app.domain_queue().await;
        let store = queue.store.as_ref();
        let held = held_records::<TaskRecord>(store, 100)
            .await
            .unwrap_or_default();
        let mut n = 0;
        for id in &ids {
            let item = store.get("tasks", id, "status").await.ok().flatten();
            let noted = item.is_some_and(|i| i.data.get("heldSince").is_some());
            n += usize::from(noted || held.contains(id));
        }
        n
    };
    poll(
        Duration::from_secs(10),
        "every task's events held",
        || async { (held().await == ids.len()).then_some(()) },
    )
    .await;
    relay.set(true);
    // 3 × (defined, pending) + running + completed, and the completed task's group resolved.
    let got = broker.take(&all, 9, Duration::from_secs(30)).await;
    let groups: Vec<&str> = got
        .iter()
        .filter(|m| broker.short(m) == "task-group-resolved")
        .filter_map(|m| m.payload["taskGroupId"].as_str())
        .collect();
    assert_eq!(groups, vec![claimed_id]);
    for id in &ids {
        let names = broker.names_of(&got, id);
        let mut want = vec!["task-defined", "task-pending"];
        if id == claimed_id {
            want.extend(["task-running", "task-completed"]);
        }
        assert_eq!(names, want, "order per task is kept for {id}");
    }
    poll(
        Duration::from_secs(10),
        "nothing held once delivered",
        || async { (held().await == 0).then_some(()) },
    )
    .await;
    broker.cleanup().await;
}

/// The server process body for the kill test; only runs when re-executed by
/// `spawn_child_server`.
#[ignore]
#[test]
fn amqp_child_server() {
    blackbox::run_child_server()
}

async fn child(dir: &Path, url: &str, prefix: &str) -> (std::process::Child, String) {
    let port = free_port();
    let envs = [
        ("TCQ_AMQP_URL", url.to_string()),
        ("TCQ_EXCHANGE_PREFIX", prefix.to_string()),
    ];
    let child = spawn_child_server("amqp::amqp_child_server", dir, port, &envs);
    let root = format!("http://127.0.0.1:{port}");
    assert!(
        wait_until_up(&root, Duration::from_secs(30)).await,
        "child server did not come up"
    );
    (child, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_a_killed_publisher_arrive_after_restart() {
    let broker = Broker::connect().await;
    let relay = Relay::start(false).await;
    let all = broker.bind(&ALL, "#").await;
    let dir = tempfile::tempdir().expect("dir");
    let tq = task_queue_id();

    // Events pile up in the outbox while the broker is unreachable; then SIGKILL.
    let (mut first, root) = child(dir.path(), &relay.url(), &broker.prefix).await;
    let q = queue_client(&root);
    let mut ids = vec![];
    for _ in 0..5 {
        let id = slugid();
        q.createTask(&id, &task_def(&tq)).await.expect("create");
        ids.push(id);
    }
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    assert!(broker
        .rest(&all, Duration::from_millis(500))
        .await
        .is_empty());

    // The restarted server finds the outbox and delivers all of it.
    relay.set(true);
    let (mut second, _) = child(dir.path(), &relay.url(), &broker.prefix).await;
    let got = broker.take(&all, 10, Duration::from_secs(30)).await;
    for id in &ids {
        let names = broker.names_of(&got, id);
        assert_eq!(names, ["task-defined", "task-pending"], "{id}");
    }
    let _ = second.kill();
    let _ = second.wait();
    broker.cleanup().await;
}

/// Two local servers over one data directory: one of them follows the store's change log
/// at a time, so each event is published once, whichever server made the change; killed, the
/// holder is succeeded once its hold runs out (shared::jobs::follow::HOLD_FOR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_store_publish_each_event_once() {
    if on_localstack() {
        // Over DynamoDB the local server keeps the outbox mode: no change log to hold.
        eprintln!("the change log is the embedded store's");
        return;
    }
    let broker = Broker::connect().await;
    let all = broker.bind(&ALL, "#").await;
    let dir = tempfile::tempdir().expect("dir");
    let envs = [
        ("TCQ_AMQP_URL", amqp_url(&broker_addr())),
        ("TCQ_EXCHANGE_PREFIX", broker.prefix.clone()),
    ];
    // One after the other: the first writes the data directory's credentials.
    let name = "amqp::amqp_child_server";
    let mut a = ChildServer::start(name, dir.path(), &envs).await;
    let b = ChildServer::start(name, dir.path(), &envs).await;
    let tq = task_queue_id();
    let (qa, qb) = (queue_client(&a.root), queue_client(&b.root));
    let mut ids = vec![];
    for i in 0..6 {
        let id = slugid();
        let q = if i % 2 == 0 { &qa } else { &qb };
        q.createTask(&id, &task_def(&tq)).await.expect("create");
        ids.push(id);
    }
    let got = broker.take(&all, 12, Duration::from_secs(30)).await;
    let extra = broker.rest(&all, Duration::from_millis(2_500)).await;
    assert!(extra.is_empty(), "published twice: {extra:#?}");
    for id in &ids {
        assert_eq!(broker.names_of(&got, id), ["task-defined", "task-pending"]);
    }
    // Either may hold the log: once one is killed, the other publishes everything.
    a.kill();
    let first = ids.len();
    for _ in 0..3 {
        let id = slugid();
        qb.createTask(&id, &task_def(&tq)).await.expect("create");
        ids.push(id);
    }
    let got = broker.take(&all, 6, Duration::from_secs(30)).await;
    for id in &ids[first..] {
        assert_eq!(broker.names_of(&got, id), ["task-defined", "task-pending"]);
    }
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_changes_and_artifacts_reach_consumers() {
    let broker = Broker::connect().await;
    let app = server_publishing_to(amqp_url(&broker_addr()), &broker.prefix).await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = slugid();
    let mine = broker.bind(&ALL, &format!("primary.{id}.#")).await;
    q.createTask(&id, &task_def(&tq)).await.expect("create");
    q.changeTaskPriority(&id, &json!({ "newPriority": "highest" }))
        .await
        .expect("changeTaskPriority");
    claim_one(&app, &tq, "wg", "wi").await;
    let reference = json!({
        "storageType": "reference", "url": "https://example.com/log.txt",
        "contentType": "text/plain", "expires": ts(3_600_000)
    });
    q.createArtifact(&id, "0", "public/log.txt", &reference)
        .await
        .expect("createArtifact");

    let got = broker.take(&mine, 5, Duration::from_secs(20)).await;
    let names: Vec<&str> = got.iter().map(|m| broker.short(m)).collect();
    assert_eq!(
        names,
        [
            "task-defined",
            "task-pending",
            "task-priority-changed",
            "task-running",
            "artifact-created"
        ]
    );
    for m in &got {
        let schema = format!("{}-message", broker.short(m));
        if let Err(e) = shared::schema::check(&schema, &m.payload) {
            panic!("{schema}: {e:?} in {m:#?}");
        }
    }
    assert_eq!(got[2].payload["newPriority"], "highest");
    assert_eq!(got[2].payload["oldPriority"], "lowest");
    let artifact = &got[4];
    assert_eq!(artifact.payload["artifact"]["name"], "public/log.txt");
    assert_eq!(artifact.payload["artifact"]["storageType"], "reference");
    let words: Vec<&str> = artifact.routing_key.split('.').collect();
    assert_eq!(&words[1..5], [id.as_str(), "0", "wg", "wi"]);
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_group_messages_reach_consumers() {
    let broker = Broker::connect().await;
    let app = server_publishing_to(amqp_url(&broker_addr()), &broker.prefix).await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let groups = broker
        .bind(
            &[
                "task-group-priority-changed",
                "task-group-sealed",
                "task-group-resolved",
            ],
            &format!("primary.{group}.#"),
        )
        .await;
    let in_group = def_with(&tq, json!({ "taskGroupId": group, "routes": ["r.one"] }));
    for _ in 0..2 {
        create(&app, &in_group).await;
    }
    q.changeTaskGroupPriority(&group, &json!({ "newPriority": "high" }))
        .await
        .expect("changeTaskGroupPriority");
    q.sealTaskGroup(&group).await.expect("seal");
    q.cancelTaskGroup(&group).await.expect("cancel");
    let mut got = broker.take(&groups, 3, Duration::from_secs(20)).await;
    // Order holds per task; these travel in different tasks' outboxes.
    let rank = |m: &Msg| match broker.short(m) {
        "task-group-priority-changed" => 0,
        "task-group-sealed" => 1,
        "task-group-resolved" => 2,
        other => panic!("unexpected {other}"),
    };
    got.sort_by_key(|m| rank(m));
    let names: Vec<&str> = got.iter().map(|m| broker.short(m)).collect();
    assert_eq!(
        names,
        [
            "task-group-priority-changed",
            "task-group-sealed",
            "task-group-resolved"
        ]
    );
    for m in &got {
        assert_eq!(m.routing_key, format!("primary.{group}.-._"));
        assert!(m.cc.is_empty(), "group messages carry no CCs: {m:?}");
        assert!(m.persistent);
        assert_eq!(m.content_type, "application/json");
        assert_eq!(m.payload["taskGroupId"], group.as_str());
        assert_eq!(m.payload["schedulerId"], "-");
        shared::schema::check(&format!("{}-message", broker.short(m)), &m.payload).unwrap();
    }
    assert_eq!(got[0].payload["tasksAffected"], 2);
    assert_eq!(got[0].payload["newPriority"], "high");
    assert!(got[1].payload["sealed"].is_string());
    assert_eq!(got[2].payload["sealed"], got[1].payload["sealed"]);
    assert!(broker
        .rest(&groups, Duration::from_millis(500))
        .await
        .is_empty());
    broker.cleanup().await;
}

/// The values of `queue_unpublished_event_age_seconds` the deployed shape's functions printed
/// for `job`, in the order of their lines.
fn unpublished_ages(logs: &Path, job: &str) -> Vec<f64> {
    let mut out = vec![];
    let Ok(dir) = std::fs::read_dir(logs) else {
        return out;
    };
    for entry in dir.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(doc) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if doc["job"] == job {
                if let Some(v) = doc[shared::metrics::UNPUBLISHED_AGE.name].as_f64() {
                    out.push(v);
                }
            }
        }
    }
    out
}

/// A broker outage longer than the publisher's stream retries, as deployed (the retries cut to
/// 2 through `PublisherStreamRetries`, as the template allows): the stream holds the batches'
/// events for the sweeper rather than retrying them, the outbox sweeper says how long they have waited
/// (`queue_unpublished_event_age_seconds`, which `HeldEventsAlarm` watches) and delivers every
/// one once the broker is back, in order per task; then it reports 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_outlast_a_broker_outage_longer_than_the_streams_retries() {
    if !in_shape() {
        eprintln!("the stream's retries and the sweeper's figure are the deployed shape's");
        return;
    }
    let broker = Broker::connect().await;
    let relay = Relay::start(true).await;
    let (url, prefix) = (relay.url(), broker.prefix.clone());
    let app = spawn_shape_alone_with(&[("PublisherStreamRetries", "2")], move |c| {
        c.amqp_url = Some(url);
        c.queue.exchange_prefix = prefix;
        // Keeps the functions' output, with their EMF lines.
        c.metrics_port = Some(0);
    })
    .await;
    let logs = app.function_logs().expect("the functions' output is kept");
    let all = broker.bind(&ALL, "#").await;
    relay.set(false);
    let outage = std::time::Instant::now();
    let tq = task_queue_id();
    let mut ids = vec![];
    for _ in 0..5 {
        ids.push(create(&app, &task_def(&tq)).await);
    }
    let claimed = claim_one(&app, &tq, "wg", "wi").await;
    let claimed_id = claimed["status"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    complete(&app, &claimed_id, 0).await;
    // Every task's events are held for the sweeper.
    let queue = app.domain_queue().await;
    poll(
        Duration::from_secs(60),
        "every task's events held",
        || async {
            let store = queue.store.as_ref();
            let held = held_records::<TaskRecord>(store, 100).await.ok()?;
            ids.iter().all(|id| held.contains(id)).then_some(())
        },
    )
    .await;
    // The sweeper fails too, and says how long the oldest has waited.
    let waited = poll(Duration::from_secs(90), "the sweeper's figure", || async {
        unpublished_ages(&logs, "outboxSweeper")
            .into_iter()
            .find(|v| *v > 0.0)
    })
    .await;
    let publisher = unpublished_ages(&logs, "publisher");
    assert!(
        publisher.iter().any(|v| *v > 0.0),
        "the stream publisher reported its failed batches: {publisher:?}"
    );
    assert!(
        waited <= outage.elapsed().as_secs_f64(),
        "waited {waited} s, within the outage's {:?}",
        outage.elapsed()
    );
    assert!(
        broker
            .rest(&all, Duration::from_millis(500))
            .await
            .is_empty(),
        "nothing arrives while the broker is unreachable"
    );
    let down_for = outage.elapsed();
    relay.set(true);
    // 5 × (defined, pending) + running + completed, and the completed task's group resolved.
    let got = broker.take(&all, 13, Duration::from_secs(120)).await;
    for id in &ids {
        let names = broker.names_of(&got, id);
        let mut want = vec!["task-defined", "task-pending"];
        if *id == claimed_id {
            want.extend(["task-running", "task-completed"]);
        }
        assert_eq!(names, want, "every event of {id}, in order");
    }
    assert!(
        broker.rest(&all, Duration::from_secs(1)).await.is_empty(),
        "no event twice"
    );
    // Once delivered, nothing waits: the sweeper's figure goes back to 0.
    poll(
        Duration::from_secs(90),
        "the sweeper's figure back to 0",
        || async {
            let ages = unpublished_ages(&logs, "outboxSweeper");
            let last_positive = ages.iter().rposition(|v| *v > 0.0)?;
            ages[last_positive..].contains(&0.0).then_some(())
        },
    )
    .await;
    eprintln!(
        "broker unreachable for {down_for:?}: the sweeper reported events waiting {waited:.1} s; \
         all 13 events delivered after"
    );
    broker.cleanup().await;
}
