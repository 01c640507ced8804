//! A small client for the task-graph scheduler's API (`<rootUrl>/api/scheduler/v1/`), which the
//! official crates do not have: Hawk-signed JSON requests (with a certificate and
//! authorizedScopes in `ext` when given) that return `(status, JSON body)` whatever the status,
//! so that tests can check error replies. Also a RabbitMQ consumer bound to both the queue's
//! and the scheduler's exchanges under their default names.

use crate::amqp::{Broker, Msg};
use crate::{root_credentials, TestServer};
use lapin::options::ExchangeDeclareOptions;
use lapin::types::{FieldTable, ShortString};
use lapin::ExchangeKind;
use serde_json::{json, Value};
use std::time::Duration;
use taskcluster::Credentials;

/// The schedulerId of every task the scheduler creates.
pub const SCHEDULER_ID: &str = "task-graph-scheduler";

/// The scheduler's exchanges (short names).
pub const EXCHANGES: [&str; 4] = [
    "task-graph-running",
    "task-graph-extended",
    "task-graph-blocked",
    "task-graph-finished",
];

/// The scheduler's default exchange prefix.
pub const EXCHANGE_PREFIX: &str = "exchange/taskcluster-scheduler/v1/";

/// The queue's default exchange prefix.
pub const QUEUE_EXCHANGE_PREFIX: &str = "exchange/taskcluster-queue/v1/";

/// A scheduler API client.
#[derive(Clone)]
pub struct Scheduler {
    root_url: String,
    creds: Option<Credentials>,
    authorized_scopes: Option<Vec<String>>,
    http: reqwest::Client,
}

impl Scheduler {
    /// A client for `root_url` signing with `creds` (`None`: unsigned).
    pub fn new(root_url: &str, creds: Option<Credentials>) -> Scheduler {
        Scheduler {
            root_url: root_url.trim_end_matches('/').to_string(),
            creds,
            authorized_scopes: None,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("HTTP client"),
        }
    }

    /// A client of `app` with the root credentials.
    pub fn root(app: &TestServer) -> Scheduler {
        Scheduler::new(&app.root_url(), Some(root_credentials()))
    }

    /// A client of `app` with `creds` (`None`: unsigned).
    pub fn as_client(app: &TestServer, creds: Option<Credentials>) -> Scheduler {
        Scheduler::new(&app.root_url(), creds)
    }

    /// The same client, narrowed to `scopes` with authorizedScopes.
    pub fn authorized_scopes(mut self, scopes: &[String]) -> Scheduler {
        self.authorized_scopes = Some(scopes.to_vec());
        self
    }

    /// Full URL of a scheduler path such as `/task-graph/<id>/status`.
    pub fn url(&self, path: &str) -> String {
        format!("{}/api/scheduler/v1{path}", self.root_url)
    }

    /// The `ext` attribute of the Hawk header: certificate and authorizedScopes, base64 JSON.
    fn ext(&self) -> Option<String> {
        let mut ext = serde_json::Map::new();
        if let Some(cert) = self.creds.as_ref().and_then(|c| c.certificate.as_ref()) {
            let cert: Value = serde_json::from_str(cert).expect("certificate is JSON");
            ext.insert("certificate".into(), cert);
        }
        if let Some(scopes) = &self.authorized_scopes {
            ext.insert("authorizedScopes".into(), json!(scopes));
        }
        (!ext.is_empty()).then(|| base64(Value::Object(ext).to_string().as_bytes()))
    }

    /// A raw call: `(status, JSON body or Null)`. `body` is sent as `application/json`.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let url = self.url(path);
        let bytes = body.map(|b| serde_json::to_vec(b).expect("JSON body"));
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.http.request(m, &url);
        if let Some(c) = &self.creds {
            let parsed = reqwest::Url::parse(&url).expect("URL");
            let key = hawk::Credentials {
                id: c.client_id.clone(),
                key: hawk::Key::new(&c.access_token, hawk::SHA256).expect("key"),
            };
            let hash = bytes.as_ref().map(|b| {
                hawk::PayloadHasher::hash("application/json", hawk::SHA256, b)
                    .expect("payload hash")
            });
            let ext = self.ext();
            let header = hawk::RequestBuilder::from_url(method, &parsed)
                .expect("request")
                .hash(hash.as_deref())
                .ext(ext.as_deref())
                .request()
                .make_header(&key)
                .expect("header");
            req = req.header("authorization", format!("Hawk {header}"));
        }
        match bytes {
            Some(b) => req = req.header("content-type", "application/json").body(b),
            None => req = req.header("content-length", "0"),
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// GET /ping.
    pub async fn ping(&self) -> (u16, Value) {
        self.call("GET", "/ping", None).await
    }

    /// createTaskGraph: PUT /task-graph/<id>.
    pub async fn create(&self, graph_id: &str, body: &Value) -> (u16, Value) {
        self.call("PUT", &format!("/task-graph/{graph_id}"), Some(body))
            .await
    }

    /// extendTaskGraph: POST /task-graph/<id>/extend.
    pub async fn extend(&self, graph_id: &str, body: &Value) -> (u16, Value) {
        self.call(
            "POST",
            &format!("/task-graph/{graph_id}/extend"),
            Some(body),
        )
        .await
    }

    /// status: GET /task-graph/<id>/status.
    pub async fn status(&self, graph_id: &str) -> (u16, Value) {
        self.call("GET", &format!("/task-graph/{graph_id}/status"), None)
            .await
    }

    /// info: GET /task-graph/<id>/info.
    pub async fn info(&self, graph_id: &str) -> (u16, Value) {
        self.call("GET", &format!("/task-graph/{graph_id}/info"), None)
            .await
    }

    /// inspect: GET /task-graph/<id>/inspect.
    pub async fn inspect(&self, graph_id: &str) -> (u16, Value) {
        self.call("GET", &format!("/task-graph/{graph_id}/inspect"), None)
            .await
    }

    /// inspectTask: GET /task-graph/<id>/inspect/<taskId>.
    pub async fn inspect_task(&self, graph_id: &str, task_id: &str) -> (u16, Value) {
        self.call(
            "GET",
            &format!("/task-graph/{graph_id}/inspect/{task_id}"),
            None,
        )
        .await
    }
}

/// Standard base64 with padding (for the Hawk `ext`).
pub fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// One entry of a graph body's `tasks`: `{requires, reruns, task}`.
pub fn node(requires: &[&str], reruns: u32, task: Value) -> Value {
    json!({ "requires": requires, "reruns": reruns, "task": task })
}

/// The routing key of the scheduler's messages about a graph:
/// `primary._._._._._._.task-graph-scheduler.<graphId>.<routing or _>`.
pub fn graph_routing_key(graph_id: &str, routing: &str) -> String {
    let routing = if routing.is_empty() { "_" } else { routing };
    format!("primary._._._._._._.{SCHEDULER_ID}.{graph_id}.{routing}")
}

/// The route the scheduler appends to each task: `task-graph-scheduler.<graphId>.<routing or _>`.
pub fn graph_route(graph_id: &str, routing: &str) -> String {
    let routing = if routing.is_empty() { "_" } else { routing };
    format!("{SCHEDULER_ID}.{graph_id}.{routing}")
}

/// The binding pattern that matches both services' primary keys about one graph.
pub fn graph_pattern(graph_id: &str) -> String {
    format!("primary.*.*.*.*.*.*.{SCHEDULER_ID}.{graph_id}.#")
}

/// Full names of the scheduler's exchanges.
pub fn scheduler_exchanges() -> Vec<String> {
    EXCHANGES
        .iter()
        .map(|s| format!("{EXCHANGE_PREFIX}{s}"))
        .collect()
}

/// Full names of the queue's exchanges.
pub fn queue_exchanges() -> Vec<String> {
    crate::amqp::ALL
        .iter()
        .map(|s| format!("{QUEUE_EXCHANGE_PREFIX}{s}"))
        .collect()
}

/// A consumer whose exchange "prefix" is empty, so that [`Broker::bind`] takes full exchange
/// names (of both services). The exchanges have their default names: every binding of the
/// scheduler tests names a fresh graph id, so tests running at once never see each other's
/// messages. All exchanges are declared (durable topic, as the publisher declares them) so
/// that queues can be bound before the server publishes anything. Never call `cleanup` on it.
pub async fn graph_broker() -> Broker {
    let b = Broker::with_prefix("").await;
    shared::events::amqp::declare_exchanges(&b.ch, QUEUE_EXCHANGE_PREFIX)
        .await
        .expect("declare the queue's exchanges");
    for name in scheduler_exchanges() {
        b.ch.exchange_declare(
            ShortString::from(name.as_str()),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("declare {name} (durable topic): {e}"));
    }
    b
}

/// Binds a fresh queue of `broker` (from [`graph_broker`]) to the given full exchange names.
pub async fn bind_full(broker: &Broker, exchanges: &[String], pattern: &str) -> String {
    let names: Vec<&str> = exchanges.iter().map(String::as_str).collect();
    broker.bind(&names, pattern).await
}

/// The short name of a message's exchange (either service's).
pub fn short(m: &Msg) -> &str {
    m.exchange
        .strip_prefix(EXCHANGE_PREFIX)
        .or_else(|| m.exchange.strip_prefix(QUEUE_EXCHANGE_PREFIX))
        .unwrap_or(&m.exchange)
}

/// True for a message of the scheduler's exchanges.
pub fn is_scheduler_msg(m: &Msg) -> bool {
    m.exchange.starts_with(EXCHANGE_PREFIX)
}

/// Collects messages from `queue` until `done` holds for all collected so far (panics after
/// `timeout`, showing what arrived), then whatever else arrives within `quiet`.
pub async fn collect_until(
    broker: &Broker,
    queue: &str,
    timeout: Duration,
    quiet: Duration,
    done: impl Fn(&[Msg]) -> bool,
) -> Vec<Msg> {
    let until = std::time::Instant::now() + timeout;
    let mut got = vec![];
    while !done(&got) {
        match broker.get(queue).await {
            Some(m) => got.push(m),
            None => {
                assert!(
                    std::time::Instant::now() < until,
                    "timed out after {timeout:?}; got {} messages: {:#?}",
                    got.len(),
                    got.iter()
                        .map(|m| (short(m).to_string(), m.routing_key.clone()))
                        .collect::<Vec<_>>()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    got.extend(broker.rest(queue, quiet).await);
    got
}
