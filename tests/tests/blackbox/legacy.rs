//! Seed 003's exchange layout (the legacy mode, `TCQ_LEGACY_EXCHANGES`), seen by a real
//! RabbitMQ consumer: one message per legacy exchange with the seven-word key, next to
//! today's messages, which stay the same with the mode on or off.
//!
//! The legacy exchanges have fixed names, so every binding here names this test's own task
//! ids or graph id: tests running at once never see each other's messages.

use crate::common::*;
use blackbox::amqp::*;
use blackbox::scheduler::*;
use blackbox::*;
use serde_json::{json, Value};
use std::time::Duration;

const PENDING: &str = "v1/queue:task-pending";
const RUNNING: &str = "v1/queue:task-running";
const COMPLETED: &str = "v1/queue:task-completed";
const FAILED: &str = "v1/queue:task-failed";

/// What one mode published: the legacy messages `(exchange, routing key, body)` and the
/// short names of today's messages about the plain task, in order.
struct Seen {
    legacy: Vec<(String, String, Value)>,
    /// The CC keys of each legacy message.
    ccs: Vec<Vec<String>>,
    today: Vec<String>,
}

async fn life_cycles(broker: &Broker, legacy: bool) -> (Seen, [String; 4], String, String) {
    let app = spawn_app_with(|c| {
        c.amqp_url = Some(amqp_url(&broker_addr()));
        c.queue.legacy_exchanges = legacy;
    })
    .await;
    let q = app.queue();
    let tq = task_queue_id();
    let (a, b, gid) = (slugid(), slugid(), slugid());
    let legacy_names: Vec<String> = shared::routing::LEGACY_EXCHANGES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let of_a = bind_full(broker, &legacy_names, &format!("{a}.#")).await;
    let of_b = bind_full(broker, &legacy_names, &format!("{b}.#")).await;
    let graph = bind_full(
        broker,
        &legacy_names,
        &format!("*.*.*.*.*.*.{SCHEDULER_ID}.{gid}.#"),
    )
    .await;
    let today = bind_full(broker, &queue_exchanges(), &format!("primary.{a}.#")).await;

    // a: completed; b: cancelled while pending; graph task A: completed.
    let routed = def_with(&tq, json!({ "routes": ["notify.legacy"] }));
    q.createTask(&a, &routed).await.expect("create a");
    claim_one(&app, &tq, "wg", "wi").await;
    complete(&app, &a, 0).await;
    q.createTask(&b, &task_def(&tq)).await.expect("create b");
    q.cancelTask(&b).await.expect("cancel b");
    let graph_tq = task_queue_id();
    let body = json!({
        "routing": "a.b.c",
        "metadata": {"name": "legacy", "description": "d", "owner": "o@example.com", "source": "https://example.com"},
        "tasks": {"A": node(&[], 0, task_def(&graph_tq))},
    });
    let created = Scheduler::root(&app).create(&gid, &body).await;
    assert_eq!(created.0, 200, "{:#}", created.1);
    let c = claim_one(&app, &graph_tq, "wg", "wi").await;
    let graph_task = c["status"]["taskId"].as_str().expect("taskId").to_string();
    complete(&app, &graph_task, 0).await;

    // In each queue: what the mode should publish, then anything more within a second.
    let mut got = vec![];
    for (queue, n) in [(&of_a, 3), (&of_b, 2), (&graph, 3)] {
        let n = if legacy { n } else { 0 };
        got.extend(broker.take(queue, n, Duration::from_secs(20)).await);
        got.extend(broker.rest(queue, Duration::from_secs(1)).await);
    }
    let seen_today = broker.rest(&today, Duration::from_secs(2)).await;
    let seen = Seen {
        ccs: got.iter().map(|m| m.cc.clone()).collect(),
        legacy: got
            .into_iter()
            .map(|m| (m.exchange.clone(), m.routing_key.clone(), m.payload.clone()))
            .collect(),
        today: seen_today.iter().map(|m| short(m).to_string()).collect(),
    };
    (seen, [a, b, graph_task, gid], tq, graph_tq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_mode_publishes_seed_003s_layout_beside_todays() {
    let broker = graph_broker().await;
    shared::events::amqp::declare_legacy_exchanges(&broker.ch)
        .await
        .expect("declare the legacy exchanges");

    let (on, [a, b, g, gid], tq, gtq) = life_cycles(&broker, true).await;
    let (p, wt) = tq.split_once('/').expect("task queue");
    let (gp, gwt) = gtq.split_once('/').expect("task queue");
    let keys: Vec<(&str, String)> = on
        .legacy
        .iter()
        .map(|(x, k, _)| (x.as_str(), k.clone()))
        .collect();
    // Word by word: taskId, runId, workerGroup, workerId, provisionerId, workerType, routing.
    let routing = format!("{SCHEDULER_ID}.{gid}");
    assert_eq!(
        keys,
        vec![
            (PENDING, format!("{a}._._._.{p}.{wt}._")),
            (RUNNING, format!("{a}.0.wg.wi.{p}.{wt}._")),
            (COMPLETED, format!("{a}.0.wg.wi.{p}.{wt}._")),
            (PENDING, format!("{b}._._._.{p}.{wt}._")),
            (FAILED, format!("{b}.0._._.{p}.{wt}._")),
            (PENDING, format!("{g}._._._.{gp}.{gwt}.{routing}.a.b.c")),
            (RUNNING, format!("{g}.0.wg.wi.{gp}.{gwt}.{routing}.a.b.c")),
            (COMPLETED, format!("{g}.0.wg.wi.{gp}.{gwt}.{routing}.a.b.c")),
        ]
    );
    for (exchange, _, body) in &on.legacy {
        let schema = shared::events::legacy::schema_name(exchange);
        shared::schema::check(&schema, body).unwrap_or_else(|e| panic!("{schema}: {e:?}"));
        assert_eq!(body["version"], 1);
    }
    // The task's routes are CC'ed on its legacy messages too.
    for cc in &on.ccs[..3] {
        assert_eq!(cc, &vec!["route.notify.legacy".to_string()]);
    }
    assert!(on.ccs[3].is_empty());
    let (_, _, running) = &on.legacy[1];
    assert_eq!(
        (&running["workerGroup"], &running["workerId"]),
        (&json!("wg"), &json!("wi"))
    );
    assert_eq!(running["status"]["state"], "running");
    let (_, _, failed) = &on.legacy[4];
    assert_eq!(failed["status"]["runs"][0]["reasonResolved"], "canceled");

    // Mode off: no legacy message; today's messages the same either way.
    let (off, ..) = life_cycles(&broker, false).await;
    assert!(off.legacy.is_empty(), "{:?}", off.legacy);
    assert_eq!(on.today, off.today);
    assert_eq!(
        on.today,
        vec![
            "task-defined",
            "task-pending",
            "task-running",
            "task-completed",
            "task-group-resolved"
        ]
    );
}
