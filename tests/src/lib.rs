//! Harness for the black-box tests and benchmarks: each test gets its own server (own data
//! directory, own port) and talks to it over HTTP with the official `taskcluster` crate.

use functions::{start, Running, ServerConfig};
use serde_json::{json, Value};
use shared::events::{Event, FanoutSink, LogSink, RecordingSink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod amqp;
pub mod burst;
pub mod counting;
pub mod crash_loop;
pub mod race;
pub mod release;
pub mod runtime_api;
pub mod scheduler;
pub mod schemathesis;
pub mod shape;
pub mod stacks;

pub use shared::ids::new_slugid as slugid;

/// The root client every test server is configured with.
pub const ROOT_CLIENT_ID: &str = shared::auth::ROOT_CLIENT_ID;
/// Its accessToken (a test fixture, not a secret).
pub const ROOT_ACCESS_TOKEN: &str = "test-root-access-token-not-a-secret-000000";

/// The root client's credentials, for the official clients.
pub fn root_credentials() -> taskcluster::Credentials {
    taskcluster::Credentials::new(ROOT_CLIENT_ID, ROOT_ACCESS_TOKEN)
}

/// A server under test: the local server, or (`TCQ_TEST_BACKEND=shape`) the deployed shape.
pub struct TestServer {
    running: Option<Running>,
    shape: Option<stacks::Lease>,
    /// Every event the server published, in order.
    pub events: RecordingSink,
    /// The data directory (deleted on drop).
    pub dir: tempfile::TempDir,
    /// What the names of the durable queues that feed jobs start with.
    feed_queue_prefix: String,
}

/// True when the suite runs against the deployed shape (`TCQ_TEST_BACKEND=shape`): every
/// function its own process over LocalStack, behind a local HTTP API.
pub fn in_shape() -> bool {
    std::env::var("TCQ_TEST_BACKEND").as_deref() == Ok("shape")
}

/// Tasks in a deployed-shape burst: `TCQ_SHAPE_BURST` (`scripts/test-shape.sh`: 5,000), else
/// 300 (the test command's bounded run).
pub fn shape_burst() -> usize {
    env_num("TCQ_SHAPE_BURST", 300)
}

/// `local`, or `shaped` in the deployed shape: a test's timing or concurrency where a call
/// crosses the gateway, a function process and LocalStack.
pub fn local_or_shape<T>(local: T, shaped: T) -> T {
    if in_shape() {
        shaped
    } else {
        local
    }
}

/// `n` items for a test that loads the store with many: at most half a [`shape_burst`] in
/// the deployed shape (150 in the bounded run: still more than a stream batch or a BatchGetItem
/// of 100), where every item goes through LocalStack's one DynamoDB process, one write lock at
/// a time; `n` elsewhere.
pub fn many(n: usize) -> usize {
    if in_shape() {
        n.min(shape_burst() / 2)
    } else {
        n
    }
}

/// In the deployed shape, says why a test does not apply there (it reaches into the server
/// process, which the deployed shape does not have) and returns true: the test returns.
pub fn not_in_shape(why: &str) -> bool {
    if in_shape() {
        eprintln!("not run against the deployed shape: {why}");
    }
    in_shape()
}

/// The `anonymous` role of test servers (the default is read-only; see
/// `shared::auth::DEFAULT_ANONYMOUS_SCOPES`).
pub const TEST_ANONYMOUS_SCOPES: &str = "queue:get-artifact:public/*";

/// A server with test timings: claimWork waits 2 s, reapers run every 100 ms.
pub async fn spawn_app() -> TestServer {
    spawn_app_with(|_| {}).await
}

/// A server with test timings, adjusted by `f`. In the deployed shape it shares its stack
/// with the other tests configured alike (see [`stacks`]).
pub async fn spawn_app_with(f: impl FnOnce(&mut ServerConfig)) -> TestServer {
    spawn_app_sharing(stacks::Sharing::Shared, &[], f).await
}

/// [`spawn_app`], but in the deployed shape on a stack of its own: for tests that read a
/// whole listing (every client, every provisioner) or count what a job did.
pub async fn spawn_app_alone() -> TestServer {
    spawn_app_alone_with(|_| {}).await
}

/// [`spawn_app_with`], but in the deployed shape on a stack of its own: for tests that count
/// a function's invocations, read a whole index or reap as of a later time.
pub async fn spawn_app_alone_with(f: impl FnOnce(&mut ServerConfig)) -> TestServer {
    spawn_app_sharing(stacks::Sharing::Alone, &[], f).await
}

/// [`spawn_app_alone_with`], with template parameters of the deployed shape besides those
/// the configuration gives (a stream's retries): for tests of the deployed shape only.
pub async fn spawn_shape_alone_with(
    parameters: &[(&str, &str)],
    f: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    spawn_app_sharing(stacks::Sharing::Alone, parameters, f).await
}

async fn spawn_app_sharing(
    sharing: stacks::Sharing,
    parameters: &[(&str, &str)],
    f: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = ServerConfig::defaults();
    cfg.port = 0;
    cfg.bind = "127.0.0.1".into();
    cfg.data_dir = dir.path().to_path_buf();
    cfg.queue.claim_work_timeout_ms = 2_000;
    cfg.reaper_interval_ms = 100;
    cfg.root_access_token = Some(ROOT_ACCESS_TOKEN.into());
    // The suite's scope tests treat unsigned callers as upstream's tests do (public artifacts
    // only); `auth::unsigned_callers_may_read_by_default` checks the default read-only role.
    cfg.queue.anonymous_scopes = Some(TEST_ANONYMOUS_SCOPES.into());
    if on_localstack() {
        // Each server gets tables of its own, so that one test's reapers and publisher never
        // see another's tasks.
        cfg.backend = "aws".into();
        cfg.queue.table_prefix = format!(
            "bb{}-",
            slugid().to_ascii_lowercase().replace(['-', '_'], "x")
        );
        cfg.create_tables = true;
    }
    f(&mut cfg);
    if in_shape() {
        return spawn_shape(cfg, dir, sharing, parameters).await;
    }
    let events = RecordingSink::default();
    let sink = Arc::new(FanoutSink(vec![
        Arc::new(events.clone()),
        Arc::new(LogSink),
    ]));
    let feed_queue_prefix = cfg.queue.feed_queue_prefix.clone();
    let running = start(cfg, sink).await.expect("server starts");
    TestServer {
        running: Some(running),
        shape: None,
        events,
        dir,
        feed_queue_prefix,
    }
}

/// The deployed shape configured as `cfg` configures the local server: a stack (tables,
/// queues, secrets) shared with the tests configured alike unless `sharing` says otherwise,
/// exchanges under a prefix of the stack's own unless the test names its broker (events are
/// recorded under the default prefix, as the local server's sink records them), the test
/// timings as the functions' variables, and the schedules sped up so that the reapers run as
/// often as `reaper_interval_ms` says.
async fn spawn_shape(
    cfg: ServerConfig,
    dir: tempfile::TempDir,
    sharing: stacks::Sharing,
    parameters: &[(&str, &str)],
) -> TestServer {
    use shared::routing::{DEFAULT_EXCHANGE_PREFIX, SCHEDULER_EXCHANGE_PREFIX};
    // The harness's own log (the gateway's failures, given-up batches), with RUST_LOG.
    if std::env::var("RUST_LOG").is_ok() {
        functions::init_tracing(false);
    }
    let stack = fresh_name("sh", 10);
    let mut sc = shape::ShapeConfig::defaults(&stack);
    sc.delete_on_stop = true;
    // What the functions print is the deployed shape's metrics port: a test that reads the
    // metrics gets its functions' output in a directory of its own.
    if cfg.metrics_port.is_some() {
        sc.log_dir = Some(dir.path().join("functions"));
        // The request log lines too, beside the warnings the shape's functions keep.
        sc.env
            .insert("RUST_LOG".into(), "warn,tcq::api=info".into());
    }
    // A test that names its broker binds the exchanges its configuration names, as with the
    // local server; the others get exchanges of their own, so recordings never mix.
    let own = |given: &str, default: &str, what: &str| {
        if given == default && cfg.amqp_url.is_none() {
            format!("exchange/tcq-{stack}/{what}/v1/")
        } else {
            given.to_string()
        }
    };
    let prefix = own(&cfg.queue.exchange_prefix, DEFAULT_EXCHANGE_PREFIX, "queue");
    let sched_prefix = own(
        &cfg.queue.scheduler_exchange_prefix,
        SCHEDULER_EXCHANGE_PREFIX,
        "scheduler",
    );
    sc.parameters = vec![
        ("ExchangePrefix".into(), prefix.clone()),
        ("SchedulerExchangePrefix".into(), sched_prefix.clone()),
        ("SchedulerId".into(), cfg.queue.scheduler_id.clone()),
        (
            "WorkerManagerExchangePrefix".into(),
            cfg.queue.worker_manager_exchange_prefix.clone(),
        ),
        (
            "PriorityAgingMs".into(),
            cfg.queue.priority_aging_ms.to_string(),
        ),
    ];
    if let Some(r) = cfg.queue.claim_work_concurrency {
        sc.parameters.push((
            functions::lambda::catalog::CLAIM_WORK_CONCURRENCY.into(),
            r.to_string(),
        ));
    }
    sc.parameters.extend(
        parameters
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let q = &cfg.queue;
    let mode = shape_claim_mode();
    sc.parameters.push(("ClaimMode".into(), mode.clone()));
    match mode.as_str() {
        // The wait comes through the mode's own parameter, in whole seconds.
        "lambda-short" => sc.parameters.push((
            "ClaimWaitSeconds".into(),
            q.claim_work_timeout_ms.div_ceil(1000).min(20).to_string(),
        )),
        "service" => sc
            .parameters
            .push(("ClaimServiceImage".into(), "local/tc-queue".into())),
        _ => {}
    }
    if mode != "lambda-short" {
        sc.env.insert(
            "TCQ_CLAIM_WORK_TIMEOUT_MS".into(),
            q.claim_work_timeout_ms.to_string(),
        );
    }
    for (k, v) in [
        ("TCQ_CLAIM_TIMEOUT", q.claim_timeout_secs.to_string()),
        (
            "TCQ_MAX_TASK_DEADLINE_DAYS",
            q.max_task_deadline_days.to_string(),
        ),
        (
            "TCQ_GROUP_EXPIRY_EXTENSION_MS",
            q.group_expiry_extension_ms.to_string(),
        ),
        (
            "TCQ_ARTIFACT_EXPIRY_GRACE_MS",
            q.artifact_expiry_grace_ms.to_string(),
        ),
        ("TCQ_LEGACY_EXCHANGES", q.legacy_exchanges.to_string()),
        ("TCQ_RECENT_TASKS_BATCH", q.recent_tasks_batch.to_string()),
        ("TCQ_GROUP_CALL_TASKS", q.group_call_tasks.to_string()),
        (
            "TCQ_RECENT_TASKS_DELAY_MS",
            q.recent_tasks_delay_ms.to_string(),
        ),
        (
            "TCQ_WORKER_INFO_THROTTLE_MS",
            q.worker_info_throttle_ms.to_string(),
        ),
        ("TCQ_TOKEN_REFRESH_MS", q.token_refresh_ms.to_string()),
        ("TCQ_TOKEN_GRACE_MS", q.token_grace_ms.to_string()),
    ] {
        sc.env.insert(k.into(), v);
    }
    if let Some(t) = &cfg.root_access_token {
        sc.env.insert("TCQ_ROOT_ACCESS_TOKEN".into(), t.clone());
    }
    if let Some(a) = &q.anonymous_scopes {
        sc.env.insert("TCQ_ANONYMOUS_SCOPES".into(), a.clone());
    }
    if let Some(n) = q.dependents_per_sec {
        sc.env
            .insert("TCQ_DEPENDENTS_PER_SEC".into(), n.to_string());
    }
    if let Some(url) = &cfg.amqp_url {
        sc.amqp_url = url.clone();
    }
    sc.speedup = 60_000.0 / minute_jobs_every(cfg.reaper_interval_ms).as_millis() as f64;
    // Expiry every `artifact_reaper_interval_ms`, as the local server's loop (deployed: an
    // hour). The outbox sweep keeps the template's five minutes, sped up like the reapers.
    let at_least_a_second = |ms: u64| Duration::from_millis(ms.max(1_000));
    for job in shared::jobs::JOBS {
        if job.local == shared::jobs::declare::Local::Expiry {
            let every = at_least_a_second(cfg.artifact_reaper_interval_ms);
            sc.periods.insert(job.name.into(), every);
        }
    }
    let prefixes = vec![
        (prefix, DEFAULT_EXCHANGE_PREFIX.to_string()),
        (sched_prefix, SCHEDULER_EXCHANGE_PREFIX.to_string()),
    ];
    let start_sc = sc.clone();
    let lease = stacks::lease(&sc, sharing, move || {
        stacks::start_stack(start_sc, prefixes)
    })
    .await;
    record_ran_in_shape();
    TestServer {
        running: None,
        events: lease.stack.events.clone(),
        feed_queue_prefix: format!("{}-", lease.stack.shape.stack),
        shape: Some(lease),
        dir,
    }
}

/// How often the jobs deployed every minute (the reapers, the priority ager) run for a server
/// configured with `reaper_interval_ms`: as often locally; in the deployed shape, the minute
/// is sped up to `reaper_interval_ms` but no shorter than three seconds: every firing of the
/// one-minute jobs queries four index shards each, about 50 ms apiece on LocalStack's
/// DynamoDB, so at a second an idle stack kept a third of a core busy (measured), and the
/// tests' claims and deadlines still resolve within their waits.
pub fn minute_jobs_every(reaper_interval_ms: u64) -> Duration {
    let ms = reaper_interval_ms.max(1);
    Duration::from_millis(if in_shape() { ms.max(3_000) } else { ms })
}

/// The template's `ClaimMode` the deployed-shape tests run in: `TCQ_SHAPE_CLAIM_MODE`
/// (`lambda`, `lambda-short` or `service`), else the template's default.
pub fn shape_claim_mode() -> String {
    std::env::var("TCQ_SHAPE_CLAIM_MODE").unwrap_or_else(|_| "lambda".into())
}

/// The claim routes go to the claim service: the tests run against the deployed shape with
/// `TCQ_SHAPE_CLAIM_MODE=service`.
pub fn claims_on_service() -> bool {
    in_shape() && shape_claim_mode() == "service"
}

/// Appends the running test's name to the file `TCQ_SHAPE_RAN` names, if any: the test
/// command's LocalStack pass leaves out the tests that ran against the deployed shape (over
/// the same DynamoDB), and runs those that returned before starting a server there. The name
/// is the test thread's (libtest names each test's thread after it; with one test thread,
/// nothing is recorded and the LocalStack pass runs everything).
fn record_ran_in_shape() {
    use std::io::Write;
    let (Ok(path), Some(name)) = (
        std::env::var("TCQ_SHAPE_RAN"),
        std::thread::current().name().map(String::from),
    ) else {
        return;
    };
    if !name.contains("::") {
        return;
    }
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{name}"));
    if let Err(e) = appended {
        panic!("cannot record the test in {path}: {e}");
    }
}

/// The queue's own operations over a deployed shape's tables (stack `stack` on LocalStack),
/// for seeding and looking at what the functions wrote.
pub async fn shape_queue(stack: &str) -> Arc<shared::queue::Queue> {
    Arc::new(queue_over(&format!("{stack}-"), true).await)
}

/// How far the embedded backend's indexes lag its writes in this run (`TCQ_INDEX_LAG_MS`,
/// none when unset).
pub fn index_lag() -> Duration {
    Duration::from_millis(env_num("TCQ_INDEX_LAG_MS", 0))
}

/// How long the server's background passes let its indexes settle before a second look
/// (`QueueConfig::index_settle_ms`): the default on DynamoDB, else twice the embedded
/// backend's lag, as the local server sets it.
pub fn index_settle() -> Duration {
    if on_localstack() || in_shape() {
        Duration::from_millis(shared::queue::QueueConfig::default().index_settle_ms)
    } else {
        index_lag() * 2
    }
}

/// Waits until every index shows what was written before the call. For the tests that read
/// an index, or run a job that does, at once after writing and check exactly what it shows:
/// on DynamoDB nothing bounds an index's lag, so only the embedded backend's, which is set on
/// purpose (`TCQ_INDEX_LAG_MS`), is waited for.
pub async fn settle_indexes() {
    let lag = index_lag();
    if !lag.is_zero() {
        tokio::time::sleep(lag + Duration::from_millis(50)).await;
    }
}

/// The queue's own operations over an embedded store at `path` (benches that drive the queue
/// in process), with `cfg`.
pub fn embedded_queue(path: &Path, cfg: shared::queue::QueueConfig) -> shared::queue::Queue {
    let store = shared::store::sqlite::SqliteStore::open(path).expect("SQLite store");
    shared::queue::Queue::new(
        Arc::new(store),
        Arc::new(shared::signal::LocalSignal::default()),
        shared::creds::IssuerCredentials {
            client_id: "static/q".into(),
            access_token: "t".into(),
        },
        cfg,
    )
}

/// The queue's own operations over DynamoDB tables named `<prefix><table>` (LocalStack from
/// the `AWS_*` variables), its events taken from the tables' streams if `from_stream`.
pub async fn queue_over(prefix: &str, from_stream: bool) -> shared::queue::Queue {
    let sdk = shared::store::dynamodb::sdk_config()
        .await
        .expect("AWS environment");
    let store = shared::store::dynamodb::DynamoStore::new(&sdk, prefix).expect("store");
    shared::queue::Queue::new(
        Arc::new(store),
        Arc::new(shared::signal::LocalSignal::default()),
        shared::creds::IssuerCredentials {
            client_id: "static/taskcluster/queue".into(),
            access_token: "seeding".into(),
        },
        shared::queue::QueueConfig {
            events_from_stream: from_stream,
            ..Default::default()
        },
    )
}

impl TestServer {
    /// The rootUrl.
    pub fn root_url(&self) -> String {
        match (&self.running, &self.shape) {
            (Some(r), _) => r.root_url(),
            (None, Some(s)) => s.stack.shape.root_url(),
            _ => String::new(),
        }
    }

    /// An official client with the root credentials, without retries (so 5xx surface at
    /// once).
    pub fn queue(&self) -> taskcluster::Queue {
        queue_client(&self.root_url())
    }

    /// An official queue client with the given credentials (`None`: unsigned).
    pub fn queue_as(&self, creds: Option<taskcluster::Credentials>) -> taskcluster::Queue {
        taskcluster::Queue::new(builder(&self.root_url(), creds)).expect("client")
    }

    /// An official auth client with the root credentials.
    pub fn auth(&self) -> taskcluster::Auth {
        self.auth_as(Some(root_credentials()))
    }

    /// An official auth client with the given credentials (`None`: unsigned).
    pub fn auth_as(&self, creds: Option<taskcluster::Credentials>) -> taskcluster::Auth {
        taskcluster::Auth::new(builder(&self.root_url(), creds)).expect("client")
    }

    /// The API the server hosts (its queue and blob store), for tests that must reach past
    /// HTTP, e.g. to sign an already-expired upload URL (not in the deployed shape: see
    /// [`not_in_shape`]).
    pub fn api(&self) -> Arc<shared::api::Api> {
        self.running
            .as_ref()
            .map(|r| r.api.clone())
            .expect("a local server is running")
    }

    /// Where the deployed shape's functions print (EMF lines and logs), when the test asked
    /// for metrics (`metrics_port`).
    pub fn function_logs(&self) -> Option<PathBuf> {
        self.shape().and_then(|s| s.log_dir.clone())
    }

    /// The deployed shape under test, if that is what runs.
    pub fn shape(&self) -> Option<&shape::Shape> {
        self.shape.as_ref().map(|s| &s.stack.shape)
    }

    /// The queue's operations over the server's own store (the local server's queue, or one
    /// over the deployed shape's tables, configured as its functions are), for tests that
    /// prepare state faster than through the API.
    pub async fn domain_queue(&self) -> Arc<shared::queue::Queue> {
        if let Some(r) = &self.running {
            return r.api.queue.clone();
        }
        shape_queue(&self.shape().expect("a server").stack).await
    }

    /// The name of the durable queue on the broker that feeds `feed`'s job: the local
    /// server's (`TCQ_FEED_QUEUE_PREFIX`), or the deployed shape's (`<stack>-<queue>`).
    pub fn feed_queue(&self, feed: &shared::jobs::declare::Feed) -> String {
        format!("{}{}", self.feed_queue_prefix, feed.queue)
    }

    /// The server's artifact buckets (the local server's blob store, or the deployed shape's
    /// buckets as its functions see them), for tests that sign URLs or reap artifacts
    /// themselves.
    pub async fn domain_blobs(&self) -> Arc<dyn shared::blobs::BlobStore> {
        if let Some(r) = &self.running {
            return r.api.blobs.clone();
        }
        let shape = self.shape().expect("a server");
        let bucket = |var: &str| {
            shape
                .function_env(var)
                .unwrap_or_else(|| panic!("no function has {var}"))
        };
        let sdk = shared::store::dynamodb::sdk_config()
            .await
            .expect("AWS environment");
        Arc::new(shared::blobs::S3Blobs::new(
            &sdk,
            bucket("TCQ_PUBLIC_ARTIFACT_BUCKET"),
            bucket("TCQ_PRIVATE_ARTIFACT_BUCKET"),
            None,
        ))
    }

    /// Full URL of an API path such as `/task/<id>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/api/queue/v1{path}", self.root_url())
    }

    /// Every event published so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.events()
    }

    /// Waits until an event matching `pred` has been published.
    pub async fn wait_for_event(
        &self,
        timeout: Duration,
        pred: impl Fn(&Event) -> bool,
    ) -> Option<Event> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events().into_iter().find(|e| pred(e)) {
                return Some(e);
            }
            if Instant::now() > until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server (the data directory stays until drop); a deployed-shape stack goes
    /// with its last test.
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        self.shape = None;
    }
}

/// A client builder for `root_url` without retries, signing with `creds` if given.
pub fn builder(
    root_url: &str,
    creds: Option<taskcluster::Credentials>,
) -> taskcluster::ClientBuilder {
    let b = taskcluster::ClientBuilder::new(root_url)
        .retry(taskcluster::Retry {
            retries: 0,
            ..Default::default()
        })
        .timeout(Duration::from_secs(60));
    match creds {
        Some(c) => b.credentials(c),
        None => b,
    }
}

/// An official client for `root_url` with the root credentials, without retries.
pub fn queue_client(root_url: &str) -> taskcluster::Queue {
    taskcluster::Queue::new(builder(root_url, Some(root_credentials()))).expect("client")
}

/// The `statuses` entries (`{taskId, status}`) of those of `ids` that exist: `chunk` ids per
/// request, and every page of each (a reply may be cut short by size).
pub async fn statuses_of(
    q: &taskcluster::Queue,
    ids: &[String],
    chunk: usize,
) -> anyhow::Result<Vec<Value>> {
    let mut out = vec![];
    for chunk in ids.chunks(chunk) {
        let body = json!({ "taskIds": chunk });
        let mut token: Option<String> = None;
        loop {
            let r = q.statuses(&body, token.as_deref(), None).await?;
            out.extend(r["statuses"].as_array().cloned().unwrap_or_default());
            token = r["continuationToken"].as_str().map(String::from);
            if token.is_none() {
                break;
            }
        }
    }
    Ok(out)
}

/// An `Authorization` header signing `method url` with the root credentials (for raw HTTP
/// calls).
pub fn root_authorization(method: &str, url: &str) -> String {
    hawk_authorization(ROOT_CLIENT_ID, ROOT_ACCESS_TOKEN, method, url, None)
}

/// An `Authorization` header for `method url` made by the `hawk` crate (an implementation
/// independent of the server's), with a payload hash over `(content type, body)` if given.
pub fn hawk_authorization(
    client_id: &str,
    access_token: &str,
    method: &str,
    url: &str,
    payload: Option<(&str, &[u8])>,
) -> String {
    let url = reqwest::Url::parse(url).expect("URL");
    let creds = hawk::Credentials {
        id: client_id.into(),
        key: hawk::Key::new(access_token, hawk::SHA256).expect("key"),
    };
    let hash = payload
        .map(|(ct, body)| hawk::PayloadHasher::hash(ct, hawk::SHA256, body).expect("payload hash"));
    let header = hawk::RequestBuilder::from_url(method, &url)
        .expect("request")
        .hash(hash.as_deref())
        .request()
        .make_header(&creds)
        .expect("header");
    format!("Hawk {header}")
}

/// The HTTP status of a failed client call.
pub fn status_of(err: &anyhow::Error) -> Option<u16> {
    taskcluster::err_status_code(err).map(|s| s.as_u16())
}

/// A number from the environment variable `name` (benches' knobs), else `default`.
pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A fresh task queue per test, so that pending work never leaks between tests.
pub fn task_queue_id() -> String {
    fresh_name("test-prov/wt-", 10)
}

/// `prefix` and `letters` random lowercase letters: a name of its own (a stack's, whose tables
/// and queues it prefixes, a task queue's).
pub fn fresh_name(prefix: &str, letters: usize) -> String {
    let mut name = prefix.to_string();
    name.extend(
        slugid()
            .chars()
            .filter(char::is_ascii_alphabetic)
            .take(letters)
            .map(|c| c.to_ascii_lowercase()),
    );
    name
}

/// A date-time `offset_ms` from now, in the wire format.
pub fn ts(offset_ms: i64) -> String {
    shared::time::Ts::now().plus(offset_ms).to_string()
}

/// A minimal valid task definition for `task_queue_id`: created now, deadline in an hour.
pub fn task_def(task_queue_id: &str) -> Value {
    json!({
        "taskQueueId": task_queue_id,
        "created": ts(0),
        "deadline": ts(3_600_000),
        "payload": {},
        "metadata": {
            "name": "black-box test task",
            "description": "created by the black-box suite",
            "owner": "tests@example.com",
            "source": "https://example.com/tests"
        }
    })
}

/// True when the suite runs against DynamoDB on LocalStack (`TCQ_TEST_BACKEND=localstack`,
/// set by `scripts/test.sh` for its second pass) instead of the embedded backend.
pub fn on_localstack() -> bool {
    std::env::var("TCQ_TEST_BACKEND").as_deref() == Ok("localstack")
}

/// Environment variable that marks a re-executed test binary as a server process.
pub const CHILD_ENV: &str = "TCQ_TEST_CHILD_SERVER";

/// Starts the current test binary again as a separate server process, so that it can be
/// SIGKILLed. The binary must contain an `#[ignore]`d test whose path is `test_name` (e.g.
/// `crash::child_server`) and whose body is `run_child_server()`. The child reads its
/// configuration from `TCQ_*` variables.
pub fn spawn_child_server(
    test_name: &str,
    data_dir: &Path,
    port: u16,
    envs: &[(&str, String)],
) -> Child {
    spawn_child_server_to(test_name, data_dir, port, envs, Stdio::null())
}

/// [`spawn_child_server`], its stdout (where its log goes) sent to `stdout`.
pub fn spawn_child_server_to(
    test_name: &str,
    data_dir: &Path,
    port: u16,
    envs: &[(&str, String)],
    stdout: Stdio,
) -> Child {
    let exe = std::env::current_exe().expect("current test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--ignored",
        "--exact",
        test_name,
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "1")
    .env("TCQ_ROOT_ACCESS_TOKEN", ROOT_ACCESS_TOKEN)
    .env("TCQ_DATA_DIR", data_dir)
    .env("TCQ_PORT", port.to_string())
    .env("TCQ_BIND", "127.0.0.1")
    .stdout(stdout)
    .stderr(Stdio::inherit());
    if on_localstack() {
        // The same data directory always maps to the same tables, so a restarted child
        // finds what its predecessor stored.
        let h = data_dir
            .to_string_lossy()
            .bytes()
            .fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100000001b3)
            });
        cmd.env("TCQ_BACKEND", "aws")
            .env("TCQ_TABLE_PREFIX", format!("child{h:x}-"))
            .env("TCQ_CREATE_TABLES", "true");
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child server")
}

/// Body of the ignored child test: serves until killed (does nothing in a normal run).
pub fn run_child_server() {
    if std::env::var(CHILD_ENV).as_deref() != Ok("1") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let cfg = ServerConfig::defaults();
        let _running = start(cfg, Arc::new(LogSink))
            .await
            .expect("child server starts");
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
}

/// Polls `GET /ping` until the server at `root_url` answers.
pub async fn wait_until_up(root_url: &str, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    let client = reqwest::Client::new();
    while Instant::now() < until {
        if client
            .get(format!("{root_url}/api/queue/v1/ping"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Creates a task on `tq` through the queue's own operation (validated as the endpoint
/// validates it), defined only if `define`; for benches that count what operations cost.
pub async fn new_task(
    queue: &shared::queue::Queue,
    tq: &shared::ids::TaskQueueId,
    define: bool,
) -> shared::ids::TaskId {
    let id = shared::ids::TaskId::parse(&slugid()).expect("id");
    let mut body = task_def(tq.as_str());
    shared::schema::validate_input("create-task-request", &mut body).expect("valid");
    queue
        .create_task(&id, body, define, shared::time::Ts::now())
        .await
        .expect("create");
    id
}
