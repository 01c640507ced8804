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

    let mut phases = [Snap::default(); 4];
    let mut totals = [(0.0, 0.0, 0.0); 4];
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
        shared::events::drain_task(
            queue.store.as_ref(),
            &sink,
            "x/",
            id.as_str(),
            &queue.published,
        )
        .await
        .expect("drain");
        let end = snap(&usage);
        for (i, (a, b)) in [
            (phases[0], phases[1]),
            (phases[1], phases[2]),
            (phases[2], phases[3]),
            (phases[3], end),
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
    ];
    let mut sum = (0.0, 0.0, 0.0);
    for (name, t) in names.iter().zip(totals) {
        let (r, w, q) = (t.0 / n as f64, t.1 / n as f64, t.2 / n as f64);
        sum = (sum.0 + r, sum.1 + w, sum.2 + q);
        println!("| {name} | {r:.2} | {w:.2} | {q:.2} |");
    }
    println!("| **total** | {:.2} | {:.2} | {:.2} |", sum.0, sum.1, sum.2);
    println!("events delivered: {}", sink.events().len());
}
