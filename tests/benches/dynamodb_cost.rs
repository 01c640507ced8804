//! Capacity units and requests per task life cycle (createTask → claimWork → reportCompleted,
//! plus delivering its events) on DynamoDB, counted from `ReturnConsumedCapacity` by the
//! adapter, not estimated. Needs LocalStack (or AWS) in the standard AWS environment:
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench dynamodb_cost
use shared::creds::IssuerCredentials;
use shared::events::RecordingSink;
use shared::ids::{TaskId, TaskQueueId};
use shared::queue::{Queue, QueueConfig};
use shared::records::task::ReasonResolved;
use shared::signal::LocalSignal;
use shared::store::dynamodb::{self, DynamoStore, Usage};
use shared::store::Store;
use shared::time::Ts;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Clone, Default)]
struct Snap {
    rcu: f64,
    wcu: f64,
    req: u64,
    by_target: BTreeMap<String, u64>,
}

fn snap(u: &Usage) -> Snap {
    Snap {
        rcu: u.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        wcu: u.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        req: u.requests.load(Ordering::Relaxed),
        by_target: u
            .writes_by_target
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default(),
    }
}

/// Write units per table and index (thousandths, summed over `n`), as `target units` pairs.
fn per_target(m: &BTreeMap<String, u64>, n: f64) -> String {
    m.iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / 1000.0 / n))
        .collect::<Vec<_>>()
        .join(", ")
}

fn delta(a: &Snap, b: &Snap, n: f64) -> (f64, f64, f64) {
    (
        (b.rcu - a.rcu) / n,
        (b.wcu - a.wcu) / n,
        (b.req - a.req) as f64 / n,
    )
}

/// Delivers the task's waiting events as the publisher function does after every write (it
/// is triggered by each write's stream record, which carries the item's image: the image is
/// fetched here through `images`, whose reads are not counted).
/// A task's status item as the stream hands it to a function: read through the uncounted store.
async fn image(images: &DynamoStore, id: &TaskId) -> shared::store::Item {
    images
        .get(
            shared::records::task::TASKS,
            id.as_str(),
            shared::records::task::SK_STATUS,
        )
        .await
        .expect("image")
        .expect("status item")
}

async fn drain(queue: &Queue, images: &DynamoStore, sink: &RecordingSink, id: &TaskId) {
    let image = image(images, id).await;
    shared::events::drain::drain_stream::<shared::records::task::TaskRecord>(
        queue.store.as_ref(),
        sink,
        "x/",
        vec![image],
        &Default::default(),
        Ts::now(),
    )
    .await
    .expect("drain");
}

/// Every record of a table's stream so far (LocalStack: its API is called unsigned).
async fn stream_records(arn: Result<String, String>) -> Result<Vec<serde_json::Value>, String> {
    use blackbox::runtime_api::localstack_json;
    let streams = |op: &str, body: serde_json::Value| {
        let target = format!("DynamoDBStreams_20120810.{op}");
        async move { localstack_json("dynamodb", "1.0", &target, body).await }
    };
    let arn = arn?;
    let desc = streams("DescribeStream", serde_json::json!({ "StreamArn": arn })).await?;
    let mut out = vec![];
    for shard in desc["StreamDescription"]["Shards"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let it = streams(
            "GetShardIterator",
            serde_json::json!({ "StreamArn": arn, "ShardId": shard["ShardId"], "ShardIteratorType": "TRIM_HORIZON" }),
        )
        .await?;
        let mut it = it["ShardIterator"].as_str().map(String::from);
        while let Some(i) = it {
            let page = streams("GetRecords", serde_json::json!({ "ShardIterator": i })).await?;
            let records = page["Records"].as_array().cloned().unwrap_or_default();
            if records.is_empty() {
                break;
            }
            out.extend(records);
            it = page["NextShardIterator"].as_str().map(String::from);
        }
    }
    Ok(out)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_LIFECYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let Ok(sdk) = dynamodb::sdk_config().await else {
        eprintln!("needs the AWS environment (see the header of this file)");
        return;
    };
    let client = dynamodb::client(&sdk);
    let prefix = blackbox::runtime_api::localstack_tables("cost", true).await;
    // A second store on the same tables, whose reads are not counted: it stands for the
    // stream record that hands the publisher each written image for free.
    let images = DynamoStore::new(client.clone(), prefix.clone());
    let describe = client.clone();
    let store = DynamoStore::new(client, prefix.clone());
    let usage = store.usage();
    let issuer = IssuerCredentials {
        client_id: "static/q".into(),
        access_token: "t".into(),
    };
    let queue = Queue::new(
        Arc::new(store),
        Arc::new(LocalSignal::default()),
        issuer,
        // As deployed: the publisher function runs on the table's stream.
        QueueConfig {
            events_from_stream: true,
            ..QueueConfig::default()
        },
    );
    let sink = RecordingSink::default();
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");

    // Per step: read, write, requests, and write units by table/index (thousandths).
    let mut acc: Vec<(f64, f64, f64, BTreeMap<String, u64>)> = vec![Default::default(); 5];
    let mut last = snap(&usage);
    let mut step = |i: usize, last: &mut Snap| {
        let now = snap(&usage);
        let d = delta(last, &now, 1.0);
        acc[i].0 += d.0;
        acc[i].1 += d.1;
        acc[i].2 += d.2;
        for (k, v) in &now.by_target {
            let before = last.by_target.get(k).copied().unwrap_or(0);
            *acc[i].3.entry(k.clone()).or_default() += v - before;
        }
        *last = now;
    };
    for _ in 0..n {
        let id = blackbox::new_task(&queue, &tq, false).await;
        step(0, &mut last);
        drain(&queue, &images, &sink, &id).await;
        step(3, &mut last);
        // claimWork as the endpoint runs it: the worker's quarantine read, the claim, and
        // the worker metadata it records (throttled; claimed runs written five at a time).
        let claims = queue
            .claim_work(&tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claim");
        assert_eq!(claims.len(), 1);
        step(1, &mut last);
        drain(&queue, &images, &sink, &id).await;
        step(3, &mut last);
        queue
            .resolve(&id, 0, ReasonResolved::Completed, Ts::now())
            .await
            .expect("complete");
        step(2, &mut last);
        drain(&queue, &images, &sink, &id).await;
        step(3, &mut last);
        // The dependency worker visits every resolution: clears its mark and takes the task
        // off its group's unresolved count (announcing the group, which has no other task).
        let resolution = image(&images, &id).await;
        shared::jobs::dependencies_of(&queue, vec![resolution], Ts::now())
            .await
            .expect("dependency worker");
        step(4, &mut last);
        drain(&queue, &images, &sink, &id).await;
        step(3, &mut last);
    }
    println!(
        "DynamoDB cost per task life cycle, averaged over {n} (ReturnConsumedCapacity=INDEXES)"
    );
    println!(
        "| step | read units | write units | DynamoDB requests | write units by table/index |"
    );
    println!("|---|---|---|---|---|");
    let names = [
        "createTask",
        "claimWork (1 task, recording its worker)",
        "reportCompleted",
        "event delivery (publisher on each write's stream record: 4 writes with events)",
        "dependency worker (resolution seen, group count)",
    ];
    let nf = n as f64;
    let mut sum = (0.0, 0.0, 0.0);
    let mut sum_targets: BTreeMap<String, u64> = BTreeMap::new();
    for (name, t) in names.iter().zip(&acc) {
        let (r, w, q) = (t.0 / nf, t.1 / nf, t.2 / nf);
        sum = (sum.0 + r, sum.1 + w, sum.2 + q);
        for (k, v) in &t.3 {
            *sum_targets.entry(k.clone()).or_default() += v;
        }
        println!(
            "| {name} | {r:.2} | {w:.2} | {q:.2} | {} |",
            per_target(&t.3, nf)
        );
    }
    println!(
        "| **total** | {:.2} | {:.2} | {:.2} | {} |",
        sum.0,
        sum.1,
        sum.2,
        per_target(&sum_targets, nf)
    );
    println!("events delivered: {}", sink.events().len());
    let arn = describe
        .describe_table()
        .table_name(format!("{prefix}tasks"))
        .send()
        .await
        .map_err(|e| e.to_string())
        .and_then(|t| {
            t.table()
                .and_then(|t| t.latest_stream_arn())
                .map(String::from)
                .ok_or_else(|| "no stream".to_string())
        });
    match stream_records(arn).await {
        Ok(records) => {
            // The dependency resolver's two filters (tests/tests/infra.rs): a write that
            // removes the `deadline` entry (a resolution), or one that carries the mark.
            let resolutions = records
                .iter()
                .filter(|r| {
                    let (old, new) = (&r["dynamodb"]["OldImage"], &r["dynamodb"]["NewImage"]);
                    let resolving = r["eventName"] == "MODIFY"
                        && old["deadline_pk"]["S"].is_string()
                        && new["deadline_pk"].is_null();
                    resolving || new["resolved_pk"]["S"].is_string()
                })
                .count();
            let nf = n as f64;
            println!();
            println!("Lambda invocations per life cycle, counted from the tasks table's stream");
            println!("| function | invocations |");
            println!("|---|---|");
            println!("| API functions (createTask, claimWork, reportCompleted) | 3 |");
            println!(
                "| publisher (one per stream record at most; batches of up to 100 share one) | ≤ {:.2} |",
                records.len() as f64 / nf
            );
            println!(
                "| dependency-resolver (records passing its filters: resolutions) | ≤ {:.2} |",
                resolutions as f64 / nf
            );
        }
        Err(e) => println!("stream records not counted: {e}"),
    }

    // createTask into a group that exists (the usual case: a decision task's group), whose
    // expiry already covers the task: the group item is only checked, not written.
    let gid = blackbox::slugid();
    let k = 20;
    // A queue of their own: the edges below claim from `tq`.
    let group_tq = blackbox::task_queue_id();
    let in_group = |i: usize| {
        let mut body = blackbox::task_def(&group_tq);
        body["taskGroupId"] = serde_json::json!(gid);
        if i > 0 {
            // Expire before the first task, so that the group's expiry needs no extension.
            body["expires"] = body["deadline"].clone();
        }
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        body
    };
    queue
        .create_task(
            &TaskId::parse(&blackbox::slugid()).expect("id"),
            in_group(0),
            false,
            Ts::now(),
        )
        .await
        .expect("create the group's first task");
    let before = snap(&usage);
    for i in 1..=k {
        queue
            .create_task(
                &TaskId::parse(&blackbox::slugid()).expect("id"),
                in_group(i),
                false,
                Ts::now(),
            )
            .await
            .expect("create in group");
    }
    let after = snap(&usage);
    let (gr, gw, gq) = delta(&before, &after, k as f64);
    let mut targets = BTreeMap::new();
    for (name, v) in &after.by_target {
        targets.insert(
            name.clone(),
            v - before.by_target.get(name).copied().unwrap_or(0),
        );
    }
    println!();
    println!("createTask into an existing group ({k} tasks), per task");
    println!(
        "| step | read units | write units | DynamoDB requests | write units by table/index |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| createTask | {gr:.2} | {gw:.2} | {gq:.2} | {} |",
        per_target(&targets, k as f64)
    );

    // Dependency edges: one dependency with `k` dependents. Creating each dependent (with its
    // edge) is compared with a plain createTask; satisfying is the worker's pass after the
    // dependency completed, per edge.
    let k = 20;
    let dep = TaskId::parse(&blackbox::slugid()).expect("id");
    let mut body = blackbox::task_def(tq.as_str());
    shared::schema::validate_input("create-task-request", &mut body).expect("valid");
    queue
        .create_task(&dep, body, false, Ts::now())
        .await
        .expect("create dependency");
    // Baseline: unscheduled tasks without dependencies (defineTask), so that the difference
    // is the edge alone (its reads, its item and its index entry).
    let base = snap(&usage);
    for _ in 0..k {
        blackbox::new_task(&queue, &tq, true).await;
    }
    let before = snap(&usage);
    for _ in 0..k {
        let id = TaskId::parse(&blackbox::slugid()).expect("id");
        let mut body = blackbox::task_def(tq.as_str());
        body["dependencies"] = serde_json::json!([dep.as_str()]);
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        queue
            .create_task(&id, body, false, Ts::now())
            .await
            .expect("create dependent");
    }
    let created = snap(&usage);
    queue
        .try_claim_work(&tq, "g", "w", 1, Ts::now())
        .await
        .expect("claim");
    queue
        .resolve(&dep, 0, ReasonResolved::Completed, Ts::now())
        .await
        .expect("complete dependency");
    let resolved = snap(&usage);
    let satisfied = queue
        .resolve_dependents(dep.as_str(), Ts::now())
        .await
        .expect("dependency worker");
    assert_eq!(satisfied, k);
    let done = snap(&usage);
    let (br, bw, bq) = delta(&base, &before, k as f64);
    let (cr, cw, cq) = delta(&before, &created, k as f64);
    let (cr, cw, cq) = (cr - br, cw - bw, cq - bq);
    let (sr, sw, sq) = delta(&resolved, &done, k as f64);
    println!();
    println!("Dependency edges ({k} dependents of one task), per edge");
    println!("| step | read units | write units | DynamoDB requests |");
    println!("|---|---|---|---|");
    println!(
        "| createTask with one dependency, minus an unscheduled createTask without | {cr:.2} | {cw:.2} | {cq:.2} |"
    );
    println!(
        "| satisfying the edge (worker; dependent becomes pending) | {sr:.2} | {sw:.2} | {sq:.2} |"
    );

    // A queue of their own, where the dependents above are not pending.
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");
    object_artifacts(&queue, &images, &sink, &usage, &tq).await;
}

/// A new task on `tq` (unscheduled if `define`), created as the endpoint creates it.
/// One object artifact of a running task, per step: createArtifact (artifact and object in one
/// transaction), createUpload (putUrl: a repeat of the upload createArtifact began),
/// finishUpload, finishArtifact (with its `artifact-created` event) and delivering the
/// event. The bytes go to a local blob store: S3 requests are not DynamoDB's.
async fn object_artifacts(
    queue: &Queue,
    images: &DynamoStore,
    sink: &RecordingSink,
    usage: &Usage,
    tq: &TaskQueueId,
) {
    use serde_json::json;
    use shared::blobs::{BlobStore, Bucket, LocalBlobs};
    let k = 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let blobs = LocalBlobs::new(dir.path().to_path_buf(), "http://127.0.0.1:1", "secret");
    let mut ids = vec![];
    for _ in 0..k {
        let id = blackbox::new_task(queue, tq, false).await;
        let claims = queue
            .claim_work(tq, "g", "w", 1, &Ts::now)
            .await
            .expect("claim");
        assert_eq!(claims.len(), 1);
        drain(queue, images, sink, &id).await;
        ids.push(id);
    }
    let mut at = vec![snap(usage)];
    let expires = Ts::now().plus(shared::time::DAY);
    let mut replies = vec![];
    for id in &ids {
        let body = json!({"storageType": "object", "expires": expires, "contentType": "a/b"});
        let r = queue
            .create_artifact(&blobs, id, 0, "public/out.bin", &body, Ts::now())
            .await
            .expect("createArtifact");
        replies.push(r);
    }
    at.push(snap(usage));
    for r in &replies {
        let name = r["name"].as_str().expect("name");
        let body = json!({
            "projectId": r["projectId"], "uploadId": r["uploadId"], "expires": r["expires"],
            "proposedUploadMethods": {"putUrl": {"contentType": "a/b", "contentLength": 3}},
        });
        queue
            .create_upload(&blobs, name, &body, Ts::now())
            .await
            .expect("createUpload");
        let key = shared::records::object::blob_key(name);
        blobs
            .put(Bucket::Private, &key, "a/b", b"abc".to_vec())
            .await
            .expect("bytes");
    }
    at.push(snap(usage));
    for r in &replies {
        let name = r["name"].as_str().expect("name");
        let body = json!({"projectId": r["projectId"], "uploadId": r["uploadId"]});
        queue
            .finish_upload(&blobs, name, &body)
            .await
            .expect("finishUpload");
    }
    at.push(snap(usage));
    for (id, r) in ids.iter().zip(&replies) {
        let upload_id = r["uploadId"].as_str().expect("uploadId");
        queue
            .finish_artifact(id, 0, "public/out.bin", upload_id)
            .await
            .expect("finishArtifact");
    }
    at.push(snap(usage));
    for id in &ids {
        drain(queue, images, sink, id).await;
    }
    at.push(snap(usage));
    println!();
    println!("One object artifact ({k} of them), per artifact");
    println!(
        "| step | read units | write units | DynamoDB requests | write units by table/index |"
    );
    println!("|---|---|---|---|---|");
    let steps = [
        "createArtifact (object)",
        "createUpload (putUrl)",
        "finishUpload",
        "finishArtifact",
        "delivering artifact-created",
    ];
    let (mut tr, mut tw, mut tq_) = (0.0, 0.0, 0.0);
    for (i, step) in steps.iter().enumerate() {
        let (r, w, q) = delta(&at[i], &at[i + 1], k as f64);
        let mut targets = BTreeMap::new();
        for (name, v) in &at[i + 1].by_target {
            let before = at[i].by_target.get(name).copied().unwrap_or(0);
            targets.insert(name.clone(), v - before);
        }
        println!(
            "| {step} | {r:.2} | {w:.2} | {q:.2} | {} |",
            per_target(&targets, k as f64)
        );
        (tr, tw, tq_) = (tr + r, tw + w, tq_ + q);
    }
    println!("| **total** | {tr:.2} | {tw:.2} | {tq_:.2} | |");
}
