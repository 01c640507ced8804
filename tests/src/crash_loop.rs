//! The crash loop: clients run task life cycles against a server process that a seeded
//! schedule SIGKILLs and restarts on the same data (SQLite directory or LocalStack tables),
//! while a real RabbitMQ consumer records every event. Used by the bounded test
//! (`reliability::`, 3 kills) and the bench (`cargo bench --bench crash_loop`, 25 or more).
//!
//! Afterwards it checks, from the clients' records, the server's statuses and the messages:
//! every createTask that got a 200 exists and reaches a resolution (claim-expired retries
//! included), and so does every task whose createTask gave up but that the server made; no
//! run was handed to two claimWork replies; every state change (each run's pending, running
//! and resolution) has at least one message; and no message describes a state the task never
//! had.

use crate::amqp::{amqp_url, broker_addr, Broker, ALL};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a crash loop is run.
#[derive(Debug, Clone)]
pub struct CrashSpec {
    /// Concurrent clients running life cycles.
    pub clients: usize,
    /// SIGKILLs.
    pub kills: usize,
    /// Seed of the kill schedule (the time each kill waits after the previous restart).
    pub seed: u64,
    /// Longest wait between a restart and the next kill, in ms (the shortest is a fifth).
    pub max_gap_ms: u64,
}

/// What a crash loop found.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Tasks whose createTask got a 200.
    pub tasks: usize,
    /// SIGKILLs done.
    pub kills: usize,
    /// Acknowledged tasks the server no longer knows (must be 0).
    pub lost_tasks: usize,
    /// Acknowledged tasks not resolved by the end (must be 0).
    pub unresolved: usize,
    /// Runs handed to two claimWork replies (must be 0).
    pub double_claims: usize,
    /// State changes without any message (must be 0).
    pub lost_messages: usize,
    /// Messages about a state the task never had (must be 0).
    pub phantom_messages: usize,
    /// A few of those, as `taskId kind runId`, to say which.
    pub phantom_examples: Vec<String>,
    /// Tasks whose createTask gave up (the server down through its retries) but that the
    /// server had made: checked like the acknowledged ones.
    pub made_unacknowledged: usize,
    /// Messages delivered more than once (allowed: at least once).
    pub duplicates: usize,
    /// Messages received in all.
    pub messages: usize,
    /// Runs in all (retries after claim expiry included).
    pub runs: usize,
    /// Seconds from each SIGKILL to the restarted server answering `ping` (none where the
    /// next invocation starts a new instance by itself: the deployed shape).
    pub recovery_secs: Vec<f64>,
    /// What each SIGKILL ended (`server`, or a function's logical id).
    pub killed: Vec<String>,
    /// Task statuses still holding events once the messages were read (must be 0), where
    /// the target can tell.
    pub outboxes_left: Option<u64>,
}

impl CrashReport {
    /// The report on one line.
    pub fn line(&self) -> String {
        let rec =
            |f: fn(f64, f64) -> f64, init: f64| self.recovery_secs.iter().copied().fold(init, f);
        let mean = rec(|a, b| a + b, 0.0) / self.recovery_secs.len().max(1) as f64;
        let after = if self.recovery_secs.is_empty() {
            format!("killed {}", self.killed.join(", "))
        } else {
            format!(
                "recovery after a kill {mean:.2} s mean, {:.2} s max",
                rec(f64::max, 0.0)
            )
        };
        format!(
            "{} tasks ({} more made but not acknowledged), {} runs, {} kills: lost tasks {}, unresolved {}, double claims {}, lost messages {}, phantom messages {}{}, duplicates delivered {} of {} messages{}; {after}",
            self.tasks, self.made_unacknowledged, self.runs, self.kills, self.lost_tasks,
            self.unresolved, self.double_claims, self.lost_messages, self.phantom_messages,
            if self.phantom_examples.is_empty() { String::new() } else { format!(" ({})", self.phantom_examples.join(", ")) },
            self.duplicates, self.messages,
            self.outboxes_left.map_or(String::new(), |n| format!(", outboxes holding events {n}"))
        )
    }

    /// True if every must-be-0 figure is 0.
    pub fn passed(&self) -> bool {
        self.lost_tasks == 0
            && self.outboxes_left.unwrap_or(0) == 0
            && self.unresolved == 0
            && self.double_claims == 0
            && self.lost_messages == 0
            && self.phantom_messages == 0
    }
}

/// A small deterministic generator for the kill schedule (SplitMix64).
fn next(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The server settings a crash loop needs besides the broker's: short claims, so that a run
/// whose worker lost its reportCompleted to a kill expires and is retried soon.
pub fn server_envs() -> Vec<(&'static str, String)> {
    vec![
        ("TCQ_CLAIM_TIMEOUT", "3".to_string()),
        ("TCQ_REAPER_INTERVAL_MS", "200".to_string()),
        ("TCQ_CLAIM_WORK_TIMEOUT_MS", "300".to_string()),
    ]
}

#[derive(Default)]
struct Records {
    created: Vec<String>,
    /// createTask calls that gave up: the server may have made the task before a kill.
    unsure: Vec<String>,
    claims: Vec<(String, u64)>,
}

/// What a crash loop runs against and kills.
pub trait Target {
    /// Its root URL.
    fn root(&self) -> String;
    /// SIGKILLs (a part of) it, `pick` choosing what, and waits until it serves again: what
    /// it killed, and the seconds it took to serve again if it had to be restarted.
    fn kill(&mut self, pick: u64) -> impl std::future::Future<Output = (String, Option<f64>)>;
    /// How many tasks still have events waiting for the sweeper (in their outboxes, or held),
    /// once it had its time;
    /// `None` if it cannot tell.
    fn outboxes_left(&self) -> impl std::future::Future<Output = Option<u64>> {
        async { None }
    }
    /// Stops it.
    fn stop(&mut self);
}

/// One server process, restarted on the same data after each kill.
struct Process<F: Fn(u16, &[(&str, String)]) -> Child> {
    child: Child,
    spawn: F,
    port: u16,
    envs: Vec<(&'static str, String)>,
}

impl<F: Fn(u16, &[(&str, String)]) -> Child> Target for Process<F> {
    fn root(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn kill(&mut self, _pick: u64) -> (String, Option<f64>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let t = Instant::now();
        self.child = (self.spawn)(self.port, &self.envs);
        assert!(
            crate::wait_until_up(&self.root(), Duration::from_secs(60)).await,
            "server back"
        );
        ("server".into(), Some(t.elapsed().as_secs_f64()))
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The deployed shape: each kill ends one instance of one of its functions, idle or in the
/// middle of an invocation, taking the kinds in turn (an HTTP API's, a stream's, a schedule's;
/// any function's when none of that kind runs); the next invocation starts another.
pub struct Shape {
    /// The stack under test.
    pub app: crate::TestServer,
    /// Kills so far.
    kills: usize,
}

impl Target for Shape {
    fn root(&self) -> String {
        self.app.root_url()
    }

    async fn kill(&mut self, pick: u64) -> (String, Option<f64>) {
        use crate::shape::template::{Function, Source};
        let kinds: [fn(&Function) -> bool; 3] = [
            |f| f.sources.is_empty(),
            |f| f.sources.iter().any(|s| matches!(s, Source::Stream(_))),
            // Scheduled only: the dependency resolver, on both, counts as a stream's.
            |f| f.sources.iter().all(|s| matches!(s, Source::Schedule(_))) && !f.sources.is_empty(),
        ];
        let kind = kinds[self.kills % kinds.len()];
        self.kills += 1;
        let Some(functions) = self.app.shape().map(|s| s.functions.clone()) else {
            return ("nothing".into(), None);
        };
        let killed = functions
            .kill_one(pick, kind)
            .or_else(|| functions.kill_one(pick, |_| true));
        (killed.map_or("nothing".into(), |(id, _)| id), None)
    }

    /// Polled for up to a minute: the sweeper runs every 15 s in the test's shape.
    async fn outboxes_left(&self) -> Option<u64> {
        use shared::records::task::{index, TASKS};
        use shared::store::{shard, SkRange};
        let queue = self.app.domain_queue().await;
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let mut n = 0;
            for s in 0..shard::SHARDS {
                let pk = shard::shard_pk(index::OUTBOX, s);
                let all = &SkRange::default();
                n += queue
                    .store
                    .count_index(TASKS, index::OUTBOX, &pk, all)
                    .await
                    .ok()?;
            }
            let held = shared::events::held::held_records::<shared::records::task::TaskRecord>;
            n += held(queue.store.as_ref(), 1000).await.ok()?.len() as u64;
            if n == 0 || Instant::now() > until {
                return Some(n);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn stop(&mut self) {}
}

/// The broker's consumer of a crash loop: every primary message under its own prefix, in a
/// durable queue of its own.
pub struct Consumer {
    broker: Broker,
    queue: String,
}

impl Consumer {
    /// Connects, and binds its queue before anything is published.
    pub async fn start() -> Consumer {
        let broker = Broker::connect().await;
        let queue = format!("tcq-crash-{}", crate::slugid());
        broker.bind_durable(&ALL, "primary.#", &queue).await;
        Consumer { broker, queue }
    }

    /// The exchange prefix the server under test must publish under.
    pub fn prefix(&self) -> &str {
        &self.broker.prefix
    }
}

/// Runs a crash loop. `spawn(port, envs)` starts the server process on `port` with `envs`
/// (the broker's and [`server_envs`]) over the same data every time.
pub async fn crash_loop(
    spec: &CrashSpec,
    spawn: impl Fn(u16, &[(&str, String)]) -> Child,
) -> CrashReport {
    let consumer = Consumer::start().await;
    let mut envs = server_envs();
    envs.push(("TCQ_AMQP_URL", amqp_url(&broker_addr())));
    envs.push(("TCQ_EXCHANGE_PREFIX", consumer.prefix().to_string()));
    let port = crate::free_port();
    let child = spawn(port, &envs);
    let target = Process {
        child,
        spawn,
        port,
        envs,
    };
    assert!(
        crate::wait_until_up(&target.root(), Duration::from_secs(60)).await,
        "server up"
    );
    crash_loop_on(spec, consumer, target).await
}

/// Runs a crash loop against a deployed shape of its own, configured as [`server_envs`]
/// configure a server, over the machine's broker.
pub async fn crash_loop_in_shape(spec: &CrashSpec) -> CrashReport {
    let consumer = Consumer::start().await;
    let prefix = consumer.prefix().to_string();
    let app = crate::spawn_app_alone_with(move |c| {
        c.amqp_url = Some(amqp_url(&broker_addr()));
        c.queue.exchange_prefix = prefix;
        c.queue.claim_timeout_secs = 3;
        c.queue.claim_work_timeout_ms = 300;
        c.reaper_interval_ms = 200;
    })
    .await;
    crash_loop_on(spec, consumer, Shape { app, kills: 0 }).await
}

/// Runs a crash loop against `target`, whose events `consumer` receives (see the module's
/// notes for what it checks).
pub async fn crash_loop_on(
    spec: &CrashSpec,
    consumer: Consumer,
    mut target: impl Target,
) -> CrashReport {
    let Consumer { broker, queue } = consumer;
    let root = target.root();
    let tq = crate::task_queue_id();
    let records = Arc::new(Mutex::new(Records::default()));
    let (creating, running) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let in_create = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..spec.clients)
        .map(|c| {
            let (root, tq, records) = (root.clone(), tq.clone(), records.clone());
            let flags = Flags {
                creating: creating.clone(),
                in_create: in_create.clone(),
                running: running.clone(),
            };
            tokio::spawn(async move { client(c, &root, &tq, records, flags).await })
        })
        .collect();

    let mut seed = spec.seed;
    let mut recovery = vec![];
    let mut killed = vec![];
    for _ in 0..spec.kills {
        let gap = spec.max_gap_ms / 5 + next(&mut seed) % (spec.max_gap_ms * 4 / 5).max(1);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let (what, back) = target.kill(next(&mut seed)).await;
        killed.push(what);
        recovery.extend(back);
    }
    // Stop creating, and wait for the createTask calls under way (one may be retrying across
    // the last restart): a task acknowledged after the statuses below were read would look
    // lost. Then let the clients claim and complete until every task is resolved (runs lost
    // to a kill expire and are retried), or give up after two minutes.
    creating.store(false, Ordering::SeqCst);
    while in_create.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (created, unsure) = records
        .lock()
        .map(|r| (r.created.clone(), r.unsure.clone()))
        .unwrap_or_default();
    let asked: Vec<String> = created.iter().chain(&unsure).cloned().collect();
    let q = crate::queue_client(&root);
    let until = Instant::now() + Duration::from_secs(120);
    let mut statuses = BTreeMap::new();
    loop {
        // A read that failed (the server busy) is not an answer: keep the last whole one.
        if let Some(read) = fetch_statuses(&q, &asked).await {
            statuses = read;
        }
        let done = statuses.values().all(|s| {
            ["completed", "failed", "exception"].contains(&s["state"].as_str().unwrap_or(""))
        });
        if (done && created.iter().all(|id| statuses.contains_key(id))) || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    running.store(false, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let msgs = broker.rest(&queue, Duration::from_secs(3)).await;
    let outboxes_left = target.outboxes_left().await;
    target.stop();
    broker.delete_queue(&queue).await;

    let records = records
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default();
    let mut report = CrashReport {
        tasks: records.created.len(),
        kills: spec.kills,
        recovery_secs: recovery,
        killed,
        outboxes_left,
        messages: msgs.len(),
        made_unacknowledged: unsure
            .iter()
            .filter(|id| statuses.contains_key(*id))
            .count(),
        ..Default::default()
    };
    report.lost_tasks = records
        .created
        .iter()
        .filter(|id| !statuses.contains_key(*id))
        .count();
    report.unresolved = statuses
        .values()
        .filter(|s| {
            !["completed", "failed", "exception"].contains(&s["state"].as_str().unwrap_or(""))
        })
        .count();
    let mut handed: HashMap<&(String, u64), usize> = HashMap::new();
    for c in &records.claims {
        *handed.entry(c).or_default() += 1;
    }
    report.double_claims = handed.values().filter(|n| **n > 1).count();

    // Every state change that must have a message, and every message seen.
    let mut expected: HashSet<(String, String, Option<u64>)> = HashSet::new();
    for (id, s) in &statuses {
        expected.insert((id.clone(), "task-defined".into(), None));
        for run in s["runs"].as_array().cloned().unwrap_or_default() {
            report.runs += 1;
            let r = run["runId"].as_u64();
            expected.insert((id.clone(), "task-pending".into(), r));
            if run["workerId"].is_string() {
                expected.insert((id.clone(), "task-running".into(), r));
            }
            let resolution = match run["state"].as_str().unwrap_or_default() {
                "completed" => Some("task-completed"),
                "failed" => Some("task-failed"),
                "exception" => Some("task-exception"),
                _ => None,
            };
            if let Some(kind) = resolution {
                expected.insert((id.clone(), kind.into(), r));
            }
        }
    }
    let mut seen: HashMap<(String, String, Option<u64>), usize> = HashMap::new();
    for m in &msgs {
        let kind = broker.short(m).to_string();
        if !kind.starts_with("task-") || kind.starts_with("task-group") {
            continue;
        }
        let id = m.payload["status"]["taskId"].as_str().unwrap_or_default();
        let run = if kind == "task-defined" {
            None
        } else {
            m.payload["runId"].as_u64()
        };
        *seen.entry((id.to_string(), kind, run)).or_default() += 1;
    }
    report.lost_messages = expected.iter().filter(|e| !seen.contains_key(*e)).count();
    let phantoms: Vec<_> = seen.keys().filter(|k| !expected.contains(*k)).collect();
    report.phantom_messages = phantoms.len();
    report.phantom_examples = phantoms
        .iter()
        .take(4)
        .map(|(id, kind, run)| format!("{id} {kind} {run:?}"))
        .collect();
    report.duplicates = seen.values().map(|n| n - 1).sum();
    report
}

/// The statuses of `ids` that exist, every page of them; `None` if any call failed.
async fn fetch_statuses(q: &taskcluster::Queue, ids: &[String]) -> Option<BTreeMap<String, Value>> {
    let entries = crate::statuses_of(q, ids, 500).await.ok()?;
    Some(
        entries
            .into_iter()
            .map(|s| {
                let id = s["taskId"].as_str().unwrap_or_default().to_string();
                (id, s["status"].clone())
            })
            .collect(),
    )
}

/// Retries `f` while the server is down (connection errors and 5xx), up to a minute.
async fn retrying<F, Fut>(mut f: F) -> anyhow::Result<Value>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let transient = crate::status_of(&e).is_none_or(|s| s >= 500);
                if !transient || Instant::now() > until {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What the loop tells its clients.
struct Flags {
    /// Create tasks (cleared when the kills are over).
    creating: Arc<AtomicBool>,
    /// Clients inside a createTask, or about to decide whether to make one.
    in_create: Arc<AtomicUsize>,
    /// Keep going.
    running: Arc<AtomicBool>,
}

/// One client: creates a task, claims one, completes what it claimed; every call retried
/// while the server is down.
async fn client(c: usize, root: &str, tq: &str, records: Arc<Mutex<Records>>, flags: Flags) {
    let q = crate::queue_client(root);
    let body = json!({"workerGroup": "crash", "workerId": format!("c{c}"), "tasks": 1});
    while flags.running.load(Ordering::Relaxed) {
        // Counted before `creating` is read, so that whoever clears `creating` and then sees
        // no create under way knows none will start.
        flags.in_create.fetch_add(1, Ordering::SeqCst);
        if flags.creating.load(Ordering::SeqCst) {
            let id = crate::slugid();
            let mut def = crate::task_def(tq);
            def["retries"] = json!(5);
            let made = retrying(|| q.createTask(&id, &def)).await.is_ok();
            if let Ok(mut r) = records.lock() {
                if made { &mut r.created } else { &mut r.unsure }.push(id);
            }
        }
        flags.in_create.fetch_sub(1, Ordering::SeqCst);
        let Ok(claimed) = retrying(|| q.claimWork(tq, &body)).await else {
            continue;
        };
        for t in claimed["tasks"].as_array().cloned().unwrap_or_default() {
            let id = t["status"]["taskId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let run = t["runId"].as_u64().unwrap_or(u64::MAX);
            if let Ok(mut r) = records.lock() {
                r.claims.push((id.clone(), run));
            }
            // A 409 means the claim expired meanwhile (its run was retried): nothing to do.
            let _ = retrying(|| async { q.reportCompleted(&id, &run.to_string()).await }).await;
        }
    }
}
