//! The AWS path of the task-graph scheduler's consumer, with real RabbitMQ messages.
//!
//! A local server publishes the queue's events to RabbitMQ, with its in-process consumer off
//! (`scheduler_consumer = false`), so nothing advances a graph unless the consumer function
//! does. The durable queue the consumer's event source mapping reads is declared and bound by
//! an [`AmqpSink`] configured as the publisher Lambda configures it (`with_durable_queue`),
//! before anything is published. The test takes the queue's messages with `basic.get`
//! (unacknowledged), wraps them in an Amazon MQ for RabbitMQ event (`aws:rmq`, base64 bodies)
//! and hands it to the consumer, acknowledging only after it succeeded, as the mapping does.
//! On LocalStack the consumer is the real `task-graph-consumer` binary run through the Runtime
//! API emulator over the server's DynamoDB tables; on SQLite (where a function binary cannot
//! reach the server's database) the same handling, `shared::jobs::resolution_batch`, runs
//! in process over the server's API.

use crate::common::*;
use blackbox::amqp::{amqp_url, broker_addr, Broker};
use blackbox::runtime_api::{start_function, RuntimeApi};
use blackbox::scheduler::{Scheduler, SCHEDULER_ID};
use blackbox::*;
use lapin::options::{BasicAckOptions, BasicGetOptions};
use lapin::types::ShortString;
use serde_json::{json, Value};
use shared::events::amqp::{AmqpSink, DurableQueue, FeedBindings, RESOLUTION_EXCHANGES};
use shared::jobs::declare::Binds;
use std::time::{Duration, Instant};

/// One message taken (not yet acknowledged) from the consumer queue.
struct Taken {
    tag: u64,
    exchange: String,
    body: Vec<u8>,
    redelivered: bool,
}

/// The consumer: the real function binary (LocalStack) or its handler in process (SQLite).
enum Consumer {
    Binary {
        rt: RuntimeApi,
        child: std::process::Child,
    },
    InProcess(std::sync::Arc<shared::api::Api>),
}

impl Consumer {
    async fn invoke(&self, event: &Value) -> Result<Value, Value> {
        match self {
            Consumer::Binary { rt, .. } => rt.invoke(event.clone(), Duration::from_secs(60)).await,
            Consumer::InProcess(api) => {
                shared::jobs::resolution_batch(&api.scheduler, event, shared::time::Ts::now())
                    .await
                    .map_err(|e| Value::String(e.to_string()))
            }
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Consumer::Binary { child, .. } = self {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

fn b64(data: &[u8]) -> String {
    blackbox::scheduler::base64(data)
}

/// An Amazon MQ for RabbitMQ event, as the event source mapping builds it.
fn rmq_event(queue: &str, messages: &[(&[u8], bool)]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|(body, redelivered)| {
            json!({
                "basicProperties": {
                    "contentType": "application/json", "contentEncoding": "utf-8",
                    "headers": {}, "deliveryMode": 2, "priority": null, "correlationId": null,
                    "replyTo": null, "expiration": null, "messageId": null,
                    "timestamp": null, "type": null, "userId": null, "appId": null,
                    "clusterId": null, "bodySize": body.len()
                },
                "redelivered": redelivered,
                "data": b64(body)
            })
        })
        .collect();
    json!({
        "eventSource": "aws:rmq",
        "eventSourceArn": "arn:aws:mq:us-east-1:000000000000:broker:test:b-00000000-0000-0000-0000-000000000000",
        "rmqMessagesByQueue": { format!("{queue}::/"): records }
    })
}

/// Takes (without acknowledging) the messages on `queue` until one from `exchange` about
/// `task_id` is among them; returns all of them.
async fn take_until(broker: &Broker, queue: &str, exchange: &str, task_id: &str) -> Vec<Taken> {
    let until = Instant::now() + Duration::from_secs(20);
    let mut got: Vec<Taken> = vec![];
    loop {
        let m = broker
            .ch
            .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: false })
            .await
            .expect("basic.get");
        match m {
            Some(m) => {
                let d = m.delivery;
                got.push(Taken {
                    tag: d.delivery_tag,
                    exchange: d.exchange.to_string(),
                    body: d.data.clone(),
                    redelivered: d.redelivered,
                });
                let last = got.last().expect("one");
                let payload: Value = serde_json::from_slice(&last.body).expect("JSON");
                if last.exchange == exchange && payload["status"]["taskId"] == task_id {
                    return got;
                }
            }
            None => {
                assert!(
                    Instant::now() < until,
                    "no {exchange} message about {task_id} on {queue}; got {:?}",
                    got.iter().map(|t| &t.exchange).collect::<Vec<_>>()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn ack_all(broker: &Broker, taken: &[Taken]) {
    for t in taken {
        broker
            .ch
            .basic_ack(t.tag, BasicAckOptions::default())
            .await
            .expect("ack");
    }
}

async fn graph_state(s: &Scheduler, gid: &str) -> Value {
    let (code, body) = s.status(gid).await;
    assert_eq!(code, 200, "{body}");
    body["status"]["state"].clone()
}

async fn inspect(s: &Scheduler, gid: &str) -> Value {
    let (code, body) = s.inspect(gid).await;
    assert_eq!(code, 200, "{body}");
    body
}

fn node<'a>(inspected: &'a Value, label: &str) -> &'a Value {
    inspected["tasks"]
        .as_array()
        .and_then(|t| t.iter().find(|n| n["label"] == label))
        .unwrap_or_else(|| panic!("no node {label} in {inspected:#}"))
}

#[tokio::test]
async fn the_consumer_function_advances_graphs_from_rabbitmq_events() {
    if not_in_shape("drives its own consumer function; the LocalStack pass runs it") {
        return;
    }
    let localstack = on_localstack();
    if localstack && std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let broker = Broker::connect().await;
    let sched_prefix = format!("exchange/tcq-test-{}-scheduler/v1/", slugid());
    shared::events::amqp::declare_scheduler_exchanges(&broker.ch, &sched_prefix)
        .await
        .expect("declare scheduler exchanges");
    let consumer_queue = format!("tcq-test-task-graph-consumer-{}", slugid());

    // The durable queue, declared and bound as the publisher Lambda does it
    // (TCQ_FEED_QUEUE_PREFIX), before anything is published.
    let url = amqp_url(&broker_addr());
    let declarer = AmqpSink::new(url.clone(), broker.prefix.clone())
        .with_scheduler_prefix(sched_prefix.clone())
        .with_durable_queue(resolutions_queue(&broker.prefix, &consumer_queue));
    declarer
        .ensure_connected()
        .await
        .expect("declare the queue");
    let declared = broker
        .ch
        .queue_declare(
            ShortString::from(consumer_queue.as_str()),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .expect("the durable queue exists");
    assert_eq!(declared.message_count(), 0);

    // The scheduler's own messages, to see the graph finish.
    let finished_q = {
        let q = broker
            .ch
            .queue_declare(
                ShortString::from(""),
                lapin::options::QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .expect("declare");
        let name = q.name().to_string();
        for short in blackbox::scheduler::EXCHANGES {
            broker
                .ch
                .queue_bind(
                    ShortString::from(name.as_str()),
                    ShortString::from(format!("{sched_prefix}{short}")),
                    ShortString::from(format!("primary.*.*.*.*.*.*.{SCHEDULER_ID}.#")),
                    Default::default(),
                    Default::default(),
                )
                .await
                .expect("bind");
        }
        name
    };

    let prefix = format!(
        "sl{}-",
        slugid().to_ascii_lowercase().replace(['-', '_'], "x")
    );
    let app = spawn_app_with(|c| {
        c.amqp_url = Some(url.clone());
        c.queue.exchange_prefix = broker.prefix.clone();
        c.queue.scheduler_exchange_prefix = sched_prefix.clone();
        // Only the consumer function may react to resolutions.
        c.scheduler_consumer = false;
        if localstack {
            c.queue.table_prefix = prefix.clone();
        }
    })
    .await;
    let consumer = if localstack {
        let rt = RuntimeApi::start().await;
        let (child, _) = start_function(
            "task-graph-consumer",
            &rt,
            &prefix,
            &[
                ("TCQ_SCHEDULER_ID", SCHEDULER_ID),
                ("TCQ_EXCHANGE_PREFIX", &broker.prefix),
                ("TCQ_SCHEDULER_EXCHANGE_PREFIX", &sched_prefix),
            ],
        );
        Consumer::Binary { rt, child }
    } else {
        Consumer::InProcess(app.api())
    };

    // A chain: b requires a.
    let s = Scheduler::root(&app);
    let tq = task_queue_id();
    let gid = slugid();
    let body = json!({ "tasks": {
        "a": { "task": task_def(&tq) },
        "b": { "requires": ["a"], "task": task_def(&tq) }
    } });
    let (code, created) = s.create(&gid, &body).await;
    assert_eq!(code, 200, "{created:#}");
    let before = inspect(&s, &gid).await;
    let (a, b) = (
        node(&before, "a")["taskId"]
            .as_str()
            .expect("a")
            .to_string(),
        node(&before, "b")["taskId"]
            .as_str()
            .expect("b")
            .to_string(),
    );
    assert_eq!(node(&before, "a")["state"], "scheduled");
    assert_eq!(node(&before, "b")["state"], "unscheduled");

    // a completes; the server publishes task-completed, which the queue holds.
    claim_one(&app, &tq, "wg", "w1").await;
    complete(&app, &a, 0).await;
    let taken = take_until(
        &broker,
        &consumer_queue,
        &format!("{}task-completed", broker.prefix),
        &a,
    )
    .await;
    for t in &taken {
        let short = t.exchange.strip_prefix(&broker.prefix).unwrap_or_default();
        assert!(RESOLUTION_EXCHANGES.contains(&short), "{}", t.exchange);
    }
    // Nothing advanced without the consumer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&app, &b).await["state"], "unscheduled");

    // The batch, with a poison message first: not base64 JSON, logged and skipped.
    let mut batch: Vec<(&[u8], bool)> = vec![(b"{not json".as_slice(), false)];
    batch.extend(taken.iter().map(|t| (t.body.as_slice(), t.redelivered)));
    let event = rmq_event(&consumer_queue, &batch);
    let reply = consumer.invoke(&event).await.expect("the batch succeeds");
    assert_eq!(reply["skipped"], 1, "{reply}");
    assert_eq!(reply["handled"], 1, "{reply}");
    assert_eq!(reply["messages"], json!(batch.len()), "{reply}");
    ack_all(&broker, &taken).await;
    // b is scheduled: pending on the queue, `scheduled` in the graph.
    let sb = wait_status(&app, &b, Duration::from_secs(10), |s| {
        s["state"] == "pending"
    })
    .await;
    assert_eq!(sb["runs"].as_array().map(Vec::len), Some(1));
    let after_a = inspect(&s, &gid).await;
    assert_eq!(node(&after_a, "a")["state"], "completed");
    assert_eq!(node(&after_a, "b")["state"], "scheduled");
    assert_eq!(graph_state(&s, &gid).await, "running");

    // The same batch again (a redelivery): nothing changes.
    let again = consumer.invoke(&event).await.expect("the batch succeeds");
    assert_eq!(again["skipped"], 1, "{again}");
    assert_eq!(again["messages"], json!(batch.len()), "{again}");
    assert_eq!(inspect(&s, &gid).await, after_a);
    assert_eq!(status(&app, &b).await, sb);

    // b completes; the consumer finishes the graph, whose task-graph-finished message reaches
    // RabbitMQ through the server's publisher.
    claim_one(&app, &tq, "wg", "w1").await;
    complete(&app, &b, 0).await;
    let taken = take_until(
        &broker,
        &consumer_queue,
        &format!("{}task-completed", broker.prefix),
        &b,
    )
    .await;
    let batch: Vec<(&[u8], bool)> = taken
        .iter()
        .map(|t| (t.body.as_slice(), t.redelivered))
        .collect();
    let event = rmq_event(&consumer_queue, &batch);
    let reply = consumer.invoke(&event).await.expect("the batch succeeds");
    assert_eq!(reply["handled"], 1, "{reply}");
    ack_all(&broker, &taken).await;
    assert_eq!(graph_state(&s, &gid).await, "finished");
    let finished = inspect(&s, &gid).await;
    assert_eq!(node(&finished, "b")["state"], "completed");
    let until = Instant::now() + Duration::from_secs(20);
    let mut seen = vec![];
    loop {
        if let Some(m) = broker.get(&finished_q).await {
            let done = broker.short(&m).ends_with("task-graph-finished")
                && m.payload["status"]["taskGraphId"] == gid.as_str();
            seen.push(m.exchange.clone());
            if done {
                assert_eq!(m.payload["status"]["state"], "finished");
                assert_eq!(
                    m.routing_key,
                    format!("primary._._._._._._.{SCHEDULER_ID}.{gid}._")
                );
                break;
            }
        } else {
            assert!(
                Instant::now() < until,
                "no task-graph-finished message; saw {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let finished_count = |app: &TestServer| {
        app.events()
            .iter()
            .filter(|e| {
                e.exchange.ends_with("task-graph-finished")
                    && e.payload["status"]["taskGraphId"] == gid.as_str()
            })
            .count()
    };
    // RabbitMQ is the publisher's first sink, the server's recording sink the next: wait for it.
    app.wait_for_event(Duration::from_secs(20), |e| {
        e.exchange.ends_with("task-graph-finished")
            && e.payload["status"]["taskGraphId"] == gid.as_str()
    })
    .await
    .expect("the recording sink sees task-graph-finished");
    assert_eq!(finished_count(&app), 1);

    // Again: idempotent, no second task-graph-finished.
    let again = consumer.invoke(&event).await.expect("the batch succeeds");
    assert_eq!(again["skipped"], 0, "{again}");
    assert_eq!(inspect(&s, &gid).await, finished);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(finished_count(&app), 1);
    assert!(broker.get(&finished_q).await.is_none());

    // A batch that cannot be handled fails as a whole (the broker redelivers it): here an
    // event of another kind.
    let wrong = consumer
        .invoke(&json!({ "eventSource": "aws:sqs", "Records": [] }))
        .await;
    assert!(wrong.is_err(), "{wrong:?}");
    drop(consumer);
    broker.delete_queue(&consumer_queue).await;
    broker.cleanup().await;
}

/// The scheduler's endpoint functions behind API Gateway, on LocalStack: the per-endpoint
/// binaries and the multi-call binary (`_HANDLER=schedulerStatus`) serve their own route
/// only, under `/api/scheduler/v1`, with Hawk-signed events.
#[tokio::test]
async fn scheduler_endpoint_functions_answer_api_gateway_events() {
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    use blackbox::runtime_api::{apigw_v2_event, localstack_tables};
    let prefix = localstack_tables("sf", false).await;
    let tq = task_queue_id();
    let gid = slugid();
    let body_of = |reply: &Value| -> Value {
        serde_json::from_str(reply["body"].as_str().unwrap_or_default()).expect("JSON body")
    };

    let rt = RuntimeApi::start().await;
    let (mut f, _) = start_function("scheduler-create-task-graph", &rt, &prefix, &[]);
    let graph = json!({ "tasks": {
        "a": { "task": task_def(&tq) },
        "b": { "requires": ["a"], "task": task_def(&tq) }
    } });
    let reply = rt
        .invoke(
            apigw_v2_event(
                "PUT",
                &format!("/api/scheduler/v1/task-graph/{gid}"),
                Some(&graph),
            ),
            Duration::from_secs(60),
        )
        .await
        .expect("createTaskGraph answered");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let body = body_of(&reply);
    assert_eq!(body["status"]["state"], "running", "{body}");
    assert_eq!(body["status"]["schedulerId"], SCHEDULER_ID, "{body}");
    // Only its own route: the scheduler's ping and the queue's are not served here.
    for path in ["/api/scheduler/v1/ping", "/api/queue/v1/ping"] {
        let other = rt
            .invoke(apigw_v2_event("GET", path, None), Duration::from_secs(30))
            .await
            .expect("answered");
        assert_eq!(other["statusCode"], 404, "{path}: {other}");
    }
    f.kill().ok();
    f.wait().ok();

    let rt = RuntimeApi::start().await;
    let (mut f, _) = start_function("scheduler-inspect", &rt, &prefix, &[]);
    let reply = rt
        .invoke(
            apigw_v2_event(
                "GET",
                &format!("/api/scheduler/v1/task-graph/{gid}/inspect"),
                None,
            ),
            Duration::from_secs(60),
        )
        .await
        .expect("inspect answered");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let inspected = body_of(&reply);
    let a = node(&inspected, "a")["taskId"]
        .as_str()
        .expect("a")
        .to_string();
    assert_eq!(node(&inspected, "a")["state"], "scheduled");
    f.kill().ok();
    f.wait().ok();

    let rt = RuntimeApi::start().await;
    let (mut f, _) = start_function("scheduler-inspect-task", &rt, &prefix, &[]);
    let reply = rt
        .invoke(
            apigw_v2_event(
                "GET",
                &format!("/api/scheduler/v1/task-graph/{gid}/inspect/{a}"),
                None,
            ),
            Duration::from_secs(60),
        )
        .await
        .expect("inspectTask answered");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    assert_eq!(body_of(&reply)["label"], "a");
    f.kill().ok();
    f.wait().ok();

    // The multi-call binary, as the template deploys it.
    let rt = RuntimeApi::start().await;
    let (mut f, _) = start_function("lambda", &rt, &prefix, &[("_HANDLER", "schedulerStatus")]);
    let reply = rt
        .invoke(
            apigw_v2_event(
                "GET",
                &format!("/api/scheduler/v1/task-graph/{gid}/status"),
                None,
            ),
            Duration::from_secs(60),
        )
        .await
        .expect("status answered");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    assert_eq!(body_of(&reply)["status"]["state"], "running");
    let queue_status = rt
        .invoke(
            apigw_v2_event("GET", &format!("/api/queue/v1/task/{a}/status"), None),
            Duration::from_secs(30),
        )
        .await
        .expect("answered");
    assert_eq!(queue_status["statusCode"], 404, "{queue_status}");
    f.kill().ok();
    f.wait().ok();
}

/// The publisher function declares the consumer queue (`<TCQ_FEED_QUEUE_PREFIX>task-graph-scheduler`), bound for the
/// scheduler's tasks, when it connects and so before it publishes: a message about a task of
/// the scheduler's, published from a stream record, is waiting in it.
#[tokio::test]
async fn the_publisher_function_declares_the_consumer_queue_first() {
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    use blackbox::runtime_api::{apigw_v2_event, localstack_tables, raw_status};
    let prefix = localstack_tables("pq", false).await;
    let broker = Broker::connect().await;
    let feeds = format!("tcq-test-{}-", slugid());
    let consumer_queue = format!("{feeds}task-graph-scheduler");
    let wm_prefix = format!("exchange/tcq-test-{}-wm/v1/", slugid());
    let url = amqp_url(&broker_addr());
    let env = [
        ("TCQ_EXCHANGE_PREFIX", broker.prefix.as_str()),
        ("TCQ_AMQP_URL", url.as_str()),
        ("TCQ_FEED_QUEUE_PREFIX", feeds.as_str()),
        ("TCQ_WORKER_MANAGER_EXCHANGE_PREFIX", wm_prefix.as_str()),
        ("TCQ_SCHEDULER_ID", SCHEDULER_ID),
    ];

    // A task of the scheduler's, reported completed, written by the API functions: its
    // task-completed event waits in the outbox.
    let tq = task_queue_id();
    let id = slugid();
    let mut def = task_def(&tq);
    def["schedulerId"] = json!(SCHEDULER_ID);
    let rt = RuntimeApi::start().await;
    let (mut f, _) = start_function("lambda", &rt, &prefix, &[("_HANDLER", "createTask")]);
    let reply = rt
        .invoke(
            apigw_v2_event("PUT", &format!("/api/queue/v1/task/{id}"), Some(&def)),
            Duration::from_secs(60),
        )
        .await
        .expect("createTask answered");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    f.kill().ok();
    f.wait().ok();

    // The status item, as the stream's NEW_IMAGE carries it.
    let image = raw_status(&prefix, &id).await;
    // Every field AWS always sends (the function reads the event as `aws_lambda_events` types it).
    let record = json!({
        "awsRegion": "us-east-1", "eventID": "1", "eventName": "INSERT",
        "eventSource": "aws:dynamodb", "eventVersion": "1.1",
        "dynamodb": {
            "NewImage": image, "SequenceNumber": "100", "SizeBytes": 1_000,
            "StreamViewType": "NEW_IMAGE"
        }
    });
    let rt = RuntimeApi::start().await;
    let (mut publisher, _) = start_function("publisher", &rt, &prefix, &env);
    let reply = rt
        .invoke(json!({ "Records": [record] }), Duration::from_secs(60))
        .await
        .expect("publisher answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    publisher.kill().ok();
    publisher.wait().ok();

    // The queue exists, durable, bound to the resolution exchanges only: task-defined and
    // task-pending went out, but nothing about them reached it.
    let declared = broker
        .ch
        .queue_declare(
            ShortString::from(consumer_queue.as_str()),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .expect("the publisher declared the queue");
    assert_eq!(declared.message_count(), 0);
    // It is bound for the scheduler's tasks: a resolution of one (published here by a sink
    // configured the same way; the declaration is idempotent) lands in it.
    let sink = AmqpSink::new(url.clone(), broker.prefix.clone())
        .with_durable_queue(resolutions_queue(&broker.prefix, &consumer_queue));
    let event = shared::events::Event {
        exchange: format!("{}task-completed", broker.prefix),
        routing_key: format!(
            "primary.{id}.0.wg.w1.{}.{SCHEDULER_ID}.{id}._",
            tq.replace('/', ".")
        ),
        payload: json!({ "status": { "taskId": id } }),
        text: None,
        cc: vec![],
    };
    shared::events::EventSink::publish(&sink, &[event])
        .await
        .expect("published");
    let got = broker
        .take(&consumer_queue, 1, Duration::from_secs(10))
        .await;
    assert_eq!(got[0].payload["status"]["taskId"], id.as_str());
    broker.delete_queue(&consumer_queue).await;
    // The other queue it declares, worker-manager's.
    for job in shared::jobs::JOBS {
        if let Some(feed) = &job.broker {
            broker.delete_queue(&format!("{feeds}{}", feed.queue)).await;
        }
    }
    broker.cleanup().await;
}

/// The task-graph consumer's queue `name`, bound as the publishers bind it.
fn resolutions_queue(exchange_prefix: &str, name: &str) -> DurableQueue {
    FeedBindings {
        exchange_prefix,
        scheduler_id: SCHEDULER_ID,
        worker_manager_prefix: "",
    }
    .queue(name.to_string(), Binds::Resolutions)
}
