//! Capacity units and requests per task life cycle (createTask → claimWork → reportCompleted,
//! plus delivering its events) on DynamoDB, counted from `ReturnConsumedCapacity` by the
//! adapter, not estimated. Needs LocalStack (or AWS) in the standard AWS environment:
//!   bash localstack/localstack.sh start
//!   AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test cargo bench -p blackbox --bench dynamodb_cost
use shared::creds::IssuerCredentials;
use shared::events::RecordingSink;
use shared::ids::{TaskId, TaskQueueId};
use shared::model::ReasonResolved;
use shared::queue::{Queue, QueueConfig};
use shared::signal::LocalSignal;
use shared::store::dynamodb::{self, DynamoStore, Usage};
use shared::time::Ts;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Clone, Copy, Default)]
struct Snap {
    rcu: f64,
    wcu: f64,
    req: u64,
}

fn snap(u: &Usage) -> Snap {
    Snap {
        rcu: u.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        wcu: u.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        req: u.requests.load(Ordering::Relaxed),
    }
}

fn delta(a: Snap, b: Snap, n: f64) -> (f64, f64, f64) {
    (
        (b.rcu - a.rcu) / n,
        (b.wcu - a.wcu) / n,
        (b.req - a.req) as f64 / n,
    )
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
    let prefix = format!(
        "cost{}-",
        blackbox::slugid()
            .to_ascii_lowercase()
            .replace(['-', '_'], "x")
    );
    dynamodb::create_tables(&client, &prefix, false)
        .await
        .expect("tables");
    let store = DynamoStore::new(client, prefix);
    let usage = store.usage();
    let issuer = IssuerCredentials {
        client_id: "static/q".into(),
        access_token: "t".into(),
    };
    let queue = Queue::new(
        Arc::new(store),
        Arc::new(LocalSignal::default()),
        issuer,
        QueueConfig::default(),
    );
    let sink = RecordingSink::default();
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");

    let mut phases = [Snap::default(); 5];
    let mut totals = [(0.0, 0.0, 0.0); 5];
    for _ in 0..n {
        let id = TaskId::parse(&blackbox::slugid()).expect("id");
        let body = blackbox::task_def(tq.as_str());
        let mut body = body;
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        phases[0] = snap(&usage);
        queue
            .create_task(&id, body, false, Ts::now())
            .await
            .expect("create");
        phases[1] = snap(&usage);
        let claims = queue
            .try_claim_work(&tq, "g", "w", 1, Ts::now())
            .await
            .expect("claim");
        assert_eq!(claims.claims.len(), 1);
        phases[2] = snap(&usage);
        queue
            .resolve(&id, 0, ReasonResolved::Completed, Ts::now())
            .await
            .expect("complete");
        phases[3] = snap(&usage);
        shared::events::drain_task::<shared::model::TaskRecord>(
            queue.store.as_ref(),
            &sink,
            "x/",
            id.as_str(),
            &queue.published,
        )
        .await
        .expect("drain");
        phases[4] = snap(&usage);
        // The dependency worker visits every resolution: clears its mark and takes the task
        // off its group's unresolved count (announcing the group, which has no other task).
        queue
            .resolve_dependents(id.as_str(), Ts::now())
            .await
            .expect("dependency worker");
        let end = snap(&usage);
        for (i, (a, b)) in [
            (phases[0], phases[1]),
            (phases[1], phases[2]),
            (phases[2], phases[3]),
            (phases[3], phases[4]),
            (phases[4], end),
        ]
        .into_iter()
        .enumerate()
        {
            let d = delta(a, b, 1.0);
            totals[i].0 += d.0;
            totals[i].1 += d.1;
            totals[i].2 += d.2;
        }
    }
    println!("DynamoDB cost per task life cycle, averaged over {n} (ReturnConsumedCapacity=TOTAL)");
    println!("| step | read units | write units | DynamoDB requests |");
    println!("|---|---|---|---|");
    let names = [
        "createTask",
        "claimWork (1 task)",
        "reportCompleted",
        "event delivery (outbox drain)",
        "dependency worker (mark, group count)",
    ];
    let mut sum = (0.0, 0.0, 0.0);
    for (name, t) in names.iter().zip(totals) {
        let (r, w, q) = (t.0 / n as f64, t.1 / n as f64, t.2 / n as f64);
        sum = (sum.0 + r, sum.1 + w, sum.2 + q);
        println!("| {name} | {r:.2} | {w:.2} | {q:.2} |");
    }
    println!("| **total** | {:.2} | {:.2} | {:.2} |", sum.0, sum.1, sum.2);
    println!("events delivered: {}", sink.events().len());

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
        let id = TaskId::parse(&blackbox::slugid()).expect("id");
        let mut body = blackbox::task_def(tq.as_str());
        shared::schema::validate_input("create-task-request", &mut body).expect("valid");
        queue
            .create_task(&id, body, true, Ts::now())
            .await
            .expect("define");
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
    let (br, bw, bq) = delta(base, before, k as f64);
    let (cr, cw, cq) = delta(before, created, k as f64);
    let (cr, cw, cq) = (cr - br, cw - bw, cq - bq);
    let (sr, sw, sq) = delta(resolved, done, k as f64);
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
}
