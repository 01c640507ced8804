//! The local server: the same [`Api`] that the Lambda functions host, served by axum on
//! 127.0.0.1 over the embedded SQLite backend (or DynamoDB), with the background passes on
//! timers in process.

use crate::assemble::{self, BoxError};
use crate::config::ServerConfig;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, StatusCode};
use serde_json::json;
use shared::api::router::through_gateway;
use shared::api::{error_response, Api, ApiRequest, Serves, MAX_BODY_BYTES};
use shared::auth::ROOT_CLIENT_ID;
use shared::blobs::{BlobStore, LocalBlobs};
use shared::creds::{Issuer, IssuerCredentials};
use shared::error::{ApiError, ErrorCode};
use shared::events::amqp::{self, DurableQueue};
use shared::events::{EventSink, FanoutSink};
use shared::hints::LocalHints;
use shared::jobs::declare::{Context, Local};
use shared::jobs::follow::Follower;
use shared::jobs::{self, Job, Publisher, BATCH, JOBS};
use shared::queue::workers::Flush;
use shared::queue::Queue;
use shared::scheduler::SchedulerSink;
use shared::store::changes::ChangeLog;
use shared::store::shard::Shards;
use shared::store::sqlite::SqliteStore;
use shared::store::Store;
use shared::time::Ts;
use shared::tokens::RotatingToken;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The artifact storage a configuration selects: the local blob store (which this server must
/// also serve) or S3.
pub enum Blobs {
    /// Files under the data directory.
    Local(Arc<LocalBlobs>),
    /// Presigned S3 URLs.
    S3(Arc<dyn BlobStore>),
}

impl Blobs {
    /// The port.
    pub fn port(&self) -> Arc<dyn BlobStore> {
        match self {
            Blobs::Local(l) => l.clone(),
            Blobs::S3(s) => s.clone(),
        }
    }
}

/// Opens the configured artifact storage. `root_url` is where this server answers (for local
/// blob URLs); `secret` keys their signatures. With `create_tables`, missing buckets are made.
pub async fn open_blobs(
    cfg: &ServerConfig,
    root_url: &str,
    secret: &str,
) -> Result<Blobs, BoxError> {
    let s3 = match cfg.queue.artifact_storage.as_deref() {
        Some(kind) => kind == "s3",
        None => cfg.on_aws(),
    };
    if s3 {
        let s3 = assemble::open_s3(&cfg.queue, cfg.create_tables).await?;
        return Ok(Blobs::S3(Arc::new(s3)));
    }
    Ok(Blobs::Local(Arc::new(LocalBlobs::new(
        cfg.data_dir.join("blobs"),
        root_url,
        secret,
    ))))
}

/// A running local server.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The API it serves.
    pub api: Arc<Api>,
    /// The root client's credentials (for the `TASKCLUSTER_*` lines the binary prints).
    pub root: IssuerCredentials,
    /// Where the metrics are served, if they are ([`ServerConfig::metrics_port`]).
    pub metrics_addr: Option<SocketAddr>,
    /// The namespace of the EMF lines it prints, if it does ([`ServerConfig::metrics_emf_secs`]).
    emf_namespace: Option<String>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// `http://<addr>`, the rootUrl for clients.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and the background loops; with EMF output, what the last calls counted
    /// is printed once they are all done.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(namespace) = &self.emf_namespace {
            crate::print_emf(&self.api.queue.metrics, namespace);
        }
    }
}

/// Loads the queue's issuer credentials, creating them on first start (owner-only file).
fn issuer(cfg: &ServerConfig) -> std::io::Result<IssuerCredentials> {
    credentials(
        &cfg.data_dir.join("queue-credentials.json"),
        &cfg.queue.queue_client_id,
        cfg.queue_access_token.as_deref(),
    )
}

/// Loads the root client's credentials, creating them on first start (owner-only file).
fn root(cfg: &ServerConfig) -> std::io::Result<IssuerCredentials> {
    credentials(
        &cfg.data_dir.join("root-credentials.json"),
        ROOT_CLIENT_ID,
        cfg.root_access_token.as_deref(),
    )
}

/// Credentials from configuration, else from `path`, else generated and saved to `path`.
fn credentials(
    path: &Path,
    client_id: &str,
    configured: Option<&str>,
) -> std::io::Result<IssuerCredentials> {
    let make = |token: String| IssuerCredentials {
        client_id: client_id.to_string(),
        access_token: token,
    };
    if let Some(token) = configured {
        return Ok(make(token.to_string()));
    }
    if let Ok(text) = std::fs::read_to_string(path) {
        if let Some(token) = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["accessToken"].as_str().map(String::from))
        {
            return Ok(make(token));
        }
    }
    let token = shared::auth::new_access_token();
    write_private(
        path,
        &json!({ "clientId": client_id, "accessToken": token }).to_string(),
    )?;
    Ok(make(token))
}

/// Owner-only permissions on the database files and, if we created it, the data directory
/// (an existing directory such as `/tmp` is left as it is).
fn restrict(dir: &Path, created: bool) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if created {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        for name in ["queue.db", "queue.db-wal", "queue.db-shm"] {
            let p = dir.join(name);
            if p.exists() {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
            }
        }
    }
    Ok(())
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)?.write_all(text.as_bytes())
}

/// The configured backend, and its change log when the server follows one.
pub struct Opened {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The change log of the tables the stream jobs read ([`jobs::declare::stream_readers`]),
    /// kept by the embedded store unless `TCQ_EVENTS_FROM_STREAM` is false.
    pub log: Option<Arc<dyn ChangeLog>>,
}

/// Opens the configured backend.
pub async fn open_store(cfg: &ServerConfig) -> Result<Opened, BoxError> {
    if cfg.on_aws() {
        let store = assemble::open_dynamodb(&cfg.queue, cfg.create_tables).await?;
        return Ok(Opened {
            store: Arc::new(store),
            log: None,
        });
    }
    let store = SqliteStore::open_with(&cfg.data_dir.join("queue.db"), cfg.sqlite_sync())?;
    let log = match cfg.queue.events_from_stream {
        Some(false) => None,
        _ => {
            let (tables, readers) = jobs::declare::stream_readers();
            store.keep_changes(&tables, &readers).await?;
            Some(Arc::new(store.clone()) as Arc<dyn ChangeLog>)
        }
    };
    let store: Arc<dyn Store> = match cfg.index_lag_ms {
        Some(ms) => {
            let lag = std::time::Duration::from_millis(ms);
            let indexes = shared::store::declared_indexes();
            Arc::new(shared::store::index_lag::IndexLag::new(store, lag, &indexes).await?)
        }
        None => Arc::new(store),
    };
    Ok(Opened { store, log })
}

/// Starts the server and its background loops; events go to `sink` (and to RabbitMQ first,
/// when an AMQP URL is configured).
pub async fn start(cfg: ServerConfig, sink: Arc<dyn EventSink>) -> Result<Running, BoxError> {
    let created = !cfg.data_dir.exists();
    std::fs::create_dir_all(&cfg.data_dir)?;
    let Opened { store, log } = open_store(&cfg).await?;
    restrict(&cfg.data_dir, created)?;
    // As deployed (the claim service) the tokens are read from Secrets Manager and read
    // again when rotated; locally they are configured or kept in the data directory.
    let kept = |c: IssuerCredentials| Arc::new(RotatingToken::fixed(c.access_token));
    let (queue_token, root_token) = assemble::static_tokens(
        cfg.queue_access_token.as_deref(),
        cfg.root_access_token.as_deref(),
        &cfg.queue,
    )
    .await?;
    let issuer = Issuer {
        client_id: cfg.queue.queue_client_id.clone(),
        token: match queue_token {
            Some(t) => t,
            None => kept(issuer(&cfg)?),
        },
    };
    let root = match root_token {
        Some(t) => t,
        None => kept(root(&cfg)?),
    };
    let auth = assemble::auth_service(
        store.clone(),
        Some(&root),
        &issuer,
        cfg.queue.anonymous_scopes(),
    );
    // Printed as EMF, the counts are drained; served to Prometheus, they add up.
    let metrics = match cfg.metrics_emf_secs {
        Some(_) => shared::metrics::Metrics::draining(true),
        None => shared::metrics::Metrics::new(),
    };
    let mut queue_cfg = cfg.queue.queue_config();
    // One process creates and claims: a claim finds the definition createTask wrote.
    queue_cfg.keep_created_defs = true;
    // Following its own change log, the server runs the stream functions' code on its
    // writes' images; else it publishes from the outboxes, which the hints point it to.
    queue_cfg.events_from_stream |= log.is_some();
    let hints = log.is_none().then(|| Arc::new(LocalHints::default()));
    if !cfg.on_aws() {
        // The embedded store's indexes are current, but for a lag put on them on purpose.
        queue_cfg.index_settle_ms = cfg.index_lag_ms.map_or(0, |lag| lag.saturating_mul(2));
        // Nor has it partitions whose writes a release must pace.
        queue_cfg.dependents_per_sec = cfg.queue.dependents_per_sec.unwrap_or(0);
    }
    let mut queue = Queue::new(
        store,
        assemble::work_signal(cfg.amqp_url.as_deref(), &cfg.queue),
        issuer,
        queue_cfg,
    )
    .with_metrics(Arc::new(metrics));
    if let Some(hints) = &hints {
        queue = queue.with_observer(hints.clone());
    }
    let queue = Arc::new(queue);
    // Bound before the API is built: local blob URLs need the address.
    let listener = tokio::net::TcpListener::bind((cfg.bind.as_str(), cfg.port)).await?;
    let addr = listener.local_addr()?;
    let blobs = open_blobs(
        &cfg,
        &format!("http://{addr}"),
        &queue.issuer.token.cached(),
    )
    .await?;
    let api = Arc::new(assemble::api(queue.clone(), auth, blobs.port(), &cfg.queue));
    let (stop, stopped) = watch::channel(false);

    let mut app = axum::Router::new();
    if let Blobs::Local(local) = &blobs {
        let local = local.clone();
        app = app.route(
            &format!("{}{{*key}}", shared::blobs::LOCAL_PREFIX),
            axum::routing::any(move |req: Request<Body>| serve_blob(local.clone(), req)),
        );
    }
    let served = Served {
        api: api.clone(),
        behind_gateway: cfg.behind_gateway,
    };
    let app = app.fallback(serve).with_state(served);
    let mut stop_rx = stopped.clone();
    let http = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        };
        serve_http(listener, app, shutdown).await;
    });
    let mut tasks = vec![http];
    let metrics_addr = match cfg.metrics_port {
        Some(port) => {
            let listener = tokio::net::TcpListener::bind((cfg.bind.as_str(), port)).await?;
            let addr = listener.local_addr()?;
            let app = axum::Router::new()
                .route("/metrics", axum::routing::get(serve_metrics))
                .with_state(Arc::new(Scraped {
                    metrics: queue.metrics.clone(),
                    jobs: scrape_jobs(&cfg, &queue, blobs.port()),
                }));
            let mut stop_rx = stopped.clone();
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                };
                serve_http(listener, app, shutdown).await;
            }));
            Some(addr)
        }
        None => None,
    };
    if let Some(secs) = cfg.metrics_emf_secs {
        let every = Duration::from_secs(secs.max(1));
        tasks.push(tokio::spawn(emf_loop(
            queue.clone(),
            cfg.metrics_namespace.clone(),
            every,
            stopped.clone(),
        )));
    }
    // Worker metadata claims made due goes out whether or not this process runs the jobs.
    tasks.push(tokio::spawn(seen_loop(
        queue.clone(),
        Duration::from_millis(cfg.reaper_interval_ms.max(10)),
        stopped.clone(),
    )));
    if cfg.jobs {
        tasks.extend(start_jobs(
            &cfg,
            &queue,
            &api,
            blobs.port(),
            Following { hints, log },
            sink,
            stopped,
        ));
    }
    tracing::info!(%addr, ?metrics_addr, data_dir = %cfg.data_dir.display(), jobs = cfg.jobs, "queue listening");
    Ok(Running {
        addr,
        api,
        root: IssuerCredentials {
            client_id: ROOT_CLIENT_ID.into(),
            access_token: root.cached(),
        },
        metrics_addr,
        emf_namespace: cfg.metrics_emf_secs.map(|_| cfg.metrics_namespace.clone()),
        stop,
        tasks,
    })
}

/// How the server finds its own writes for the stream jobs: its change log, or (publishing
/// from the outboxes) the hints its writes leave.
struct Following {
    hints: Option<Arc<LocalHints>>,
    log: Option<Arc<dyn ChangeLog>>,
}

/// Every background loop of a server that runs the jobs: each job on the timer its
/// declaration names, each stream job on the change log if there is one, and the publisher's
/// outbox sweep.
fn start_jobs(
    cfg: &ServerConfig,
    queue: &Arc<Queue>,
    api: &Arc<Api>,
    blobs: Arc<dyn BlobStore>,
    following: Following,
    sink: Arc<dyn EventSink>,
    stopped: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let Following { hints, log } = following;
    let mut tasks = vec![];
    let reapers = Duration::from_millis(cfg.reaper_interval_ms.max(10));
    let expiry = Duration::from_millis(cfg.artifact_reaper_interval_ms.max(10));
    // The scheduler consumes the queue's resolution messages in process, last: an event
    // leaves its outbox only once RabbitMQ, the given sink and the scheduler all took it.
    let mut sinks = vec![];
    if let Some(url) = &cfg.amqp_url {
        sinks.push(Arc::new(cfg.queue.amqp_sink(url)) as Arc<dyn EventSink>);
    }
    sinks.push(sink);
    if cfg.scheduler_consumer {
        sinks.push(Arc::new(SchedulerSink(api.scheduler.clone())));
    }
    let publisher = Arc::new(Publisher::new(Arc::new(FanoutSink(sinks))));
    let mut following = vec![];
    for job in JOBS {
        let run = JobLoop {
            job,
            queue: queue.clone(),
            blobs: blobs.clone(),
            grace_ms: cfg.queue.artifact_expiry_grace_ms,
            publisher: job.publishes.then(|| publisher.clone()),
        };
        if job.streams.is_some() {
            following.push(run.clone());
        }
        let every = match job.local {
            Local::Reapers => reapers,
            Local::Expiry => expiry,
            Local::Start => {
                tasks.push(tokio::spawn(run.until_done(stopped.clone())));
                continue;
            }
            Local::Broker => {
                let (Some(url), Some(feed)) = (&cfg.amqp_url, &job.broker) else {
                    continue;
                };
                let q = cfg.queue.feed_queue(feed);
                tasks.push(tokio::spawn(run.feed(url.clone(), q, stopped.clone())));
                continue;
            }
            Local::Publisher | Local::Scrape => continue,
        };
        // Without a change log, this process's resolutions stand for a stream's records.
        let woken_by = hints.clone().filter(|_| job.streams.is_some());
        tasks.push(tokio::spawn(run.every(every, woken_by, stopped.clone())));
    }
    if let Some(log) = log {
        tasks.push(tokio::spawn(follow_streams(
            following,
            log,
            reapers,
            stopped.clone(),
        )));
    }
    tasks.push(tokio::spawn(publisher_loop(
        queue.clone(),
        hints,
        publisher,
        stopped,
    )));
    tasks
}

/// How long the local loops keep at one job per tick while work is due: the same passes as
/// the functions', cut short so that the other loops' work is not held up for long.
fn pass_budget() -> jobs::Budget {
    jobs::Budget::of(Duration::from_secs(5))
}

/// Logs what a pass did, or why it failed (a retryable failure at warn, a bug at error).
fn report(what: &str, result: Result<usize, jobs::JobError>) {
    match result {
        Ok(0) => {}
        Ok(n) => tracing::info!(n, "{what}"),
        Err(e) if e.is_retryable() => {
            tracing::warn!(error = %e, "{what} failed; next pass retries")
        }
        Err(e) => tracing::error!(error = %e, "{what} failed"),
    }
}

/// A job as the local server runs it.
#[derive(Clone)]
struct JobLoop {
    job: &'static Job,
    queue: Arc<Queue>,
    blobs: Arc<dyn BlobStore>,
    grace_ms: i64,
    /// The server's publisher, for a job that publishes.
    publisher: Option<Arc<Publisher>>,
}

impl JobLoop {
    fn context(&self, shards: Shards) -> Context<'_> {
        Context {
            queue: &self.queue,
            blobs: self.blobs.as_ref(),
            artifact_grace_ms: self.grace_ms,
            publisher: self.publisher.as_deref(),
            scheduler: None,
            shards,
        }
    }

    /// Runs the job once.
    async fn once(&self) -> Result<usize, jobs::JobError> {
        self.once_in(Shards::ALL).await
    }

    /// Runs the job once, its passes over the index shards `shards`.
    async fn once_in(&self, shards: Shards) -> Result<usize, jobs::JobError> {
        self.job.run(&self.context(shards), pass_budget()).await
    }

    /// Runs the job until a run succeeds (the broker may come up after the server), backing
    /// off up to 30 s between tries, or until `stop`.
    async fn until_done(self, mut stop: watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(200);
        loop {
            match self.once().await {
                Ok(_) => return tracing::debug!(job = self.job.name, "done at start"),
                Err(e) => {
                    tracing::warn!(job = self.job.name, error = %e, "failed at start; retrying")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    /// Consumes the job's feed, the durable queue `q` on the broker at `url`, until `stop`:
    /// each message goes to the job as an Amazon MQ event of one message (as deployed), and
    /// is acknowledged once handled; a failure puts it back after a pause. Reconnects with
    /// backoff.
    async fn feed(self, url: String, q: DurableQueue, mut stop: watch::Receiver<bool>) {
        use base64::Engine as _;
        let mut backoff = Duration::from_millis(200);
        let this = &self;
        loop {
            let handle = |body: Vec<u8>, redelivered: bool| {
                let event = serde_json::json!({
                    "eventSource": "aws:rmq",
                    "rmqMessagesByQueue": { format!("{}::/", q.name): [{
                        "redelivered": redelivered,
                        "data": base64::engine::general_purpose::STANDARD.encode(body),
                    }] }
                });
                async move {
                    match this
                        .job
                        .on_broker(&this.context(Shards::ALL), &event, Ts::now())
                        .await
                    {
                        Ok(_) => Ok(()),
                        Err(e) => {
                            // Not at once: the broker hands it back straight away.
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            Err(e.to_string())
                        }
                    }
                }
            };
            let began = std::time::Instant::now();
            let why = tokio::select! {
                why = amqp::consume(&url, &q, 10, handle) => why,
                _ = stop.wait_for(|s| *s) => return,
            };
            if began.elapsed() > Duration::from_secs(60) {
                // It consumed for a while: this is a new outage, not the same one.
                backoff = Duration::from_millis(200);
            }
            tracing::warn!(job = self.job.name, queue = %q.name, reason = %why, "feed consumer stopped; reconnecting");
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    /// Runs the job every `every` over every shard, and at once when `woken_by` wakes it for
    /// the resolutions it marked (then only over their shards), until `stop`.
    async fn every(
        self,
        every: Duration,
        woken_by: Option<Arc<LocalHints>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let woken = woken_by
            .as_ref()
            .map_or_else(|| Arc::new(Notify::new()), |h| h.dependents_waiting.clone());
        let mut shards = Shards::ALL;
        loop {
            let notified = woken.notified();
            report(self.job.name, self.once_in(shards).await);
            let hinted = tokio::select! {
                _ = notified => true,
                _ = tokio::time::sleep(every) => false,
                _ = stop.wait_for(|s| *s) => return,
            };
            // A timed pass, or a wake-up whose shards were taken already: every shard.
            let taken = woken_by
                .as_ref()
                .filter(|_| hinted)
                .map_or(Shards::NONE, |h| h.take_resolved_shards());
            shards = if taken == Shards::NONE {
                Shards::ALL
            } else {
                taken
            };
        }
    }
}

/// Follows the stream jobs' streams in `log` until `stop`, one page for all of them at a
/// time (they follow the same tables): at once after this process appends, else every `poll`
/// (another process's writes), at once again while more is there, and after a failure that
/// may pass with a backoff up to 10 s. Of the processes sharing the store, the one holding a
/// reader follows it ([`Follower::hold`]); the others try again every `poll`.
async fn follow_streams(
    runs: Vec<JobLoop>,
    log: Arc<dyn ChangeLog>,
    poll: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    // `followers[i]` is `runs[i]`'s (a job that reads no stream has none, and is dropped).
    let mut followers = Vec::with_capacity(runs.len());
    let mut following = Vec::with_capacity(runs.len());
    for run in runs {
        loop {
            match Follower::start(run.job, log.as_ref()).await {
                Ok(Some(f)) => {
                    followers.push(f);
                    following.push(run);
                    break;
                }
                Ok(None) => break,
                Err(e) => report(run.job.name, Err(e)),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }
    // This process among those sharing the store: one of them follows each reader.
    let holder = shared::jobs::follow::process_holder();
    let appended = log.appended();
    loop {
        // Before the read: a commit after it wakes this wait.
        let woken = appended.notified();
        let (mut failed, mut more) = (false, false);
        for (run, f) in following.iter().zip(followers.iter_mut()) {
            if let Err(e) = f.hold(&holder, Ts::now()).await {
                report(run.job.name, Err(e));
                failed = true;
            }
        }
        let held: Vec<&Follower> = followers.iter().filter(|f| f.holds()).collect();
        // Another process follows: this one's appends are that one's to hand on.
        let following_any = !held.is_empty();
        let read = if !following_any {
            Ok(Default::default())
        } else {
            Follower::read_for(log.as_ref(), &held, BATCH).await
        };
        match read {
            Ok(page) => {
                more = page.more;
                for (run, f) in following.iter().zip(followers.iter_mut()) {
                    if !f.holds() {
                        continue;
                    }
                    let context = run.context(Shards::ALL);
                    if let Err(e) = f.take(&context, &page, &pass_budget()).await {
                        report(run.job.name, Err(e));
                        failed = true;
                    }
                }
            }
            Err(e) => {
                report("reading the change log", Err(e));
                failed = true;
            }
        }
        let pause = if failed {
            backoff = (backoff * 2).min(Duration::from_secs(10));
            backoff
        } else {
            backoff = Duration::from_millis(100);
            if more {
                Duration::ZERO
            } else {
                poll
            }
        };
        let stopping = tokio::select! {
            _ = woken, if !pause.is_zero() && following_any => false,
            _ = tokio::time::sleep(pause) => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        for (run, f) in following.iter().zip(followers.iter_mut()) {
            let marked = if stopping {
                f.release(&holder, Ts::now()).await
            } else if f.holds() {
                f.mark(false).await
            } else {
                Ok(())
            };
            if let Err(e) = marked {
                report(run.job.name, Err(e));
            }
        }
        if stopping {
            return;
        }
    }
}

/// Writes the claimed runs held back for workers' recentTasks (see shared::queue::workers)
/// every `every`, and all of them when the server stops.
async fn seen_loop(queue: Arc<Queue>, every: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        queue.flush_seen(Ts::now(), Flush::Due).await;
        let stopping = tokio::select! {
            _ = tokio::time::sleep(every) => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        if stopping {
            queue.flush_seen(Ts::now(), Flush::All).await;
            return;
        }
    }
}

/// Largest artifact the local server accepts in one PUT.
const MAX_BLOB_BYTES: usize = 1 << 30;

/// Answers a local blob URL (the embedded stand-in for S3).
async fn serve_blob(blobs: Arc<LocalBlobs>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        BLOB_BODY_TIMEOUT,
        axum::body::to_bytes(body, MAX_BLOB_BYTES),
    );
    let Ok(Ok(body)) = read.await else {
        return Response::builder()
            .status(StatusCode::PAYLOAD_TOO_LARGE)
            .body(Body::empty())
            .unwrap_or_else(|_| Response::new(Body::empty()));
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let stored: Vec<(&str, &str)> = shared::blobs::STORED_HEADERS
        .iter()
        .filter_map(|h| header(h).map(|v| (*h, v)))
        .collect();
    let out = blobs
        .serve(
            parts.method.as_str(),
            parts.uri.path(),
            parts.uri.query(),
            header("content-type"),
            &stored,
            &body,
            Ts::now(),
        )
        .await;
    let mut resp = Response::builder()
        .status(StatusCode::from_u16(out.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", out.content_type);
    for (k, v) in &out.headers {
        resp = resp.header(k.as_str(), v.as_str());
    }
    resp.body(Body::from(out.body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// Sweeps the outboxes every second (events left by a crash, a restart, another process, or
/// held by a stream batch that could not deliver them); without a change log, it also
/// delivers what the hints say this process just wrote, at once.
async fn publisher_loop(
    queue: Arc<Queue>,
    hints: Option<Arc<LocalHints>>,
    publisher: Arc<Publisher>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    let sweep_every = Duration::from_secs(1);
    let mut last_sweep = std::time::Instant::now() - sweep_every;
    let waiting = hints
        .as_ref()
        .map_or_else(|| Arc::new(Notify::new()), |h| h.events_waiting.clone());
    loop {
        let woken = waiting.notified();
        let mut result = match &hints {
            Some(hints) => publisher.recent(&queue, hints).await,
            None => Ok(0),
        };
        if result.is_ok() && last_sweep.elapsed() >= sweep_every {
            last_sweep = std::time::Instant::now();
            let dirty = |id: &str| hints.as_ref().is_some_and(|h| h.is_dirty(id));
            result = publisher.sweep(&queue, &dirty, pass_budget()).await;
        }
        let pause = match result {
            Ok(_) => {
                backoff = Duration::from_millis(100);
                sweep_every
            }
            Err(e) => {
                tracing::warn!(error = %e, "publishing failed; will retry");
                backoff = (backoff * 2).min(Duration::from_secs(10));
                backoff
            }
        };
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// How long a client may take to send a request's headers: a slow-loris client that trickles
/// them holds its connection no longer than this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send an API request's body (at most 10 MB).
const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a client may take to send a blob's body (up to 1 GiB, through a signed URL).
const BLOB_BODY_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Serves `app` on `listener` until `shutdown`, then waits for open connections to finish
/// their requests. As `axum::serve`, but with a header read timeout (axum sets no timer, so
/// hyper's would never fire).
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower_service::Service;
    let (closing_tx, closing_rx) = watch::channel(());
    let (open_tx, open_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            // A Router's future owns what it needs: one clone per request, as axum::serve.
            app.clone().call(req.map(Body::new))
        });
        let (mut closing, open) = (closing_rx.clone(), open_rx.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended");
                    }
                }
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = closing_tx.send(());
    drop(open_rx);
    open_tx.closed().await;
}

/// The axum fallback: the web inspector's pages and assets (see `ui::answer`), and every
/// other request to the shared API.
async fn serve(State(served): State<Served>, req: Request<Body>) -> Response<Body> {
    let api = served.api;
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
    if let Some(page) = crate::ui::answer(req.method(), req.uri().path(), accept) {
        return to_http(page);
    }
    let (mut parts, body) = req.into_parts();
    let read = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES + 1));
    let body = match read.await {
        Ok(Ok(b)) if b.len() <= MAX_BODY_BYTES => b,
        Err(_) => {
            let e = ApiError::new(
                ErrorCode::RequestTimeout,
                format!("The request body did not arrive within {BODY_TIMEOUT:?}"),
            );
            let info =
                json!({ "method": "unknown", "params": {}, "payload": {}, "time": Ts::now() });
            return to_http(error_response(&e, &parts.method, info));
        }
        Ok(_) => {
            let e = ApiError::new(
                ErrorCode::InputTooLarge,
                format!("Request body exceeds {MAX_BODY_BYTES} bytes"),
            );
            let info =
                json!({ "method": "unknown", "params": {}, "payload": {}, "time": Ts::now() });
            return to_http(error_response(&e, &parts.method, info));
        }
    };
    // Behind the gateway, its id for the request (the integration sets the header).
    let request_id = served
        .behind_gateway
        .then(|| {
            parts
                .headers
                .get(shared::api::caller::GATEWAY_REQUEST_ID_HEADER)
        })
        .flatten()
        .and_then(|v| v.to_str().ok())
        .map_or_else(shared::ids::new_slugid, String::from);
    let (path, also_signed) = if served.behind_gateway {
        if let Some(host) = shared::api::caller::gateway_host(&parts.headers)
            .and_then(|h| axum::http::HeaderValue::from_str(&h).ok())
        {
            parts.headers.insert(axum::http::header::HOST, host);
        }
        through_gateway(&parts.method, parts.uri.path().to_string())
    } else {
        (parts.uri.path().to_string(), vec![])
    };
    let req = ApiRequest {
        method: parts.method,
        path,
        query: parts.uri.query().map(String::from),
        headers: parts.headers,
        body,
        also_signed,
        request_id,
    };
    to_http(api.handle(Serves::All, req).await)
}

/// Prints what this process counted as EMF lines every `every` (and [`Running::stop`] once
/// more, after the last call).
async fn emf_loop(
    queue: Arc<Queue>,
    namespace: String,
    every: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => crate::print_emf(&queue.metrics, &namespace),
            _ = stopped.wait_for(|s| *s) => return,
        }
    }
}

/// What `/metrics` serves: this process's counts, after the jobs declared to run on each
/// scrape ([`Local::Scrape`]: the gauges per task queue).
struct Scraped {
    metrics: Arc<shared::metrics::Metrics>,
    jobs: Vec<JobLoop>,
}

/// The jobs a scrape runs: none in a process that runs no jobs, as the gauges are the
/// store's and the process that runs the jobs serves them (summed across instances, they
/// would count twice).
fn scrape_jobs(cfg: &ServerConfig, queue: &Arc<Queue>, blobs: Arc<dyn BlobStore>) -> Vec<JobLoop> {
    JOBS.iter()
        .filter(|j| cfg.jobs && j.local == Local::Scrape)
        .map(|job| JobLoop {
            job,
            queue: queue.clone(),
            blobs: blobs.clone(),
            grace_ms: cfg.queue.artifact_expiry_grace_ms,
            publisher: None,
        })
        .collect()
}

/// `GET /metrics`: what this process counted, and what the scrape's jobs read from the store
/// now, as Prometheus text.
async fn serve_metrics(State(scraped): State<Arc<Scraped>>) -> Response<Body> {
    let mut read = Ok(0);
    for job in &scraped.jobs {
        read = job.once().await;
        if read.is_err() {
            break;
        }
    }
    match read {
        Ok(_) => Response::builder()
            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .body(Body::from(scraped.metrics.prometheus()))
            .unwrap_or_default(),
        Err(e) => {
            tracing::error!(error = %e, "metrics: the figures could not be read");
            Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(Body::from(format!("the figures could not be read: {e}\n")))
                .unwrap_or_default()
        }
    }
}

/// What the HTTP fallback serves with.
#[derive(Clone)]
struct Served {
    api: Arc<Api>,
    /// See [`ServerConfig::behind_gateway`].
    behind_gateway: bool,
}

/// `tc-queue --health-check`: whether a server on `port` of this host answers its ping
/// with 200 within `timeout`, over plain HTTP/1.0 (no client library for one request).
pub async fn health_check(port: u16, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        conn.write_all(b"GET /api/queue/v1/ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        conn.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head.starts_with(b"HTTP/1.") && &head[9..12] == b"200")
    };
    matches!(tokio::time::timeout(timeout, ask).await, Ok(Ok(true)))
}

fn to_http(r: shared::api::ApiResponse) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (k, v) in r.headers {
        b = b.header(k, v);
    }
    b.body(Body::from(r.body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}
