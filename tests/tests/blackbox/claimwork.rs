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
    // In the deployed shape createTask and claimWork are different functions (processes):
    // the wake-up crosses processes through the broker.
    let bound = Duration::from_secs(if in_shape() { 2 } else { 30 });
    assert!(
        latency < bound,
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

/// The server process body for the cross-process tests; only runs when re-executed by
/// `spawn_child_server`.
#[ignore]
#[test]
fn claim_work_child_server() {
    blackbox::run_child_server()
}

/// As deployed, createTask and claimWork run in different processes, where this process's
/// signal never reaches. A claimWork waiting in one server is answered within 2 s of a
/// createTask in another server over the same store: with wake-ups through the broker, and
/// without a broker by re-reading the index. (The pickup figures are the `pickup` bench's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_work_waiting_in_another_process_gets_a_new_task_within_2_s() {
    if not_in_shape("starts server processes of its own") {
        return;
    }
    for broker in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut envs = vec![("TCQ_CLAIM_WORK_TIMEOUT_MS", "30000".to_string())];
        if broker {
            envs.push(("TCQ_AMQP_URL", amqp::amqp_url(&amqp::broker_addr())));
            envs.push((
                "TCQ_EXCHANGE_PREFIX",
                format!("exchange/tcq-test-{}/v1/", slugid()),
            ));
        }
        // One after the other: the first writes the data directory's credentials.
        let name = "claimwork::claim_work_child_server";
        let a = ChildServer::start(name, dir.path(), &envs).await;
        let b = ChildServer::start(name, dir.path(), &envs).await;
        let (creator, claimer) = (a.root.clone(), b.root.clone());
        let tq = task_queue_id();
        let waiting = {
            let q = queue_client(&claimer);
            let tq = tq.clone();
            tokio::spawn(async move {
                let r = q.claimWork(&tq, &worker("g", "w", 1)).await;
                (r, Instant::now())
            })
        };
        // Long enough for the waiter to be past its first reads and bound to its wake-ups.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(!waiting.is_finished(), "claimWork should still be waiting");
        let id = slugid();
        queue_client(&creator)
            .createTask(&id, &task_def(&tq))
            .await
            .expect("createTask in the other process");
        let created_at = Instant::now();
        let (r, done_at) = waiting.await.unwrap();
        let r = r.expect("claimWork");
        let after = done_at.saturating_duration_since(created_at);
        assert_eq!(
            r["tasks"][0]["status"]["taskId"],
            id.as_str(),
            "broker: {broker}"
        );
        assert!(
            after < Duration::from_secs(2),
            "broker: {broker}: answered {after:?} after createTask returned"
        );
    }
}

/// Wake-ups through RabbitMQ: a notify in one process wakes a waiter of the same task queue
/// in another (two signals here, each with its own connection), not one of another queue.
#[tokio::test]
async fn a_wake_up_crosses_processes_through_the_broker() {
    use shared::signal::{amqp::AmqpSignal, WorkSignal};
    let url = amqp::amqp_url(&amqp::broker_addr());
    let prefix = format!("exchange/tcq-test-{}/v1/", slugid());
    let writer = AmqpSignal::start(url.clone(), &prefix);
    let linger = Duration::from_millis(300);
    let waiter = std::sync::Arc::new(AmqpSignal::start_with(url, &prefix, linger));
    let (tq, other) = (task_queue_id(), task_queue_id());
    let wait = |q: String| {
        let w = waiter.clone();
        let token = w.token(&q);
        tokio::spawn(async move {
            w.wait(&q, token, Duration::from_secs(20)).await;
            Instant::now()
        })
    };
    let (woken, not_woken) = (wait(tq.clone()), wait(other.clone()));
    // Bound once the waiter's connection is up.
    let until = Instant::now() + Duration::from_secs(10);
    while !waiter.crosses_processes(&tq) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(waiter.crosses_processes(&tq), "bound to its wake-ups");
    let sent = Instant::now();
    writer.notify(&tq);
    let at = tokio::time::timeout(Duration::from_secs(5), woken)
        .await
        .expect("woken through the broker")
        .unwrap();
    assert!(at.duration_since(sent) < Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !not_woken.is_finished(),
        "another task queue's waiter sleeps on"
    );
    // A cancelled wait (a request whose client went away) gives its binding up, once it has
    // lingered for the next wait.
    not_woken.abort();
    let until = Instant::now() + Duration::from_secs(5);
    while waiter.crosses_processes(&other) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !waiter.crosses_processes(&other),
        "unbound once nobody waits"
    );
}

/// Every waiting claimWork holds a function instance as deployed. With claimWork's
/// concurrency at 5, four calls may wait; further calls without work answer at once (not
/// after the 20 s wait, and not throttled), and creating, claiming and resolving tasks goes
/// on meanwhile. In the deployed shape the limit is the function's reserved concurrency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_work_at_its_concurrency_answers_at_once_and_the_rest_goes_on() {
    // The deployed wait (20 s): the calls in between go through cold starts in the deployed
    // shape, and must all happen while the four wait.
    let app = spawn_app_with(|c| {
        c.queue.claim_work_timeout_ms = 20_000;
        c.queue.claim_work_concurrency = Some(5);
    })
    .await;
    let (idle, busy) = (task_queue_id(), task_queue_id());
    let mut waiting = vec![];
    for i in 0..4 {
        let q = app.queue();
        let idle = idle.clone();
        waiting.push(tokio::spawn(async move {
            q.claimWork(&idle, &worker("g", &format!("idle{i}"), 1))
                .await
        }));
        // One at a time, so each finds the others' slots taken and a free one.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Until the last has taken its slot: in the shape, through a cold start (a loaded run
    // took longer than 500 ms, and an extra call got that slot and waited the 20 s).
    tokio::time::sleep(local_or_shape(
        Duration::from_millis(500),
        Duration::from_secs(4),
    ))
    .await;
    let q = app.queue();
    for i in 0..3 {
        let start = Instant::now();
        let r = q
            .claimWork(&idle, &worker("g", &format!("extra{i}"), 1))
            .await
            .expect("answered, not throttled");
        assert_eq!(r["tasks"], json!([]));
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "answered at once, not after the 20 s wait: {:?}",
            start.elapsed()
        );
    }
    // The rest of the queue works meanwhile; a claimWork that finds work needs no slot.
    let id = create(&app, &task_def(&busy)).await;
    let r = q.claimWork(&busy, &worker("g", "w", 1)).await.unwrap();
    assert_eq!(r["tasks"][0]["status"]["taskId"], id.as_str());
    let r = q.reportCompleted(&id, "0").await.expect("reportCompleted");
    assert_eq!(r["status"]["state"], "completed");
    for w in &waiting {
        assert!(!w.is_finished(), "the four waiting calls still wait");
    }
    // A task for the waiters goes to one of them.
    let id = create(&app, &task_def(&idle)).await;
    let mut got = 0;
    for w in waiting {
        let r = w.await.unwrap().unwrap();
        if r["tasks"][0]["status"]["taskId"] == id.as_str() {
            got += 1;
        }
    }
    assert_eq!(got, 1);
}
