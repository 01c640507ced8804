//! The local server: the same [`shared::api::Api`] that the Lambda functions host, served by
//! axum on 127.0.0.1 over the embedded SQLite backend, with the reapers and the outbox
//! publisher on timers.

pub mod lambda;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, StatusCode};
use clap::Parser;
use serde_json::json;
use shared::api::auth::OpenAccess;
use shared::api::{error_response, Api, ApiRequest, MAX_BODY_BYTES};
use shared::creds::IssuerCredentials;
use shared::error::{ApiError, ErrorCode};
use shared::events::EventSink;
use shared::queue::{Queue, QueueConfig};
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
    /// Prefix of every exchange name.
    #[arg(long, env = "TCQ_EXCHANGE_PREFIX", default_value = shared::routing::DEFAULT_EXCHANGE_PREFIX)]
    pub exchange_prefix: String,
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
    /// Storage backend: `embedded` (SQLite under the data directory) or `aws` (DynamoDB,
    /// configured by the standard AWS environment: AWS_REGION, AWS_ENDPOINT_URL, credentials).
    #[arg(long, env = "TCQ_BACKEND", default_value = "embedded", value_parser = ["embedded", "aws"])]
    pub backend: String,
    /// Prefix of the DynamoDB table names (`<prefix>tasks`, `<prefix>task-groups`).
    #[arg(long, env = "TCQ_TABLE_PREFIX", default_value = "tcq-")]
    pub table_prefix: String,
    /// With the aws backend: create missing tables at start (for LocalStack and tests).
    #[arg(long, env = "TCQ_CREATE_TABLES", default_value_t = false)]
    pub create_tables: bool,
}

impl LocalConfig {
    /// The defaults, as `tc-queue` with no flags and no environment would use.
    pub fn defaults() -> Self {
        LocalConfig::parse_from(["tc-queue"])
    }

    /// The queue tunables this configuration selects.
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            claim_timeout_ms: (self.claim_timeout_secs * 1000) as i64,
            claim_work_timeout_ms: self.claim_work_timeout_ms as i64,
            max_task_deadline_days: self.max_task_deadline_days,
            exchange_prefix: self.exchange_prefix.clone(),
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
    if let Some(token) = &cfg.queue_access_token {
        return Ok(IssuerCredentials {
            client_id: cfg.queue_client_id.clone(),
            access_token: token.clone(),
        });
    }
    let path = cfg.data_dir.join("queue-credentials.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some(token) = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["accessToken"].as_str().map(String::from))
        {
            return Ok(IssuerCredentials {
                client_id: cfg.queue_client_id.clone(),
                access_token: token,
            });
        }
    }
    let token = format!("{}{}", shared::ids::new_slugid(), shared::ids::new_slugid());
    write_private(
        &path,
        &json!({ "clientId": cfg.queue_client_id, "accessToken": token }).to_string(),
    )?;
    Ok(IssuerCredentials {
        client_id: cfg.queue_client_id.clone(),
        access_token: token,
    })
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

/// Starts the server and its background loops; events go to `sink`.
pub async fn start(
    cfg: LocalConfig,
    sink: Arc<dyn EventSink>,
) -> Result<Running, Box<dyn std::error::Error + Send + Sync>> {
    std::fs::create_dir_all(&cfg.data_dir)?;
    let store = open_store(&cfg).await?;
    let queue = Arc::new(Queue::new(
        store,
        Arc::new(LocalSignal::default()),
        issuer(&cfg)?,
        cfg.queue_config(),
    ));
    let api = Arc::new(Api::new(queue.clone(), Arc::new(OpenAccess::default())));
    let listener = tokio::net::TcpListener::bind((cfg.bind.as_str(), cfg.port)).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);

    let app = axum::Router::new().fallback(serve).with_state(api.clone());
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
    let publisher = tokio::spawn(publisher_loop(queue.clone(), sink, stopped));
    tracing::info!(%addr, data_dir = %cfg.data_dir.display(), "queue listening");
    Ok(Running {
        addr,
        api,
        stop,
        tasks: vec![http, reapers, publisher],
    })
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
