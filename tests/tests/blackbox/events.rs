//! Published messages: exchanges, routing keys, CCs and payloads, each checked against the
//! message schemas.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use shared::events::Event;
use std::time::Duration;

const EXCHANGES: [&str; 11] = shared::routing::EXCHANGES;

/// The expected primary routing key; `None` words render as `_`.
fn key(
    id: &str,
    run: Option<u32>,
    worker: Option<(&str, &str)>,
    tq: &str,
    sched: &str,
    group: &str,
) -> String {
    let (prov, wt) = tq.split_once('/').unwrap();
    let run = run.map(|r| r.to_string()).unwrap_or("_".into());
    let (g, w) = worker.unwrap_or(("_", "_"));
    format!("primary.{id}.{run}.{g}.{w}.{prov}.{wt}.{sched}.{group}._")
}

/// Every task message's routing key has the ten words, within upstream's word sizes.
fn assert_well_formed(e: &Event) {
    assert!(
        EXCHANGES.contains(&short_name(e)),
        "unknown exchange {}",
        e.exchange
    );
    assert!(e.exchange.starts_with("exchange/taskcluster-queue/v1/"));
    let words: Vec<&str> = e.routing_key.split('.').collect();
    if short_name(e).starts_with("task-group") {
        assert_eq!(words.len(), 4, "{}", e.routing_key);
        return;
    }
    assert_eq!(words.len(), 10, "{}", e.routing_key);
    assert_eq!(words[0], "primary");
    assert_eq!(words[9], "_");
    for (w, max) in words[1..9].iter().zip([22, 3, 38, 38, 38, 38, 38, 22]) {
        assert!(
            !w.is_empty() && w.len() <= max,
            "word {w:?} in {}",
            e.routing_key
        );
    }
    assert_eq!(e.payload["version"], 1);
    let status = &e.payload["status"];
    assert_eq!(words[1], status["taskId"]);
    match e.payload.get("runId") {
        Some(r) => assert_eq!(words[2], r.to_string()),
        None => assert_eq!(words[2], "_"),
    }
    match (e.payload.get("workerGroup"), e.payload.get("workerId")) {
        (Some(g), Some(w)) => {
            assert_eq!(words[3], g.as_str().unwrap());
            assert_eq!(words[4], w.as_str().unwrap());
        }
        _ => assert_eq!((words[3], words[4]), ("_", "_"), "{}", e.routing_key),
    }
    assert_eq!(words[5], status["provisionerId"]);
    assert_eq!(words[6], status["workerType"]);
    assert_eq!(words[7], status["schedulerId"]);
    assert_eq!(words[8], status["taskGroupId"]);
}

fn assert_all_events_valid(app: &TestServer) {
    let n = assert_event_schemas(app);
    assert!(n > 0);
    for e in app.events() {
        assert_well_formed(&e);
        assert_dates(&e.payload);
    }
}

fn one(events: &[Event], short: &str) -> Event {
    let matching: Vec<&Event> = events.iter().filter(|e| short_name(e) == short).collect();
    assert_eq!(matching.len(), 1, "expected one {short}: {events:#?}");
    matching[0].clone()
}

#[tokio::test]
async fn a_life_cycle_publishes_defined_pending_running_completed() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let (id, group) = (slugid(), slugid());
    let routes = [
        "index.project.latest",
        "notify.email.someone@example.com.on-completed",
    ];
    let tags = json!({"purpose": "events", "kind": "test"});
    let def = def_with(
        &tq,
        json!({"routes": routes, "tags": tags, "schedulerId": "my-sched", "taskGroupId": group}),
    );
    let created = q.createTask(&id, &def).await.unwrap();
    let claim = claim_one(&app, &tq, "wg-1", "wid-1").await;
    q.reclaimTask(&id, "0").await.unwrap();
    let done = q.reportCompleted(&id, "0").await.unwrap();
    wait_events(&app, &id, "task-completed", Some(0), 1).await;
    // reclaimTask publishes nothing; the rest arrive in order.
    let events = events_of(&app, &id);
    let names: Vec<&str> = events.iter().map(short_name).collect();
    assert_eq!(
        names,
        [
            "task-defined",
            "task-pending",
            "task-running",
            "task-completed"
        ]
    );
    let ccs: Vec<String> = routes.iter().map(|r| format!("route.{r}")).collect();
    for e in &events {
        assert_eq!(e.cc, ccs, "{} CCs every task route", e.exchange);
        assert_eq!(e.payload["task"], json!({ "tags": tags }));
        assert_eq!(e.exchange, exchange(short_name(e)));
    }

    let defined = one(&events, "task-defined");
    assert_eq!(
        defined.exchange,
        "exchange/taskcluster-queue/v1/task-defined"
    );
    assert_eq!(
        defined.routing_key,
        key(&id, None, None, &tq, "my-sched", &group)
    );
    assert_eq!(defined.payload["status"], created["status"]);
    assert!(defined.payload.get("runId").is_none());

    let pending = one(&events, "task-pending");
    assert_eq!(
        pending.routing_key,
        key(&id, Some(0), None, &tq, "my-sched", &group)
    );
    assert_eq!(pending.payload["runId"], 0);
    assert_eq!(pending.payload["status"], created["status"]);
    assert!(pending.payload.get("workerId").is_none());

    let running = one(&events, "task-running");
    assert_eq!(
        running.routing_key,
        key(
            &id,
            Some(0),
            Some(("wg-1", "wid-1")),
            &tq,
            "my-sched",
            &group
        )
    );
    assert_eq!(running.payload["runId"], 0);
    assert_eq!(running.payload["workerGroup"], "wg-1");
    assert_eq!(running.payload["workerId"], "wid-1");
    assert_eq!(running.payload["takenUntil"], claim["takenUntil"]);
    assert_eq!(running.payload["status"], claim["status"]);

    let completed = one(&events, "task-completed");
    assert_eq!(
        completed.routing_key,
        key(
            &id,
            Some(0),
            Some(("wg-1", "wid-1")),
            &tq,
            "my-sched",
            &group
        )
    );
    assert_eq!(completed.payload["status"], done["status"]);
    assert_eq!(completed.payload["workerId"], "wid-1");

    assert_all_events_valid(&app);
}

#[tokio::test]
async fn failures_and_exceptions_publish_with_the_worker_words() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let failed = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    let f = q.reportFailed(&failed, "0").await.unwrap();
    let ev = wait_events(&app, &failed, "task-failed", Some(0), 1).await;
    assert_eq!(
        ev[0].routing_key,
        key(&failed, Some(0), Some(("g", "w")), &tq, "-", &failed)
    );
    assert_eq!(ev[0].payload["status"], f["status"]);
    assert!(ev[0].cc.is_empty(), "no routes, no CCs");

    let exc = create(&app, &def_with(&tq, json!({"retries": 1}))).await;
    claim_one(&app, &tq, "g", "w").await;
    let r = q
        .reportException(&exc, "0", &json!({"reason": "worker-shutdown"}))
        .await
        .unwrap();
    let ev = wait_events(&app, &exc, "task-exception", Some(0), 1).await;
    assert_eq!(
        ev[0].routing_key,
        key(&exc, Some(0), Some(("g", "w")), &tq, "-", &exc)
    );
    assert_eq!(
        ev[0].payload["status"]["runs"][0]["reasonResolved"],
        "worker-shutdown"
    );
    // The retry run is announced as pending, without worker words.
    let p = wait_events(&app, &exc, "task-pending", Some(1), 1).await;
    assert_eq!(p[0].routing_key, key(&exc, Some(1), None, &tq, "-", &exc));
    assert_eq!(p[0].payload["status"], r["status"]);
    assert_all_events_valid(&app);
}

#[tokio::test]
async fn cancel_publishes_task_exception() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let pending = create(&app, &def_with(&tq, json!({"routes": ["r.one"]}))).await;
    let c = q.cancelTask(&pending).await.unwrap();
    let ev = wait_events(&app, &pending, "task-exception", Some(0), 1).await;
    assert_eq!(
        ev[0].routing_key,
        key(&pending, Some(0), None, &tq, "-", &pending)
    );
    assert_eq!(ev[0].cc, ["route.r.one"]);
    assert_eq!(ev[0].payload["status"], c["status"]);

    let unscheduled = slugid();
    q.createTask(
        &unscheduled,
        &def_with(&tq, json!({"dependencies": [unscheduled]})),
    )
    .await
    .unwrap();
    q.cancelTask(&unscheduled).await.unwrap();
    let ev = wait_events(&app, &unscheduled, "task-exception", Some(0), 1).await;
    assert_eq!(
        ev[0].payload["status"]["runs"][0]["reasonCreated"],
        "exception"
    );
    assert_eq!(
        names_of(&app, &unscheduled),
        ["task-defined", "task-exception"]
    );
    assert_all_events_valid(&app);
}

#[tokio::test]
async fn priority_changes_are_published() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let r = q
        .changeTaskPriority(&id, &json!({"newPriority": "very-high"}))
        .await
        .unwrap();
    let ev = wait_events(&app, &id, "task-priority-changed", None, 1).await;
    assert_eq!(ev[0].payload["oldPriority"], "lowest");
    assert_eq!(ev[0].payload["newPriority"], "very-high");
    assert_eq!(ev[0].payload["status"], r["status"]);
    assert_eq!(ev[0].exchange, exchange("task-priority-changed"));
    assert_all_events_valid(&app);
}

#[tokio::test]
async fn claim_expiry_publishes_exception_and_pending() {
    let app = spawn_app_with(|c| c.queue.claim_timeout_secs = 1).await;
    let tq = task_queue_id();
    let id = create(
        &app,
        &def_with(&tq, json!({"retries": 1, "tags": {"a": "b"}})),
    )
    .await;
    claim_one(&app, &tq, "g", "w").await;
    let exc = wait_events(&app, &id, "task-exception", Some(0), 1).await;
    assert_eq!(
        exc[0].payload["status"]["runs"][0]["reasonResolved"],
        "claim-expired"
    );
    assert_eq!(exc[0].payload["task"]["tags"], json!({"a": "b"}));
    let pending = wait_events(&app, &id, "task-pending", Some(1), 1).await;
    assert_eq!(
        pending[0].payload["status"]["runs"][1]["reasonCreated"],
        "retry"
    );
    assert_all_events_valid(&app);
}

#[tokio::test]
async fn every_message_of_a_busy_queue_matches_its_schema() {
    // Long enough for the resolutions below to land first, even on a loaded LocalStack.
    let app = spawn_app_with(|c| c.queue.claim_timeout_secs = 15).await;
    let q = app.queue();
    let tq = task_queue_id();
    let group = slugid();
    let mk = |extra: Value| {
        let mut d = def_with(&tq, json!({"taskGroupId": group, "routes": ["a.b", "c"]}));
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        d
    };
    // A mix of every transition.
    let ids: Vec<String> = {
        let mut v = vec![];
        for p in ["high", "lowest", "medium", "low", "lowest", "very-low"] {
            v.push(create(&app, &mk(json!({"priority": p, "retries": 1}))).await);
        }
        v
    };
    let defined = slugid();
    let (code, _) = raw(
        &app,
        "POST",
        &format!("/task/{defined}/define"),
        Some(&mk(json!({}))),
    )
    .await;
    assert_eq!(code, 200);
    q.scheduleTask(&defined).await.unwrap();
    q.changeTaskPriority(&ids[1], &json!({"newPriority": "highest"}))
        .await
        .unwrap();
    let r = q.claimWork(&tq, &worker("g", "w", 5)).await.unwrap();
    let claimed: Vec<(String, String)> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["status"]["taskId"].as_str().unwrap().to_string(),
                t["runId"].to_string(),
            )
        })
        .collect();
    assert_eq!(claimed.len(), 5);
    q.reportCompleted(&claimed[0].0, &claimed[0].1)
        .await
        .unwrap();
    q.reportFailed(&claimed[1].0, &claimed[1].1).await.unwrap();
    q.reportException(
        &claimed[2].0,
        &claimed[2].1,
        &json!({"reason": "intermittent-task"}),
    )
    .await
    .unwrap();
    q.reportException(
        &claimed[3].0,
        &claimed[3].1,
        &json!({"reason": "resource-unavailable"}),
    )
    .await
    .unwrap();
    // claimed[4] is left to expire.
    q.rerunTask(&claimed[0].0).await.unwrap();
    let unclaimed: Vec<&String> = ids
        .iter()
        .chain([&defined])
        .filter(|id| !claimed.iter().any(|(c, _)| c == *id))
        .collect();
    q.cancelTask(unclaimed[0]).await.unwrap();
    wait_status(&app, &claimed[4].0, Duration::from_secs(60), |s| {
        s["runs"].as_array().is_some_and(|r| r.len() == 2)
    })
    .await;
    wait_events(&app, &claimed[4].0, "task-pending", Some(1), 1).await;

    // The group's events (a deployed-shape stack may carry other tests' too).
    let ours = |e: &Event| {
        e.payload["status"]["taskGroupId"] == group.as_str()
            || e.payload["taskGroupId"] == group.as_str()
    };
    let events: Vec<Event> = app.events().into_iter().filter(ours).collect();
    let kinds: std::collections::HashSet<&str> = events.iter().map(short_name).collect();
    for k in [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
        "task-failed",
        "task-exception",
        "task-priority-changed",
    ] {
        assert!(kinds.contains(k), "no {k} message among {kinds:?}");
    }
    for e in &events {
        if !short_name(e).starts_with("task-group") {
            assert_eq!(e.cc, ["route.a.b", "route.c"], "{}", e.exchange);
        }
    }
    assert_all_events_valid(&app);
}

/// Every exchange of every enabled layout (the queue's, the scheduler's, the legacy one)
/// exists before the first task, so that a consumer that binds at start-up, as every Pulse
/// consumer does, finds it: the local server declares them as it starts; as deployed, the
/// `exchangeDeclarer` job does within its first firing (a minute, sped up here). The two
/// layouts with prefixes get prefixes of their own, absent before; the legacy exchanges'
/// names are fixed, so another test's server may have declared them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exchange_exists_before_the_first_task() {
    use blackbox::amqp::{delete_exchanges, exchange_exists};
    use shared::routing::{LEGACY_EXCHANGES, SCHEDULER_EXCHANGES};
    use std::time::Instant;
    let slug = slugid().to_lowercase();
    let prefix = format!("exchange/tcq-test-{slug}/queue/v1/");
    let sched_prefix = format!("exchange/tcq-test-{slug}/scheduler/v1/");
    let own: Vec<String> = EXCHANGES
        .iter()
        .map(|x| format!("{prefix}{x}"))
        .chain(
            SCHEDULER_EXCHANGES
                .iter()
                .map(|x| format!("{sched_prefix}{x}")),
        )
        .collect();
    let legacy: Vec<String> = LEGACY_EXCHANGES.iter().map(|x| x.to_string()).collect();
    for name in &own {
        assert!(
            !exchange_exists(name).await,
            "{name} exists before the start"
        );
    }
    let started = Instant::now();
    // The shape's own stack: the shared stacks' event recorder declares their exchanges.
    let (shape, _app, within) = if in_shape() {
        let tag: String = slug
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(10)
            .collect();
        let stack = format!("tcq-x{tag}");
        let mut sc = blackbox::shape::ShapeConfig::defaults(&stack);
        sc.delete_on_stop = true;
        sc.speedup = 20.0;
        sc.parameters = vec![
            ("ExchangePrefix".into(), prefix.clone()),
            ("SchedulerExchangePrefix".into(), sched_prefix.clone()),
        ];
        sc.env.insert("TCQ_LEGACY_EXCHANGES".into(), "true".into());
        sc.env
            .insert("TCQ_ROOT_ACCESS_TOKEN".into(), ROOT_ACCESS_TOKEN.into());
        let shape = blackbox::shape::Shape::start(sc)
            .await
            .expect("the deployed shape starts");
        // From when the functions run: the job's minute, sped up, and its cold start (a debug
        // instance on a busy machine: CI failed once at 10 s, with its tables and streams
        // taking part of those to create).
        let within =
            started.elapsed() + Duration::from_secs_f64(60.0 / 20.0) + Duration::from_secs(20);
        (Some(shape), None, within)
    } else {
        let (p, s) = (prefix.clone(), sched_prefix.clone());
        let app = spawn_app_with(move |c| {
            c.amqp_url = Some(blackbox::amqp::amqp_url(&blackbox::amqp::broker_addr()));
            c.queue.exchange_prefix = p;
            c.queue.scheduler_exchange_prefix = s;
            c.queue.legacy_exchanges = true;
        })
        .await;
        (None, Some(app), Duration::from_secs(10))
    };
    let mut missing: Vec<&String> = own.iter().chain(&legacy).collect();
    while !missing.is_empty() && started.elapsed() < within {
        let mut still = vec![];
        for name in missing {
            if !exchange_exists(name).await {
                still.push(name);
            }
        }
        missing = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    assert!(
        missing.is_empty(),
        "not declared after {took:?}: {missing:?}"
    );
    eprintln!("every exchange declared {took:?} after the start");
    // A consumer binds to each, with no task created.
    let broker = blackbox::amqp::Broker::with_prefix("").await;
    let names: Vec<&str> = own.iter().chain(&legacy).map(String::as_str).collect();
    broker.bind(&names, "#").await;
    if let Some(shape) = shape {
        shape.stop().await;
    }
    delete_exchanges(&own).await;
}
