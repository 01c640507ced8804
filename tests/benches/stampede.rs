//! What one new run costs a task queue that many claimWork calls wait on: store requests
//! (reads, writes, writes refused on their condition) per run, by number of waiters.
//!
//! Run: `cargo bench -p blackbox --bench stampede` (RabbitMQ on 127.0.0.1:5672 for the
//! broker rows; `BENCH_WAITERS=1,10,100,1000`, `BENCH_RUNS=50`).
//!
//! For each number of waiters, that many workers wait on one task queue in claimWork (tasks:
//! 1), each calling it again as soon as it answers, and runs are created one at a time, each
//! once the previous one was claimed: a run's cost includes its worker's next claimWork. The store is
//! SQLite behind a counter of requests (the same requests DynamoDB would bill). Scheduled
//! re-reads of the index are set an hour apart, so what is counted is what the wake-ups
//! cause; the createTask requests themselves are counted apart and left out. Rows:
//! - **one process**: the waiters and createTask in one process (the local server, or one
//!   claim service), with the in-process signal;
//! - **processes, broker**: the waiters spread over 10 processes (queues with their own
//!   RabbitMQ signal, as claimWork functions or claim services are), createTask in another;
//! - **wake all** (for comparison): the in-process signal with every waiter woken for each
//!   run, as before wake-ups went to one waiter each.

use blackbox::counting::Counting;
use blackbox::env_num;
use shared::creds::IssuerCredentials;
use shared::ids::TaskQueueId;
use shared::queue::{PollSchedule, Queue, QueueConfig};
use shared::signal::amqp::AmqpSignal;
use shared::signal::{LocalSignal, Waiter, WorkSignal};
use shared::store::sqlite::SqliteStore;
use shared::time::Ts;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The in-process signal as it was first: each notify wakes every waiter of the queue, and
/// carries no hint (every waiter reads the index).
#[derive(Default)]
struct WakeAll(LocalSignal);

#[async_trait::async_trait]
impl WorkSignal for WakeAll {
    fn waiter(&self, q: &str) -> Waiter {
        self.0.waiter(q)
    }
    fn notify(&self, q: &str, _hint: &dyn Fn() -> Option<shared::signal::Hint>) {
        for _ in 0..self.0.waiting(q).max(1) {
            self.0.notify(q, &|| None);
        }
    }
}

fn issuer() -> IssuerCredentials {
    IssuerCredentials {
        client_id: "static/taskcluster/queue".into(),
        access_token: "bench".into(),
    }
}

fn config() -> QueueConfig {
    let hour = PollSchedule {
        first_ms: 3_600_000,
        max_ms: 3_600_000,
    };
    QueueConfig {
        claim_work_timeout_ms: 3_600_000,
        claim_work_poll: hour,
        claim_work_poll_woken: hour,
        ..QueueConfig::default()
    }
}

struct Row {
    setup: &'static str,
    waiters: usize,
    per_run: [f64; 3],
    pickup_p50_ms: f64,
    pickup_max_ms: f64,
}

/// `waiters` claimWork calls spread over `claimers`, `runs` runs created by `creator`.
async fn measure(
    setup: &'static str,
    store: &Counting,
    creator: &Queue,
    claimers: &[Arc<Queue>],
    waiters: usize,
    runs: usize,
) -> Row {
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");
    let claimed = Arc::new(AtomicUsize::new(0));
    let mut handles = vec![];
    for i in 0..waiters {
        let q = claimers[i % claimers.len()].clone();
        let (tq, claimed) = (tq.clone(), claimed.clone());
        // A worker: it calls claimWork again as soon as one answers.
        handles.push(tokio::spawn(async move {
            let w = format!("w{i}");
            loop {
                let claims = q
                    .claim_work(&tq, "g", &w, 1, &Ts::now)
                    .await
                    .expect("claimWork");
                claimed.fetch_add(claims.len(), Ordering::SeqCst);
            }
        }));
    }
    // Every waiter has made its first read and parked once the counts stop moving.
    let mut last = store.counts();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = store.counts();
        if now == last {
            break;
        }
        last = now;
    }
    // What createTask costs alone, on a queue nobody waits on.
    let idle_q = TaskQueueId::parse(&blackbox::task_queue_id()).expect("queue id");
    let before = store.counts();
    for _ in 0..runs {
        blackbox::new_task(creator, &idle_q, false).await;
    }
    let create_cost = store.counts() - before;
    let before = store.counts();
    let mut pickups = vec![];
    for n in 1..=runs {
        let start = Instant::now();
        blackbox::new_task(creator, &tq, false).await;
        while claimed.load(Ordering::SeqCst) < n {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{setup}: run {n} not claimed"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        pickups.push(start.elapsed().as_secs_f64() * 1e3);
    }
    // Those woken and beaten settle back (or finish) before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let spent = store.counts() - before - create_cost;
    for h in handles {
        h.abort();
    }
    pickups.sort_by(f64::total_cmp);
    let per = |v: u64| v as f64 / runs as f64;
    Row {
        setup,
        waiters,
        per_run: [per(spent.reads), per(spent.writes), per(spent.refused)],
        pickup_p50_ms: pickups[pickups.len() / 2],
        pickup_max_ms: pickups.last().copied().unwrap_or_default(),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let waiter_counts: Vec<usize> = std::env::var("BENCH_WAITERS")
        .unwrap_or_else(|_| "1,10,100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs = env_num("BENCH_RUNS", 50usize);
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteStore::open(&dir.path().join("db")).expect("SQLite store");
    let store = Arc::new(Counting::new(Arc::new(sqlite)));
    let url = blackbox::amqp::amqp_url(&blackbox::amqp::broker_addr());
    let broker = tokio::net::TcpStream::connect(blackbox::amqp::broker_addr())
        .await
        .is_ok();
    let queue = |signal: Arc<dyn WorkSignal>| {
        Arc::new(Queue::new(store.clone(), signal, issuer(), config()))
    };
    let mut rows = vec![];
    for &w in &waiter_counts {
        // The process that creates the runs waits too where it is the only one.
        let alone = |label, q: Arc<Queue>| (label, q.clone(), vec![q]);
        let mut setups = vec![alone(
            "one process",
            queue(Arc::new(LocalSignal::default())),
        )];
        if broker {
            let prefix = format!("exchange/bench-stampede-{}/v1/", blackbox::slugid());
            let creator = queue(Arc::new(AmqpSignal::start(url.clone(), &prefix)));
            // Subscriptions are made in the background as waiters first park.
            let claimers: Vec<Arc<Queue>> = (0..10.min(w))
                .map(|_| queue(Arc::new(AmqpSignal::start(url.clone(), &prefix))))
                .collect();
            setups.push(("processes, broker", creator, claimers));
        }
        setups.push(alone(
            "wake all (before)",
            queue(Arc::new(WakeAll::default())),
        ));
        for (label, creator, claimers) in setups {
            rows.push(measure(label, &store, &creator, &claimers, w, runs).await);
        }
    }
    println!();
    println!("Per new run, with that many claimWork calls waiting on its task queue ({runs} runs each; createTask's own requests left out):");
    println!();
    println!("| setup | waiters | reads | writes | refused writes | pickup p50 | pickup max |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} ms | {:.2} ms |",
            r.setup,
            r.waiters,
            r.per_run[0],
            r.per_run[1],
            r.per_run[2],
            r.pickup_p50_ms,
            r.pickup_max_ms
        );
    }
    if !broker {
        println!(
            "\n(no RabbitMQ at {}: the broker rows were left out)",
            blackbox::amqp::broker_addr()
        );
    }
}
