//! Event delivery benchmark against the machine's RabbitMQ (127.0.0.1:5672, guest/guest).
//!
//! Run: `cargo bench -p blackbox --bench events`
//!
//! 1. **Publisher throughput with confirms**: the RabbitMQ sink publishes `BENCH_EVENTS`
//!    (default 20,000) task-pending messages of realistic size (with two CC routes) in calls of
//!    `BENCH_BATCH` (default 100, as a publisher pass hands over), each call returning only
//!    once the broker confirmed every message. A consumer queue is bound so the broker routes
//!    and persists every message.
//! 2. **Event latency**: a local server (embedded backend) publishing to RabbitMQ; a consumer
//!    bound to `task-defined`. `BENCH_SAMPLES` (default 300) times: createTask, then the time
//!    from the createTask response to the consumer receiving that task's message.

use blackbox::amqp::{Broker, ALL};
use blackbox::env_num;
use futures_util::StreamExt;
use lapin::options::BasicConsumeOptions;
use lapin::types::{FieldTable, ShortString};
use serde_json::{json, Value};
use shared::events::amqp::AmqpSink;
use shared::events::{Event, EventSink};
use std::time::{Duration, Instant};

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sample_event(prefix: &str, i: usize) -> Event {
    let id = blackbox::slugid();
    let payload: Value = json!({
        "version": 1,
        "runId": 0,
        "status": {
            "taskId": id, "provisionerId": "bench-prov", "workerType": "bench-wt",
            "taskQueueId": "bench-prov/bench-wt", "schedulerId": "-", "projectId": "none",
            "taskGroupId": id, "deadline": "2026-11-22T20:00:00.000Z",
            "expires": "2027-11-22T20:00:00.000Z", "retriesLeft": 5, "state": "pending",
            "priority": "lowest",
            "runs": [{"runId": 0, "state": "pending", "reasonCreated": "scheduled",
                      "scheduled": "2026-11-22T19:00:00.000Z"}]
        },
        "task": {"tags": {"n": i.to_string()}}
    });
    Event {
        exchange: format!("{prefix}task-pending"),
        routing_key: format!("primary.{id}.0._._.bench-prov.bench-wt.-.{id}._"),
        cc: vec!["route.index.bench".into(), "route.notify.by-email".into()],
        payload,
        text: None,
    }
}

async fn throughput() {
    let (total, batch) = (env_num("BENCH_EVENTS", 20_000), env_num("BENCH_BATCH", 100));
    let broker = Broker::connect().await;
    let prefix = broker.prefix.clone();
    broker.bind(&ALL, "#").await;
    let sink = AmqpSink::new(URL, prefix.clone());
    // Connect and declare outside the measurement.
    sink.publish(&[sample_event(&prefix, 0)])
        .await
        .expect("warm-up");
    let events: Vec<Event> = (0..total).map(|i| sample_event(&prefix, i)).collect();
    let bytes: usize = events
        .iter()
        .map(|e| serde_json::to_vec(&e.payload).map_or(0, |b| b.len()))
        .sum();
    let mut call_ms = vec![];
    let started = Instant::now();
    for chunk in events.chunks(batch) {
        let t = Instant::now();
        sink.publish(chunk).await.expect("publish with confirms");
        call_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let secs = started.elapsed().as_secs_f64();
    call_ms.sort_by(f64::total_cmp);
    println!("Publisher throughput (confirms, persistent, 2 CCs, consumer queue bound)");
    println!(
        "  {total} events in calls of {batch}, {:.0} bytes each: {:.2} s = {:.0} events/s",
        bytes as f64 / total as f64,
        secs,
        total as f64 / secs
    );
    println!(
        "  per call of {batch}: p50 {:.2} ms, p99 {:.2} ms",
        pct(&call_ms, 50.0),
        pct(&call_ms, 99.0)
    );
    broker.cleanup().await;
}

async fn latency() {
    let samples = env_num("BENCH_SAMPLES", 300);
    let broker = Broker::connect().await;
    let prefix = broker.prefix.clone();
    let queue = broker.bind(&ALL, "primary.#").await;
    let mut consumer = broker
        .ch
        .basic_consume(
            ShortString::from(queue.as_str()),
            ShortString::from("bench"),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let p = prefix.clone();
    let app = blackbox::spawn_app_with(move |c| {
        c.amqp_url = Some(URL.into());
        c.queue.exchange_prefix = p;
    })
    .await;
    let q = app.queue();
    let tq = blackbox::task_queue_id();
    let mut ms = vec![];
    for _ in 0..samples {
        let id = blackbox::slugid();
        q.createTask(&id, &blackbox::task_def(&tq))
            .await
            .expect("createTask");
        let responded = Instant::now();
        loop {
            let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
                .await
                .expect("a message within 10 s")
                .expect("consumer open")
                .expect("delivery");
            let body: Value = serde_json::from_slice(&delivery.data).unwrap_or_default();
            if delivery.exchange.as_str().ends_with("task-defined")
                && body["status"]["taskId"] == id.as_str()
            {
                ms.push(responded.elapsed().as_secs_f64() * 1000.0);
                break;
            }
        }
    }
    ms.sort_by(f64::total_cmp);
    println!("Event latency (createTask response -> consumer has task-defined), {samples} samples");
    println!(
        "  p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&ms, 50.0),
        pct(&ms, 99.0),
        pct(&ms, 100.0)
    );
    broker.cleanup().await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!("== tc-queue event benchmark: RabbitMQ at 127.0.0.1:5672 ==");
        throughput().await;
        latency().await;
    });
}
