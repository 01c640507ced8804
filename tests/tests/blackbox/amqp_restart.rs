//! RabbitMQ itself restarts (`rabbitmqctl stop_app` / `start_app`) while the queue works: API
//! calls keep succeeding, events wait in the outbox, and after the restart every one arrives.
//! The broker is the machine's, so no other test may run while it is down: the test is
//! ignored in the suite's run and `scripts/test.sh` runs it alone afterwards.

use crate::common::*;
use blackbox::amqp::*;
use blackbox::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn rabbitmqctl(what: &str) {
    let out = Command::new("rabbitmqctl")
        .arg(what)
        .output()
        .expect("rabbitmqctl runs (scripts/rabbitmq.sh installs RabbitMQ)");
    assert!(out.status.success(), "rabbitmqctl {what}: {out:?}");
}

/// Starts the broker's application again however the test ends.
struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl").arg("start_app").output();
    }
}

fn accepting() -> bool {
    std::net::TcpStream::connect_timeout(
        &broker_addr().parse().expect("broker address"),
        Duration::from_millis(500),
    )
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "restarts the machine's RabbitMQ: scripts/test.sh runs it alone"]
async fn a_broker_restart_delays_events_but_loses_none() {
    let broker = Broker::connect().await;
    let queue = format!("tcq-restart-{}", slugid());
    broker.bind_durable(&ALL, "primary.#", &queue).await;
    let prefix = broker.prefix.clone();
    let app = spawn_app_with({
        let prefix = prefix.clone();
        move |c| {
            c.amqp_url = Some(amqp_url(&broker_addr()));
            c.queue.exchange_prefix = prefix;
        }
    })
    .await;
    let q = app.queue();
    let tq = task_queue_id();
    let before = create(&app, &task_def(&tq)).await;
    let got = broker.take(&queue, 2, Duration::from_secs(20)).await;
    assert!(got
        .iter()
        .all(|m| m.payload["status"]["taskId"] == before.as_str()));
    drop(broker);

    let _restart = Restart;
    rabbitmqctl("stop_app");
    // The broker is down: the API still answers, and events wait in outboxes.
    let during = create(&app, &task_def(&tq)).await;
    let cancelled = create(&app, &task_def(&tq)).await;
    q.cancelTask(&cancelled)
        .await
        .expect("cancel while the broker is down");
    tokio::time::sleep(Duration::from_secs(2)).await;
    rabbitmqctl("start_app");
    let until = Instant::now() + Duration::from_secs(60);
    while !accepting() {
        assert!(Instant::now() < until, "RabbitMQ did not come back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // defined + pending for one task; defined + pending + exception and the group's
    // task-group-resolved for the other: all delivered once the publisher reconnects.
    let consumer = Broker::with_prefix(&prefix).await;
    let got = consumer.take(&queue, 6, Duration::from_secs(90)).await;
    let mut seen: Vec<(String, String)> = got
        .iter()
        .map(|m| {
            let id = m.payload["status"]["taskId"]
                .as_str()
                .or(m.payload["taskGroupId"].as_str())
                .unwrap_or_default()
                .to_string();
            (id, consumer.short(m).to_string())
        })
        .collect();
    seen.sort();
    let mut want = vec![
        (during.clone(), "task-defined".to_string()),
        (during.clone(), "task-pending".to_string()),
        (cancelled.clone(), "task-defined".to_string()),
        (cancelled.clone(), "task-pending".to_string()),
        (cancelled.clone(), "task-exception".to_string()),
        (cancelled.clone(), "task-group-resolved".to_string()),
    ];
    want.sort();
    assert_eq!(seen, want);
    for m in &got {
        assert!(
            m.persistent,
            "persistent, so it survives the broker too: {m:?}"
        );
    }
    consumer.delete_queue(&queue).await;
    consumer.cleanup().await;
}
