//! The local server: the same [`shared::api::Api`] that the Lambda functions host, served by
//! axum on 127.0.0.1 over the embedded SQLite backend, with the reapers and the outbox
//! publisher on timers.

pub mod lambda;
pub mod multicall;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, StatusCode};
use clap::Parser;
use serde_json::json;
use shared::amqp::AmqpSink;
use shared::api::{error_response, Api, ApiRequest, MAX_BODY_BYTES};
use shared::auth::{AuthService, ClientRecord, DEFAULT_ANONYMOUS_SCOPES, ROOT_CLIENT_ID};
use shared::blobs::{BlobStore, LocalBlobs, S3Blobs};
use shared::creds::IssuerCredentials;
use shared::error::{ApiError, ErrorCode};
use shared::events::{EventSink, FanoutSink};
use shared::queue::{Queue, QueueConfig};
use shared::scheduler::SchedulerSink;
use shared::signal::LocalSignal;
use shared::store::dynamodb;
use shared::store::sqlite::SqliteStore;
use shared::store::Store;
use shared::time::Ts;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Configuration of the local server. Every option is also an environment variable.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "tc-queue",
    version,
    about = "The Taskcluster Queue, served locally on an embedded backend"
)]
pub struct LocalConfig {
    /// Address to listen on.
    #[arg(long, env = "TCQ_BIND", default_value = "127.0.0.1")]
    pub bind: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "TCQ_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Directory for the database and the queue's credentials.
    #[arg(long, env = "TCQ_DATA_DIR", default_value = ".data")]
    pub data_dir: PathBuf,
    /// How long a claim lasts before it must be reclaimed, in seconds.
    #[arg(long, env = "TCQ_CLAIM_TIMEOUT", default_value_t = 1200)]
    pub claim_timeout_secs: u64,
    /// How long claimWork waits for work, in milliseconds.
    #[arg(long, env = "TCQ_CLAIM_WORK_TIMEOUT_MS", default_value_t = 20_000)]
    pub claim_work_timeout_ms: u64,
    /// How often the claim and deadline reapers run, in milliseconds.
    #[arg(long, env = "TCQ_REAPER_INTERVAL_MS", default_value_t = 500)]
    pub reaper_interval_ms: u64,
    /// Longest allowed task deadline, in days.
    #[arg(long, env = "TCQ_MAX_TASK_DEADLINE_DAYS", default_value_t = 5)]
    pub max_task_deadline_days: i64,
    /// How long a task group outlives its longest-lived task, in milliseconds.
    #[arg(long, env = "TCQ_GROUP_EXPIRY_EXTENSION_MS", default_value_t = shared::queue::GROUP_EXPIRY_EXTENSION_MS)]
    pub group_expiry_extension_ms: i64,
    /// Prefix of every exchange name.
    #[arg(long, env = "TCQ_EXCHANGE_PREFIX", default_value = shared::routing::DEFAULT_EXCHANGE_PREFIX)]
    pub exchange_prefix: String,
    /// Prefix of the task-graph scheduler's exchange names.
    #[arg(long, env = "TCQ_SCHEDULER_EXCHANGE_PREFIX", default_value = shared::routing::SCHEDULER_EXCHANGE_PREFIX)]
    pub scheduler_exchange_prefix: String,
    /// The tables' streams trigger the publisher and the dependency resolver on every write
    /// (the AWS deployment sets it for every function): task records then store only each
    /// write's own events, without the outbox and resolved index entries unless a stream
    /// function failed (see `QueueConfig::events_from_stream`). Leave it off for a server
    /// that publishes in process.
    #[arg(long, env = "TCQ_EVENTS_FROM_STREAM", default_value_t = false, action = clap::ArgAction::Set)]
    pub events_from_stream: bool,
    /// The task-graph scheduler's schedulerId.
    #[arg(long, env = "TCQ_SCHEDULER_ID", default_value = shared::scheduler::DEFAULT_SCHEDULER_ID)]
    pub scheduler_id: String,
    /// Run the scheduler's consumer of resolution messages in this process (off when another
    /// consumer, such as the AWS function, reacts to them instead).
    #[arg(long, env = "TCQ_SCHEDULER_CONSUMER", default_value_t = true, action = clap::ArgAction::Set)]
    pub scheduler_consumer: bool,
    /// clientId the queue issues temporary credentials as.
    #[arg(
        long,
        env = "TCQ_QUEUE_CLIENT_ID",
        default_value = "static/taskcluster/queue"
    )]
    pub queue_client_id: String,
    /// accessToken of that client; generated and kept in the data directory when unset.
    #[arg(long, env = "TCQ_QUEUE_ACCESS_TOKEN", hide_env_values = true)]
    pub queue_access_token: Option<String>,
    /// accessToken of the root client `static/taskcluster/root` (scopes `*`); generated and
    /// kept in the data directory (`root-credentials.json`, owner-only) when unset.
    #[arg(long, env = "TCQ_ROOT_ACCESS_TOKEN", hide_env_values = true)]
    pub root_access_token: Option<String>,
    /// Scopes of the `anonymous` role (what unsigned requests may do) until a role named
    /// `anonymous` is stored through the auth API; comma- or space-separated.
    #[arg(long, env = "TCQ_ANONYMOUS_SCOPES")]
    pub anonymous_scopes: Option<String>,
    /// Storage backend: `embedded` (SQLite under the data directory) or `aws` (DynamoDB,
    /// configured by the standard AWS environment: AWS_REGION, AWS_ENDPOINT_URL, credentials).
    #[arg(long, env = "TCQ_BACKEND", default_value = "embedded", value_parser = ["embedded", "aws"])]
    pub backend: String,
    /// Prefix of the DynamoDB table names (`<prefix>tasks`, `<prefix>task-groups`, `<prefix>auth`).
    #[arg(long, env = "TCQ_TABLE_PREFIX", default_value = "tcq-")]
    pub table_prefix: String,
    /// With the aws backend: create missing tables at start (for LocalStack and tests).
    #[arg(long, env = "TCQ_CREATE_TABLES", default_value_t = false)]
    pub create_tables: bool,
    /// Publish events to this RabbitMQ broker (e.g. `amqp://guest:guest@127.0.0.1:5672`), as
    /// well as to the given sink.
    #[arg(long, env = "TCQ_AMQP_URL", hide_env_values = true)]
    pub amqp_url: Option<String>,
    /// Where artifact bytes live: `local` (files under the data directory, served by this
    /// server behind signed URLs) or `s3`. Default: `s3` with the aws backend, else `local`.
    #[arg(long, env = "TCQ_ARTIFACT_STORAGE", value_parser = ["local", "s3"])]
    pub artifact_storage: Option<String>,
    /// S3 bucket of `public/…` artifacts (default `<table prefix>public-artifacts`).
    #[arg(long, env = "TCQ_PUBLIC_ARTIFACT_BUCKET")]
    pub public_artifact_bucket: Option<String>,
    /// S3 bucket of every other artifact (default `<table prefix>private-artifacts`).
    #[arg(long, env = "TCQ_PRIVATE_ARTIFACT_BUCKET")]
    pub private_artifact_bucket: Option<String>,
    /// Base URL (a CDN) that replaces the public bucket's URL in downloads.
    #[arg(long, env = "TCQ_PUBLIC_ARTIFACT_BUCKET_CDN")]
    pub public_artifact_cdn: Option<String>,
    /// How often the expiry reapers (artifacts; tasks, edges and groups) run, in milliseconds.
    #[arg(
        long,
        env = "TCQ_ARTIFACT_REAPER_INTERVAL_MS",
        default_value_t = 60_000
    )]
    pub artifact_reaper_interval_ms: u64,
    /// How long after `expires` an artifact is deleted (downloads answer 410 meanwhile).
    #[arg(long, env = "TCQ_ARTIFACT_EXPIRY_GRACE_MS", default_value_t = shared::artifacts::EXPIRY_GRACE_MS)]
    pub artifact_expiry_grace_ms: i64,
}

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
    cfg: &LocalConfig,
    root_url: &str,
    secret: &str,
) -> Result<Blobs, Box<dyn std::error::Error + Send + Sync>> {
    let kind = cfg
        .artifact_storage
        .clone()
        .unwrap_or_else(|| if cfg.backend == "aws" { "s3" } else { "local" }.to_string());
    if kind == "s3" {
        let sdk = dynamodb::sdk_config().await?;
        let bucket = |given: &Option<String>, what: &str| {
            given
                .clone()
                .unwrap_or_else(|| format!("{}{what}-artifacts", cfg.table_prefix))
        };
        let s3 = S3Blobs::new(
            &sdk,
            bucket(&cfg.public_artifact_bucket, "public"),
            bucket(&cfg.private_artifact_bucket, "private"),
            cfg.public_artifact_cdn.clone(),
        );
        if cfg.create_tables {
            s3.create_buckets().await?;
        }
        return Ok(Blobs::S3(Arc::new(s3)));
    }
    Ok(Blobs::Local(Arc::new(LocalBlobs::new(
        cfg.data_dir.join("blobs"),
        root_url,
        secret,
    ))))
}

impl LocalConfig {
    /// The defaults, as `tc-queue` with no flags and no environment would use.
    pub fn defaults() -> Self {
        LocalConfig::parse_from(["tc-queue"])
    }

    /// Scopes of the default `anonymous` role.
    pub fn anonymous_scopes(&self) -> Vec<String> {
        match &self.anonymous_scopes {
            Some(s) => s
                .split([',', ' ', '\n'])
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect(),
            None => DEFAULT_ANONYMOUS_SCOPES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }

    /// The queue tunables this configuration selects.
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            claim_timeout_ms: (self.claim_timeout_secs * 1000) as i64,
            claim_work_timeout_ms: self.claim_work_timeout_ms as i64,
            max_task_deadline_days: self.max_task_deadline_days,
            group_expiry_extension_ms: self.group_expiry_extension_ms,
            exchange_prefix: self.exchange_prefix.clone(),
            scheduler_exchange_prefix: self.scheduler_exchange_prefix.clone(),
            events_from_stream: self.events_from_stream,
            ..QueueConfig::default()
        }
    }
}

/// A running local server.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The API it serves.
    pub api: Arc<Api>,
    /// The root client's credentials (for the `TASKCLUSTER_*` lines the binary prints).
    pub root: IssuerCredentials,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// `http://<addr>`, the rootUrl for clients.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and the background loops.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Loads the queue's issuer credentials, creating them on first start (owner-only file).
fn issuer(cfg: &LocalConfig) -> std::io::Result<IssuerCredentials> {
    credentials(
        &cfg.data_dir.join("queue-credentials.json"),
        &cfg.queue_client_id,
        cfg.queue_access_token.as_deref(),
    )
}

/// Loads the root client's credentials, creating them on first start (owner-only file).
fn root(cfg: &LocalConfig) -> std::io::Result<IssuerCredentials> {
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

/// The auth service with the static clients: root and the queue's own (both `*`: the queue
/// issues credentials for any task's scopes).
pub fn auth_service(
    store: Arc<dyn Store>,
    root: Option<&IssuerCredentials>,
    queue: &IssuerCredentials,
    anonymous_scopes: Vec<String>,
) -> AuthService {
    let mut statics = vec![ClientRecord::static_client(
        &queue.client_id,
        &queue.access_token,
        &["*"],
    )];
    if let Some(r) = root {
        statics.push(ClientRecord::static_client(
            &r.client_id,
            &r.access_token,
            &["*"],
        ));
    }
    AuthService::new(store, statics, anonymous_scopes)
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

/// Opens the configured backend.
pub async fn open_store(
    cfg: &LocalConfig,
) -> Result<Arc<dyn Store>, Box<dyn std::error::Error + Send + Sync>> {
    if cfg.backend == "aws" {
        let sdk = dynamodb::sdk_config().await?;
        let client = dynamodb::client(&sdk);
        if cfg.create_tables {
            dynamodb::create_tables(&client, &cfg.table_prefix, false).await?;
        }
        return Ok(Arc::new(dynamodb::DynamoStore::new(
            client,
            cfg.table_prefix.clone(),
        )));
    }
    Ok(Arc::new(SqliteStore::open(&cfg.data_dir.join("queue.db"))?))
}

/// Starts the server and its background loops; events go to `sink` (and to RabbitMQ first,
/// when an AMQP URL is configured).
pub async fn start(
    cfg: LocalConfig,
    sink: Arc<dyn EventSink>,
) -> Result<Running, Box<dyn std::error::Error + Send + Sync>> {
    let created = !cfg.data_dir.exists();
    std::fs::create_dir_all(&cfg.data_dir)?;
    let store = open_store(&cfg).await?;
    restrict(&cfg.data_dir, created)?;
    let (issuer, root) = (issuer(&cfg)?, root(&cfg)?);
    let auth = auth_service(store.clone(), Some(&root), &issuer, cfg.anonymous_scopes());
    let queue = Arc::new(Queue::new(
        store,
        Arc::new(LocalSignal::default()),
        issuer,
        cfg.queue_config(),
    ));
    // Bound before the API is built: local blob URLs need the address.
    let listener = tokio::net::TcpListener::bind((cfg.bind.as_str(), cfg.port)).await?;
    let addr = listener.local_addr()?;
    let blobs = open_blobs(&cfg, &format!("http://{addr}"), &queue.issuer.access_token).await?;
    let api = Arc::new(
        Api::new(queue.clone(), Arc::new(auth))
            .with_blobs(blobs.port())
            .with_scheduler_id(&cfg.scheduler_id),
    );
    let (stop, stopped) = watch::channel(false);

    let mut app = axum::Router::new();
    if let Blobs::Local(local) = &blobs {
        let local = local.clone();
        app = app.route(
            &format!("{}{{*key}}", shared::blobs::LOCAL_PREFIX),
            axum::routing::any(move |req: Request<Body>| serve_blob(local.clone(), req)),
        );
    }
    let app = app.fallback(serve).with_state(api.clone());
    let mut stop_rx = stopped.clone();
    let http = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "server failed");
        }
    });
    let reapers = tokio::spawn(reaper_loop(
        queue.clone(),
        Duration::from_millis(cfg.reaper_interval_ms.max(10)),
        stopped.clone(),
    ));
    let dependencies = tokio::spawn(dependency_loop(
        queue.clone(),
        Duration::from_millis(cfg.reaper_interval_ms.max(10)),
        stopped.clone(),
    ));
    // The scheduler consumes the queue's resolution messages in process, last: an event
    // leaves its outbox only once RabbitMQ, the given sink and the scheduler all took it.
    let mut sinks = vec![];
    if let Some(url) = &cfg.amqp_url {
        sinks.push(Arc::new(
            AmqpSink::new(url.clone(), cfg.exchange_prefix.clone())
                .with_scheduler_prefix(cfg.scheduler_exchange_prefix.clone()),
        ) as Arc<dyn EventSink>);
    }
    sinks.push(sink);
    if cfg.scheduler_consumer {
        sinks.push(Arc::new(SchedulerSink(api.scheduler.clone())));
    }
    let sink: Arc<dyn EventSink> = Arc::new(FanoutSink(sinks));
    let expiry = tokio::spawn(expiry_loop(
        queue.clone(),
        blobs.port(),
        Duration::from_millis(cfg.artifact_reaper_interval_ms.max(10)),
        cfg.artifact_expiry_grace_ms,
        stopped.clone(),
    ));
    let publisher = tokio::spawn(publisher_loop(queue.clone(), sink, stopped));
    tracing::info!(%addr, data_dir = %cfg.data_dir.display(), "queue listening");
    Ok(Running {
        addr,
        api,
        root,
        stop,
        tasks: vec![http, reapers, publisher, expiry, dependencies],
    })
}

/// Satisfies dependents of resolved tasks: at once when this process writes a resolution,
/// and every `every` for resolutions written elsewhere (or left by a crash).
async fn dependency_loop(queue: Arc<Queue>, every: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        let waiting = queue.dependents_waiting.clone();
        let woken = waiting.notified();
        match shared::reaper::dependencies(&queue, Ts::now()).await {
            Ok(n) if n > 0 => tracing::debug!(satisfied = n, "dependency worker"),
            Err(e) => tracing::warn!(error = %e, "dependency worker failed"),
            _ => {}
        }
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn reaper_loop(queue: Arc<Queue>, every: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        let now = Ts::now();
        match shared::reaper::claims(&queue, now).await {
            Ok(n) if n > 0 => tracing::info!(expired = n, "claim reaper"),
            Err(e) => tracing::warn!(error = %e, "claim reaper failed"),
            _ => {}
        }
        match shared::reaper::deadlines(&queue, now).await {
            Ok(n) if n > 0 => tracing::info!(resolved = n, "deadline reaper"),
            Err(e) => tracing::warn!(error = %e, "deadline reaper failed"),
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Deletes expired artifacts (rows and objects), tasks, dependency edges and task groups on a
/// timer.
async fn expiry_loop(
    queue: Arc<Queue>,
    blobs: Arc<dyn BlobStore>,
    every: Duration,
    grace_ms: i64,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        match queue
            .expire_artifacts(blobs.as_ref(), Ts::now(), grace_ms)
            .await
        {
            Ok(n) if n > 0 => tracing::info!(deleted = n, "artifact expiry reaper"),
            Err(e) => tracing::warn!(error = %e, "artifact expiry reaper failed"),
            _ => {}
        }
        match shared::reaper::expiry(&queue, Ts::now()).await {
            Ok(n) if n > 0 => tracing::info!(deleted = n, "task expiry reaper"),
            Err(e) => tracing::warn!(error = %e, "task expiry reaper failed"),
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Largest artifact the local server accepts in one PUT.
const MAX_BLOB_BYTES: usize = 1 << 30;

/// Answers a local blob URL (the embedded stand-in for S3).
async fn serve_blob(blobs: Arc<LocalBlobs>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BLOB_BYTES).await else {
        return Response::builder()
            .status(StatusCode::PAYLOAD_TOO_LARGE)
            .body(Body::empty())
            .unwrap_or_else(|_| Response::new(Body::empty()));
    };
    let ct = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let out = blobs
        .serve(
            parts.method.as_str(),
            parts.uri.path(),
            parts.uri.query(),
            ct,
            &body,
            Ts::now(),
        )
        .await;
    Response::builder()
        .status(StatusCode::from_u16(out.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", out.content_type)
        .body(Body::from(out.body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn publisher_loop(
    queue: Arc<Queue>,
    sink: Arc<dyn EventSink>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    let sweep_every = Duration::from_secs(1);
    let mut last_sweep = std::time::Instant::now() - sweep_every;
    loop {
        let waiting = queue.events_waiting.clone();
        let woken = waiting.notified();
        // Fast path: the tasks just written. Every second, also sweep the whole outbox index
        // (events left by a crash, a restart or another process).
        let mut result = shared::reaper::outbox_recent(&queue, sink.as_ref()).await;
        if result.is_ok() && last_sweep.elapsed() >= sweep_every {
            last_sweep = std::time::Instant::now();
            result = shared::reaper::outbox(&queue, sink.as_ref()).await;
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

/// The axum fallback: every request goes to the shared API.
async fn serve(State(api): State<Arc<Api>>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES + 1).await {
        Ok(b) if b.len() <= MAX_BODY_BYTES => b,
        _ => {
            let e = ApiError::new(
                ErrorCode::InputTooLarge,
                format!("Request body exceeds {MAX_BODY_BYTES} bytes"),
            );
            let info =
                json!({ "method": "unknown", "params": {}, "payload": {}, "time": Ts::now() });
            return to_http(error_response(&e, &parts.method, info));
        }
    };
    let req = ApiRequest {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(String::from),
        headers: parts.headers,
        body,
    };
    to_http(api.handle(req).await)
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

/// Sets up tracing from `RUST_LOG` (default `info`); JSON lines when `TCQ_LOG_JSON=1`.
pub fn init_tracing() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if std::env::var("TCQ_LOG_JSON").is_ok_and(|v| v == "1") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
