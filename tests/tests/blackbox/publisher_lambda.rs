//! The AWS event path on LocalStack: the create-task function writes a task and its events
//! (the outbox) to DynamoDB; the tasks table's stream carries the item images; the publisher
//! function, run through a Runtime API emulator with the stream's own records, publishes them
//! to RabbitMQ with confirms and empties the outbox. Skipped unless LocalStack runs.
use blackbox::amqp::{Broker, ALL};
use blackbox::runtime_api::{
    apigw_v2_event, localstack_json, localstack_tables, raw_status, start_function, RuntimeApi,
};
use blackbox::*;
use serde_json::{json, Value};
use shared::store::dynamodb;
use shared::store::Store;
use std::time::{Duration, Instant};

/// On LocalStack, and not against the deployed shape: these tests drive Lambda binaries of
/// their own (the LocalStack pass runs them).
fn localstack() -> bool {
    std::env::var("TCQ_LOCALSTACK").as_deref() == Ok("1")
        && !not_in_shape("drives Lambda binaries of its own; the LocalStack pass runs it")
}

/// One call of the DynamoDB Streams JSON API.
async fn streams(op: &str, body: Value) -> Result<Value, String> {
    localstack_json(
        "dynamodb",
        "1.0",
        &format!("DynamoDBStreams_20120810.{op}"),
        body,
    )
    .await
}

/// A shard iterator from the start of the tasks table's stream, once the stream is active.
async fn stream_start(prefix: &str) -> String {
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let table = dynamodb::client(&sdk)
        .describe_table()
        .table_name(format!("{prefix}tasks"))
        .send()
        .await
        .expect("describe tasks table");
    let arn = table
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("the tasks table has a stream")
        .to_string();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let desc = streams("DescribeStream", json!({ "StreamArn": arn })).await;
        let shard = desc.ok().and_then(|d| {
            d["StreamDescription"]["Shards"][0]["ShardId"]
                .as_str()
                .map(String::from)
        });
        if let Some(shard) = shard {
            let it = streams(
                "GetShardIterator",
                json!({ "StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON" }),
            )
            .await;
            if let Some(it) = it
                .ok()
                .and_then(|v| v["ShardIterator"].as_str().map(String::from))
            {
                return it;
            }
        }
        assert!(Instant::now() < until, "the stream did not become active");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads the stream from `it` until `pred` holds for the records so far; returns them and the
/// next iterator.
async fn read_until(mut it: String, pred: impl Fn(&[Value]) -> bool) -> (Vec<Value>, String) {
    let until = Instant::now() + Duration::from_secs(30);
    let mut got = vec![];
    loop {
        let page = streams("GetRecords", json!({ "ShardIterator": it }))
            .await
            .expect("GetRecords");
        got.extend(page["Records"].as_array().cloned().unwrap_or_default());
        it = page["NextShardIterator"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if pred(&got) {
            return (got, it);
        }
        assert!(Instant::now() < until, "stream records so far: {got:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn is_status_of(r: &Value, id: &str) -> bool {
    r["dynamodb"]["NewImage"]["pk"]["S"] == id && r["dynamodb"]["NewImage"]["sk"]["S"] == "status"
}

/// True once the records hold a status image of every task in `ids`.
fn covers(records: &[Value], ids: &[String]) -> bool {
    ids.iter()
        .all(|id| records.iter().any(|r| is_status_of(r, id)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_publisher_delivers_what_the_api_functions_wrote() {
    if !localstack() {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let prefix = localstack_tables("pl", true).await;
    let start = stream_start(&prefix).await;
    // A consumer bound to every exchange under a prefix of this test's own.
    let broker = Broker::connect().await;
    let q = broker.bind(&ALL, "#").await;
    let env = [
        ("TCQ_EXCHANGE_PREFIX", broker.prefix.as_str()),
        ("TCQ_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
    ];

    // The API function writes two tasks; nothing publishes yet.
    let tq = task_queue_id();
    let ids = vec![slugid(), slugid()];
    create_tasks(&prefix, &env, &tq, &ids).await;

    // The stream's records, exactly as Lambda would batch them, go to the publisher.
    let (records, next) = read_until(start, |rs| covers(rs, &ids)).await;
    let api = RuntimeApi::start().await;
    let (mut publisher, _) = start_function("publisher", &api, &prefix, &env);
    let reply = api
        .invoke(json!({ "Records": records }), Duration::from_secs(30))
        .await
        .expect("publisher answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    let got = broker.take(&q, 4, Duration::from_secs(20)).await;
    for id in &ids {
        let names = broker.names_of(&got, id);
        assert_eq!(names, ["task-defined", "task-pending"], "{id}");
    }

    // The publisher emptied both outboxes; the stream shows those writes, and handing them to
    // the publisher publishes nothing more.
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let store = dynamodb::DynamoStore::new(&sdk, &prefix).expect("store");
    for id in &ids {
        let item = store
            .get(
                shared::records::task::TASKS,
                id,
                shared::records::task::SK_STATUS,
            )
            .await
            .expect("get")
            .expect("status item");
        assert_eq!(item.data["outbox"], json!([]), "{id}");
    }
    let (removals, _) = read_until(next, |rs| covers(rs, &ids)).await;
    let reply = api
        .invoke(json!({ "Records": removals }), Duration::from_secs(30))
        .await
        .expect("publisher answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    assert!(
        broker.rest(&q, Duration::from_millis(500)).await.is_empty(),
        "no second copy"
    );
    publisher.kill().ok();
    broker.cleanup().await;
}

/// The dependency-resolver function on the stream: the record of a resolution (a status item
/// carrying its mark) makes the dependents pending at once, without waiting for the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_hands_resolutions_to_the_dependency_resolver() {
    resolutions_reach_the_resolver(false).await;
}

/// As deployed (`TCQ_EVENTS_FROM_STREAM=true`), a resolution carries no mark: the resolver's
/// filter selects the write that removes the task's `deadline` entry (old image with it, new
/// without), and a resolution the resolver could not handle is held for the scheduled pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_marks_the_stream_hands_resolutions_to_the_dependency_resolver() {
    resolutions_reach_the_resolver(true).await;
}

async fn resolutions_reach_the_resolver(from_stream: bool) {
    if !localstack() {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    use shared::ids::{TaskId, TaskQueueId};
    let prefix = localstack_tables("dr", true).await;
    let start = stream_start(&prefix).await;
    let queue = blackbox::queue_over(&prefix, from_stream).await;
    let tq = TaskQueueId::parse(&task_queue_id()).expect("queue id");
    let body = |deps: Value| {
        let mut b = task_def(tq.as_str());
        b["dependencies"] = deps;
        shared::schema::validate_input("create-task-request", &mut b).expect("valid");
        b
    };
    let now = shared::time::Ts::now;
    let dep = TaskId::parse(&slugid()).expect("id");
    let dependent = TaskId::parse(&slugid()).expect("id");
    queue
        .create_task(&dep, body(json!([])), false, now())
        .await
        .expect("create dependency");
    queue
        .create_task(&dependent, body(json!([dep.as_str()])), false, now())
        .await
        .expect("create dependent");
    let claimed = queue
        .claim_task(&dep, 0, tq.as_str(), "g", "w", now())
        .await
        .expect("claim");
    assert_eq!(claimed.run.run_id, 0);
    queue
        .resolve(
            &dep,
            0,
            shared::records::task::ReasonResolved::Completed,
            now(),
        )
        .await
        .expect("complete");
    assert_eq!(
        queue.status(&dependent, now()).await.unwrap().state(),
        "unscheduled"
    );

    // The stream's records that pass the resolver's filters (infra.rs), as Lambda batches
    // them, go to the dependency resolver.
    let marked = |r: &Value| {
        is_status_of(r, dep.as_str()) && r["dynamodb"]["NewImage"]["resolved_pk"]["S"].is_string()
    };
    let resolving = |r: &Value| {
        is_status_of(r, dep.as_str())
            && r["eventName"] == "MODIFY"
            && r["dynamodb"]["OldImage"]["deadline_pk"]["S"].is_string()
            && r["dynamodb"]["NewImage"]["deadline_pk"].is_null()
    };
    let (records, _) = read_until(start, |rs| rs.iter().any(resolving)).await;
    let records: Vec<Value> = records
        .into_iter()
        .filter(|r| marked(r) || resolving(r))
        .collect();
    assert_eq!(records.len(), 1, "the completion's write: {records:#?}");
    assert_eq!(marked(&records[0]), !from_stream);
    if from_stream {
        assert_eq!(
            queue
                .resolve_dependents_once(
                    now(),
                    100,
                    shared::store::shard::Shards::ALL,
                    &shared::time::Budget::of(Duration::from_secs(30))
                )
                .await
                .expect("pass")
                .done,
            0,
            "nothing for the scheduled pass"
        );
    }
    let api = RuntimeApi::start().await;
    let (mut resolver, _) = start_function("dependency-resolver", &api, &prefix, &[]);
    let reply = api
        .invoke(json!({ "Records": records }), Duration::from_secs(30))
        .await
        .expect("dependency resolver answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    let s = queue.status(&dependent, now()).await.expect("status");
    assert_eq!(
        s.state(),
        "pending",
        "the dependent was released by the stream batch"
    );
    // The same batch again changes nothing (the mark is gone).
    let reply = api
        .invoke(json!({ "Records": records }), Duration::from_secs(30))
        .await
        .expect("dependency resolver answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    assert_eq!(queue.status(&dependent, now()).await.unwrap().runs.len(), 1);
    resolver.kill().ok();

    if from_stream {
        // A resolution the resolver could not handle is held for the scheduled pass.
        let (dep, dependent) = (
            TaskId::parse(&slugid()).expect("id"),
            TaskId::parse(&slugid()).expect("id"),
        );
        queue
            .create_task(&dep, body(json!([])), false, now())
            .await
            .expect("create dependency");
        queue
            .create_task(&dependent, body(json!([dep.as_str()])), false, now())
            .await
            .expect("create dependent");
        queue
            .claim_task(&dep, 0, tq.as_str(), "g", "w", now())
            .await
            .expect("claim");
        queue
            .resolve(
                &dep,
                0,
                shared::records::task::ReasonResolved::Completed,
                now(),
            )
            .await
            .expect("complete");
        queue.hold_resolution(dep.as_str()).await.expect("hold");
        assert_eq!(
            queue
                .resolve_dependents_once(
                    now(),
                    100,
                    shared::store::shard::Shards::ALL,
                    &shared::time::Budget::of(Duration::from_secs(30))
                )
                .await
                .expect("pass")
                .done,
            1
        );
        assert_eq!(
            queue.status(&dependent, now()).await.unwrap().state(),
            "pending"
        );
    }
}

/// Creates tasks through the real create-task function (its environment `env`).
async fn create_tasks(prefix: &str, env: &[(&str, &str)], tq: &str, ids: &[String]) {
    let api = RuntimeApi::start().await;
    let (mut create, _) = start_function("create-task", &api, prefix, env);
    for id in ids {
        let event = apigw_v2_event(
            "PUT",
            &format!("/api/queue/v1/task/{id}"),
            Some(&task_def(tq)),
        );
        let reply = api
            .invoke(event, Duration::from_secs(30))
            .await
            .expect("createTask answered");
        assert_eq!(reply["statusCode"], 200, "{reply}");
    }
    create.kill().ok();
}

/// As deployed (`TCQ_EVENTS_FROM_STREAM=true`), each write stores only its own events, which
/// its stream record carries, without the outbox index entry; a publisher that cannot reach
/// RabbitMQ holds the events of the batch it failed for the sweeper (with the entry), and the
/// sweeper delivers them once RabbitMQ is back; a publisher that can delivers them and writes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_carries_each_writes_events_and_a_failed_batch_is_left_to_the_sweeper() {
    if !localstack() {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let prefix = localstack_tables("ps", true).await;
    let start = stream_start(&prefix).await;
    let broker = Broker::connect().await;
    let q = broker.bind(&ALL, "#").await;
    let env = |amqp: &str| -> Vec<(&'static str, String)> {
        vec![
            ("TCQ_EXCHANGE_PREFIX", broker.prefix.clone()),
            ("TCQ_AMQP_URL", amqp.to_string()),
            ("TCQ_EVENTS_FROM_STREAM", "true".to_string()),
        ]
    };
    let up = env("amqp://guest:guest@127.0.0.1:5672/%2f");
    let down = env("amqp://guest:guest@127.0.0.1:1/%2f");

    let tq = task_queue_id();
    let ids = vec![slugid(), slugid()];
    let up_refs: Vec<(&str, &str)> = up.iter().map(|(k, v)| (*k, v.as_str())).collect();
    create_tasks(&prefix, &up_refs, &tq, &ids).await;
    for id in &ids {
        let item = raw_status(&prefix, id).await;
        assert!(item["pk"]["S"] == id.as_str(), "{item}");
        assert!(
            item.get("outbox_pk").is_none(),
            "no outbox index entry: {item}"
        );
    }

    // RabbitMQ unreachable: the batch's events are held for the sweeper, and the batch is done.
    let (records, next) = read_until(start, |rs| covers(rs, &ids)).await;
    let down_refs: Vec<(&str, &str)> = down.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let api = RuntimeApi::start().await;
    let (mut publisher, _) = start_function("publisher", &api, &prefix, &down_refs);
    let reply = api
        .invoke(json!({ "Records": records }), Duration::from_secs(60))
        .await
        .expect("publisher answered");
    publisher.kill().ok();
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let store = dynamodb::DynamoStore::new(&sdk, &prefix).expect("store");
    let held =
        || shared::events::held::held_records::<shared::records::task::TaskRecord>(&store, 10);
    let mut found = held().await.expect("read");
    found.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(found, want, "both tasks' events held");
    assert!(broker.rest(&q, Duration::from_millis(300)).await.is_empty());

    // The sweeper delivers them, and removes what it held.
    let queue = shared::queue::Queue::new(
        std::sync::Arc::new(dynamodb::DynamoStore::new(&sdk, &prefix).expect("store")),
        std::sync::Arc::new(shared::signal::LocalSignal::default()),
        shared::creds::IssuerCredentials {
            client_id: "static/q".into(),
            access_token: "t".into(),
        },
        shared::queue::QueueConfig {
            exchange_prefix: broker.prefix.clone(),
            events_from_stream: true,
            ..Default::default()
        },
    );
    let sink = shared::events::amqp::AmqpSink::new(
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        &broker.prefix,
    );
    let publisher = shared::jobs::Publisher::new(std::sync::Arc::new(sink));
    let budget = shared::jobs::Budget::of(Duration::from_secs(30));
    let delivered = publisher
        .sweep(&queue, &|_| false, budget)
        .await
        .expect("sweep");
    assert_eq!(delivered, 4);
    let got = broker.take(&q, 4, Duration::from_secs(20)).await;
    for id in &ids {
        let names = broker.names_of(&got, id);
        assert_eq!(names, ["task-defined", "task-pending"], "{id}");
    }
    assert!(held().await.expect("read").is_empty());

    // RabbitMQ up: each write's stream record carries that write's own events; the publisher
    // delivers them and writes nothing, and the claim's record holds task-running alone.
    let id = slugid();
    create_tasks(&prefix, &up_refs, &tq, std::slice::from_ref(&id)).await;
    let only = |records: Vec<Value>| -> Vec<Value> {
        records
            .into_iter()
            .filter(|r| is_status_of(r, &id))
            .collect()
    };
    let (records, next) = read_until(next, |rs| covers(rs, std::slice::from_ref(&id))).await;
    let before = raw_status(&prefix, &id).await;
    let api = RuntimeApi::start().await;
    let (mut publisher, _) = start_function("publisher", &api, &prefix, &up_refs);
    let reply = api
        .invoke(json!({ "Records": only(records) }), Duration::from_secs(30))
        .await
        .expect("publisher answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    let got = broker.take(&q, 2, Duration::from_secs(20)).await;
    let names: Vec<&str> = got.iter().map(|m| broker.short(m)).collect();
    assert_eq!(names, ["task-defined", "task-pending"]);
    assert_eq!(
        raw_status(&prefix, &id).await["v"],
        before["v"],
        "the publisher wrote nothing"
    );
    let tid = shared::ids::TaskId::parse(&id).expect("id");
    queue
        .claim_task(&tid, 0, &tq, "g", "w", shared::time::Ts::now())
        .await
        .expect("claim");
    let (records, _) = read_until(next, |rs| covers(rs, std::slice::from_ref(&id))).await;
    let records = only(records);
    assert_eq!(records.len(), 1, "the claim's record");
    let reply = api
        .invoke(json!({ "Records": records }), Duration::from_secs(30))
        .await
        .expect("publisher answered");
    assert_eq!(reply, json!({ "batchItemFailures": [] }));
    let got = broker.take(&q, 1, Duration::from_secs(20)).await;
    assert_eq!(broker.short(&got[0]), "task-running");
    assert!(broker.rest(&q, Duration::from_millis(300)).await.is_empty());
    publisher.kill().ok();
    broker.cleanup().await;
}

/// A broker that accepts connections and never speaks AMQP (a frozen container's half-open
/// connection, a broker in an alarm) does not hold the publisher until its 60 s timeout, when
/// it could no longer hold its batch: connecting gives up after 10 s, and the batch's events
/// are held for the sweeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_broker_cannot_hold_the_publisher_past_its_timeout() {
    if !localstack() {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("amqp://guest:guest@{}/%2f", silent.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((sock, _)) = silent.accept().await {
            held.push(sock);
        }
    });
    let prefix = localstack_tables("pz", true).await;
    let start = stream_start(&prefix).await;
    let env: Vec<(&'static str, String)> = vec![
        (
            "TCQ_EXCHANGE_PREFIX",
            format!("exchange/tcq-test-{}/v1/", slugid()),
        ),
        ("TCQ_AMQP_URL", silent_url),
        ("TCQ_EVENTS_FROM_STREAM", "true".to_string()),
    ];
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let tq = task_queue_id();
    let ids = vec![slugid()];
    create_tasks(&prefix, &refs, &tq, &ids).await;
    let (records, _) = read_until(start, |rs| covers(rs, &ids)).await;
    let api = RuntimeApi::start().await;
    let (mut publisher, _) = start_function("publisher", &api, &prefix, &refs);
    let began = std::time::Instant::now();
    let reply = api
        .invoke(json!({ "Records": records }), Duration::from_secs(60))
        .await
        .expect("the publisher answered within its timeout");
    let took = began.elapsed();
    publisher.kill().ok();
    hold.abort();
    assert!(took < Duration::from_secs(45), "answered after {took:?}");
    assert_eq!(
        reply,
        json!({ "batchItemFailures": [] }),
        "the batch is done with: its events are held"
    );
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let store = dynamodb::DynamoStore::new(&sdk, &prefix).expect("store");
    let held = shared::events::held::held_records::<shared::records::task::TaskRecord>(&store, 10);
    assert_eq!(held.await.expect("read"), ids, "held for the sweeper");
}
