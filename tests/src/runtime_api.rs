//! A Lambda Runtime API emulator: enough of `/2018-06-01/runtime/...` to run a real function
//! binary locally, hand it events one by one and collect its responses.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

#[derive(Default)]
struct Shared {
    /// How long each invocation may run (the deadline the function is told).
    timeout: Mutex<Option<Duration>>,
    events: Mutex<VecDeque<(String, Value)>>,
    responses: Mutex<Vec<(String, Result<Value, Value>)>>,
    first_poll: Mutex<Option<Instant>>,
    queued: Notify,
    answered: Notify,
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Invoked {
    /// The function's answer.
    Ok(Value),
    /// The function's error (`{errorType, errorMessage}`), or its init error.
    Err(Value),
    /// No answer within the timeout.
    TimedOut,
}

/// A running emulator.
pub struct RuntimeApi {
    /// `host:port`, for `AWS_LAMBDA_RUNTIME_API`.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

async fn next(State(s): State<Arc<Shared>>) -> (StatusCode, HeaderMap, String) {
    s.first_poll
        .lock()
        .map(|mut f| f.get_or_insert_with(Instant::now).to_owned())
        .ok();
    loop {
        let notified = s.queued.notified();
        if let Some((id, ev)) = s.events.lock().ok().and_then(|mut q| q.pop_front()) {
            let mut h = HeaderMap::new();
            h.insert("lambda-runtime-aws-request-id", id.parse().expect("header"));
            let timeout = s
                .timeout
                .lock()
                .ok()
                .and_then(|t| *t)
                .unwrap_or(Duration::from_secs(60));
            let deadline = (std::time::SystemTime::now() + timeout)
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default();
            h.insert(
                "lambda-runtime-deadline-ms",
                deadline.to_string().parse().expect("header"),
            );
            h.insert(
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:000000000000:function:test"
                    .parse()
                    .expect("header"),
            );
            h.insert(
                "lambda-runtime-trace-id",
                "Root=1-00000000-000000000000000000000000"
                    .parse()
                    .expect("header"),
            );
            return (StatusCode::OK, h, ev.to_string());
        }
        notified.await;
    }
}

async fn respond(State(s): State<Arc<Shared>>, Path(id): Path<String>, body: String) -> StatusCode {
    let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
    s.responses.lock().expect("lock").push((id, Ok(v)));
    s.answered.notify_waiters();
    StatusCode::ACCEPTED
}

async fn fail(State(s): State<Arc<Shared>>, Path(id): Path<String>, body: String) -> StatusCode {
    let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
    s.responses.lock().expect("lock").push((id, Err(v)));
    s.answered.notify_waiters();
    StatusCode::ACCEPTED
}

async fn init_error(State(s): State<Arc<Shared>>, body: String) -> StatusCode {
    s.responses
        .lock()
        .expect("lock")
        .push(("init".into(), Err(Value::String(body))));
    s.answered.notify_waiters();
    StatusCode::ACCEPTED
}

impl RuntimeApi {
    /// Starts the emulator on 127.0.0.1 (invocations told a 60 s deadline).
    pub async fn start() -> RuntimeApi {
        Self::start_with(Duration::from_secs(60)).await
    }

    /// Starts the emulator on 127.0.0.1, telling each invocation it has `timeout`.
    pub async fn start_with(timeout: Duration) -> RuntimeApi {
        let shared = Arc::new(Shared {
            timeout: Mutex::new(Some(timeout)),
            ..Default::default()
        });
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(respond),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(fail))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            // Lambda takes responses up to 6 MB (the shape's pool checks that limit); axum's
            // default of 2 MB would refuse what Lambda accepts.
            .layer(axum::extract::DefaultBodyLimit::max(8 * 1024 * 1024))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RuntimeApi { addr, shared }
    }

    /// When the function first asked for an event (its init is done by then).
    pub fn first_poll(&self) -> Option<Instant> {
        *self.shared.first_poll.lock().expect("lock")
    }

    /// Invokes the function with `event` and waits for its answer (Ok) or error (Err).
    pub async fn invoke(&self, event: Value, timeout: Duration) -> Result<Value, Value> {
        match self.invoke_for(event, timeout).await {
            Invoked::Ok(v) => Ok(v),
            Invoked::Err(v) => Err(v),
            Invoked::TimedOut => Err(Value::String("no answer in time".into())),
        }
    }

    /// Invokes the function with `event`; how it ended.
    pub async fn invoke_for(&self, event: Value, timeout: Duration) -> Invoked {
        let id = crate::slugid();
        self.shared
            .events
            .lock()
            .expect("lock")
            .push_back((id.clone(), event));
        self.shared.queued.notify_waiters();
        let until = Instant::now() + timeout;
        loop {
            let answered = self.shared.answered.notified();
            {
                let mut responses = self.shared.responses.lock().expect("lock");
                if let Some(i) = responses.iter().position(|(rid, _)| *rid == id) {
                    // Taken, so that a long-lived function's answers do not pile up.
                    return match responses.remove(i).1 {
                        Ok(v) => Invoked::Ok(v),
                        Err(v) => Invoked::Err(v),
                    };
                }
                if let Some((_, Err(v))) = responses.iter().find(|(rid, _)| rid == "init") {
                    return Invoked::Err(v.clone());
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Invoked::TimedOut;
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), answered).await;
        }
    }
}

/// An API Gateway HTTP API (payload v2) event, with the path as the gateway passes it.
/// The event is signed with the root credentials, as API Gateway would pass them on.
pub fn apigw_v2_event(method: &str, raw_path: &str, body: Option<&Value>) -> Value {
    let authorization =
        crate::root_authorization(method, &format!("http://queue.example.com{raw_path}"));
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": "",
        "headers": {
            "content-type": "application/json",
            "host": "queue.example.com",
            "authorization": authorization
        },
        "requestContext": {
            "accountId": "000000000000", "apiId": "api", "domainName": "queue.example.com",
            "domainPrefix": "queue", "requestId": "req", "routeKey": "$default", "stage": "$default",
            "time": "22/Nov/2026:00:00:00 +0000", "timeEpoch": 1_795_000_000_000u64,
            "http": { "method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "test" }
        },
        "body": body.map(|b| b.to_string()),
        "isBase64Encoded": false
    })
}

/// Path of a binary built by `cargo build` in this workspace's target directory.
pub fn built_binary(name: &str) -> std::path::PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("debug").join(name)
}

/// Fresh tables on LocalStack under a prefix of their own (`<tag><random>-`), with the
/// deployed streams if `streams`; returns the prefix.
pub async fn localstack_tables(tag: &str, streams: bool) -> String {
    localstack_tables_with(tag, streams, false).await
}

/// [`localstack_tables`], with the port conformance suite's test tables if `test_tables`.
pub async fn localstack_tables_with(tag: &str, streams: bool, test_tables: bool) -> String {
    let sdk = shared::store::dynamodb::sdk_config()
        .await
        .expect("AWS environment");
    let prefix = format!(
        "{tag}{}-",
        crate::slugid()
            .to_ascii_lowercase()
            .replace(['-', '_'], "x")
    );
    let client = shared::store::dynamodb::client(&sdk);
    let created = if streams {
        shared::store::dynamodb::create_tables_with_streams(&client, &prefix, test_tables).await
    } else {
        shared::store::dynamodb::create_tables(&client, &prefix, test_tables).await
    };
    created.expect("tables");
    prefix
}

/// Starts the function named `name` (`create-task`, `claim-reaper`, ...: the deployable
/// `lambda` binary, which finds what it serves from the name) against the emulator `api`,
/// over the tables under `prefix`, with the queue's and root's tokens in its environment;
/// `env` adds to (or, with an empty value, removes from) that environment. Returns it and
/// its spawn time.
pub fn start_function(
    name: &str,
    api: &RuntimeApi,
    prefix: &str,
    env: &[(&str, &str)],
) -> (std::process::Child, Instant) {
    let path = built_binary("lambda");
    assert!(
        path.exists(),
        "{} is missing: build the workspace first",
        path.display()
    );
    let mut cmd = lambda_command(&path, api, prefix);
    cmd.env("AWS_LAMBDA_FUNCTION_NAME", name);
    for (k, v) in env {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    let started = Instant::now();
    (cmd.spawn().expect("spawn function"), started)
}

/// The `lambda` binary at `bin` as Lambda starts it against the emulator `api`, over the
/// tables under `prefix`, with the queue's and root's tokens, 256 MB and its output dropped;
/// the caller names the function (`AWS_LAMBDA_FUNCTION_NAME`, `_HANDLER`).
pub fn lambda_command(
    bin: &std::path::Path,
    api: &RuntimeApi,
    prefix: &str,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "test")
        .env("TCQ_TABLE_PREFIX", prefix)
        .env("TCQ_QUEUE_ACCESS_TOKEN", "test-queue-token")
        .env("TCQ_ROOT_ACCESS_TOKEN", crate::ROOT_ACCESS_TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null());
    cmd
}

/// One call of an AWS JSON-protocol API on LocalStack (which does not check signatures):
/// `target` is the `x-amz-target` (e.g. `secretsmanager.CreateSecret`), `service` the
/// credential scope's service. Returns the reply body, or it as the error on a non-2xx status.
pub async fn localstack_json(
    service: &str,
    json_version: &str,
    target: &str,
    body: Value,
) -> Result<Value, String> {
    let endpoint =
        std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:4566".into());
    let res = reqwest::Client::new()
        .post(endpoint)
        .header(
            "content-type",
            format!("application/x-amz-json-{json_version}"),
        )
        .header("x-amz-target", target)
        .header(
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential=test/20261122/us-east-1/{service}/aws4_request, \
                 SignedHeaders=host;x-amz-target, Signature=00"
            ),
        )
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let ok = res.status().is_success();
    let v: Value = res.json().await.map_err(|e| e.to_string())?;
    if ok {
        Ok(v)
    } else {
        Err(v.to_string())
    }
}

/// The raw attributes of a task's status item on LocalStack, as DynamoDB holds them (and as a
/// stream record's image carries them).
pub async fn raw_status(prefix: &str, task_id: &str) -> Value {
    localstack_json(
        "dynamodb",
        "1.0",
        "DynamoDB_20120810.GetItem",
        serde_json::json!({
            "TableName": format!("{prefix}tasks"),
            "Key": { "pk": { "S": task_id }, "sk": { "S": shared::records::task::SK_STATUS } },
            "ConsistentRead": true
        }),
    )
    .await
    .expect("GetItem")["Item"]
        .clone()
}
