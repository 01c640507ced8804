//! The queue's HTTP API, independent of any server: the local server (hyper/axum) and the
//! Lambda functions (`lambda_http`) both turn their request into an [`ApiRequest`] and send
//! back the [`ApiResponse`].
//!
//! Request pipeline, as upstream: parse body → authenticate → URL params → query → input
//! schema (defaults filled) → handler (which authorises, sometimes after loading the task) →
//! output schema.

mod artifact_handlers;
pub mod auth;
mod auth_handlers;
mod handlers;
pub mod routes;
mod scheduler_handlers;

use crate::auth::{AuthService, Realm, TEST_GET_SCOPES};
use crate::blobs::{BlobStore, NoBlobs};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::queue::Queue;
use crate::schema;
use crate::time::Ts;
use auth::Caller;
use bytes::Bytes;
use http::{HeaderMap, Method};
use routes::Route;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Largest accepted body (upstream's `inputLimit`).
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Every queue route is served under this prefix.
pub const PREFIX: &str = "/api/queue/v1";
/// Every auth route is served under this prefix.
pub const AUTH_PREFIX: &str = "/api/auth/v1";
/// Every task-graph scheduler route is served under this prefix.
pub const SCHEDULER_PREFIX: &str = "/api/scheduler/v1";

/// A request, as any server hands it over.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// HTTP method.
    pub method: Method,
    /// The raw (still percent-encoded) path, including [`PREFIX`].
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
    /// Request headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// A response, for any server to send.
#[derive(Debug, Clone)]
pub struct ApiResponse {
    /// HTTP status.
    pub status: u16,
    /// Headers besides the standard ones.
    pub headers: Vec<(&'static str, String)>,
    /// JSON body.
    pub body: Vec<u8>,
}

impl ApiResponse {
    fn json(status: u16, body: &Value) -> Self {
        ApiResponse {
            status,
            headers: standard_headers(),
            // 204 No Content has no body at all.
            body: if status == 204 {
                vec![]
            } else {
                serde_json::to_vec(body).unwrap_or_default()
            },
        }
    }
}

fn standard_headers() -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/json; charset=utf-8".into()),
        ("cache-control", "no-store no-cache must-revalidate".into()),
        ("access-control-allow-origin", "*".into()),
        (
            "access-control-allow-methods",
            "OPTIONS,GET,HEAD,POST,PUT,DELETE,TRACE,CONNECT".into(),
        ),
        (
            "access-control-allow-headers",
            "X-Requested-With,Content-Type,Authorization,Accept,Origin,Cache-Control".into(),
        ),
    ]
}

/// What a handler sees: checked parameters, query, body and caller.
pub struct Call {
    /// Decoded URL parameters by name.
    pub params: HashMap<&'static str, String>,
    /// Query arguments.
    pub query: HashMap<String, String>,
    /// The validated body (or `{}`).
    pub body: Value,
    /// The authenticated caller.
    pub caller: Caller,
    /// When the request arrived.
    pub now: Ts,
}

impl Call {
    /// A URL parameter (always present: the route matched).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The `limit` (digits only; at most [`crate::queue::MAX_PAGE`]) and `continuationToken`
    /// query arguments of a listing.
    pub fn page(&self) -> ApiResult<crate::queue::PageReq> {
        use crate::queue::MAX_PAGE;
        let limit = match self.query.get("limit") {
            None => MAX_PAGE,
            Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => {
                l.parse::<usize>().unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE)
            }
            Some(l) => {
                return Err(ApiError::bad_argument(format!(
                    "limit {l:?} must match ^[0-9]+$"
                )))
            }
        };
        Ok(crate::queue::PageReq {
            limit,
            token: self
                .query
                .get("continuationToken")
                .filter(|t| !t.is_empty())
                .cloned(),
        })
    }
}

/// The monitoring endpoints every service has (`ping`, `lbheartbeat`, `heartbeat`,
/// `version`), or `None` for any other route.
pub(crate) fn monitoring(api: &Api, route: &str) -> Option<Value> {
    match route {
        "ping" => Some(json!({ "alive": true, "uptime": api.started.elapsed().as_secs_f64() })),
        "lbheartbeat" | "heartbeat" => Some(json!({})),
        "version" => Some(json!({
            "source": "https://github.com/taskcluster/taskcluster",
            "version": env!("CARGO_PKG_VERSION"),
            "commit": option_env!("TCQ_GIT_COMMIT").unwrap_or("unknown"),
            "build": "rust",
        })),
        _ => None,
    }
}

/// The API: the queue service plus the auth service (which also authenticates every request).
pub struct Api {
    /// The queue service.
    pub queue: Arc<Queue>,
    /// Clients, roles and authentication.
    pub auth: Arc<AuthService>,
    /// Start time, for `ping`'s uptime.
    pub started: Instant,
    /// Validate every response against its schema (a violation becomes a 500).
    pub validate_output: bool,
    /// Where artifact bytes live (none until [`Api::with_blobs`]).
    pub blobs: Arc<dyn BlobStore>,
    /// The task-graph scheduler, over the same queue.
    pub scheduler: Arc<crate::scheduler::Scheduler>,
}

impl Api {
    /// An API over a queue and an auth service.
    pub fn new(queue: Arc<Queue>, auth: Arc<AuthService>) -> Self {
        let scheduler = Arc::new(crate::scheduler::Scheduler::new(
            queue.clone(),
            crate::scheduler::DEFAULT_SCHEDULER_ID,
        ));
        Api {
            queue,
            auth,
            started: Instant::now(),
            validate_output: true,
            blobs: Arc::new(NoBlobs),
            scheduler,
        }
    }

    /// The same API with the scheduler's id set (the default is upstream's).
    pub fn with_scheduler_id(mut self, scheduler_id: &str) -> Self {
        self.scheduler = Arc::new(crate::scheduler::Scheduler::new(
            self.queue.clone(),
            scheduler_id,
        ));
        self
    }

    /// The same API with artifact bytes kept in `blobs`.
    pub fn with_blobs(mut self, blobs: Arc<dyn BlobStore>) -> Self {
        self.blobs = blobs;
        self
    }

    /// Serves any route.
    pub async fn handle(&self, req: ApiRequest) -> ApiResponse {
        self.serve(req, Serving::All).await
    }

    /// Serves only the queue endpoint named `name` (one Lambda function per endpoint); any
    /// other route is 404.
    pub async fn handle_only(&self, name: &str, req: ApiRequest) -> ApiResponse {
        self.serve(req, Serving::QueueEndpoint(name)).await
    }

    /// Serves only the auth service's routes (one Lambda function for all of them).
    pub async fn handle_auth(&self, req: ApiRequest) -> ApiResponse {
        self.serve(req, Serving::AuthService).await
    }

    /// Serves only the scheduler endpoint named `name` (one Lambda function per endpoint).
    pub async fn handle_scheduler_only(&self, name: &str, req: ApiRequest) -> ApiResponse {
        self.serve(req, Serving::SchedulerEndpoint(name)).await
    }

    async fn serve(&self, req: ApiRequest, only: Serving<'_>) -> ApiResponse {
        let now = Ts::now();
        let mut seen = Seen::default();
        if req.method == Method::OPTIONS {
            return ApiResponse {
                status: 204,
                headers: standard_headers(),
                body: vec![],
            };
        }
        let result = self.serve_inner(&req, only, now, &mut seen).await;
        match result {
            Ok((status, body, extra)) => {
                let mut r = ApiResponse::json(status, &body);
                r.headers.extend(extra);
                r
            }
            Err(e) => {
                // Built only on the error path: re-reading the body here is cheaper than
                // copying every request's body in case an error needs it.
                let payload = seen
                    .body_parsed
                    .then(|| serde_json::from_slice::<Value>(&req.body).ok())
                    .flatten()
                    .unwrap_or_else(|| json!({}));
                let info = json!({ "method": seen.method, "params": seen.params, "payload": payload, "time": now });
                error_response(&e, &req.method, info)
            }
        }
    }

    async fn serve_inner(
        &self,
        req: &ApiRequest,
        only: Serving<'_>,
        now: Ts,
        seen: &mut Seen,
    ) -> Result<(u16, Value, Headers), ApiError> {
        let (table, rest) = if let Some(rest) = req.path.strip_prefix(PREFIX) {
            (routes::ROUTES, rest)
        } else if let Some(rest) = req.path.strip_prefix(AUTH_PREFIX) {
            (routes::AUTH_ROUTES, rest)
        } else if let Some(rest) = req.path.strip_prefix(SCHEDULER_PREFIX) {
            (routes::SCHEDULER_ROUTES, rest)
        } else {
            return Err(ApiError::not_found(format!("No such path {}", req.path)));
        };
        let is_auth = std::ptr::eq(table, routes::AUTH_ROUTES);
        let is_scheduler = std::ptr::eq(table, routes::SCHEDULER_ROUTES);
        let is_queue = !is_auth && !is_scheduler;
        let (route, raw_params) = routes::find_in(table, &req.method, rest)
            .filter(|(r, _)| match only {
                Serving::All => true,
                Serving::QueueEndpoint(n) => is_queue && n == r.name,
                Serving::AuthService => is_auth,
                Serving::SchedulerEndpoint(n) => is_scheduler && n == r.name,
            })
            .ok_or_else(|| {
                ApiError::not_found(format!("No such endpoint: {} {}", req.method, req.path))
            })?;
        seen.method = route.name;
        seen.params = json!(raw_params);
        if req.body.len() > MAX_BODY_BYTES {
            return Err(ApiError::new(
                ErrorCode::InputTooLarge,
                format!("Request body exceeds {MAX_BODY_BYTES} bytes"),
            ));
        }
        let mut body = parse_body(route, req)?;
        seen.body_parsed = true;
        // The test endpoints authenticate against upstream's fixed test client only.
        let realm = match route.name {
            "testAuthenticate" if is_auth => {
                Realm::Tester(crate::model::string_list(&body["clientScopes"]))
            }
            "testAuthenticateGet" if is_auth => {
                Realm::Tester(TEST_GET_SCOPES.iter().map(|s| s.to_string()).collect())
            }
            _ => Realm::Deployment,
        };
        let caller = auth::authenticate(&self.auth, req, now, &realm).await?;
        let params = routes::check_params(route, raw_params)?;
        let query = parse_query(req.query.as_deref())?;
        if let Some(input) = route.input {
            schema::validate_input(input, &mut body)?;
        }
        let call = Call {
            params,
            query,
            body,
            caller,
            now,
        };
        let (status, out, extra) = if is_auth {
            let (s, v) = auth_handlers::dispatch(self, route, call).await?;
            (s, v, vec![])
        } else if is_scheduler {
            let (s, v) = scheduler_handlers::dispatch(self, route, call).await?;
            (s, v, vec![])
        } else if artifact_handlers::handles(route.name) {
            artifact_handlers::dispatch(self, route, call).await?
        } else {
            let (s, v) = handlers::dispatch(self, route, call).await?;
            (s, v, vec![])
        };
        // Only successful replies have an output schema (a 424 error artifact has its own body).
        if self.validate_output && status < 400 {
            if let Some(output) = route.output {
                if let Err(errs) = schema::check(output, &out) {
                    return Err(ApiError::internal(format!(
                        "{} response fails {output}: {}",
                        route.name,
                        errs.join("; ")
                    )));
                }
            }
        }
        Ok((status, out, extra))
    }
}

/// Headers a handler adds to its reply.
type Headers = Vec<(&'static str, String)>;

/// Which routes a server answers; any other is 404.
#[derive(Debug, Clone, Copy)]
enum Serving<'a> {
    /// Every route of both services (the local server).
    All,
    /// One queue endpoint (a Lambda function per endpoint).
    QueueEndpoint(&'a str),
    /// Every route of the auth service (one Lambda function).
    AuthService,
    /// One scheduler endpoint (a Lambda function per endpoint).
    SchedulerEndpoint(&'a str),
}

/// How far a request got, for the `requestInfo` of an error.
struct Seen {
    method: &'static str,
    params: Value,
    body_parsed: bool,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            method: "unknown",
            params: json!({}),
            body_parsed: false,
        }
    }
}

fn parse_body(route: &Route, req: &ApiRequest) -> Result<Value, ApiError> {
    let is_json = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if req.body.is_empty() || (!is_json && route.input.is_none()) {
        if route.input.is_some() && !req.body.is_empty() && !is_json {
            return Err(ApiError::new(
                ErrorCode::MalformedPayload,
                "The request body must be sent as Content-Type: application/json",
            ));
        }
        return Ok(json!({}));
    }
    if !is_json {
        return Err(ApiError::new(
            ErrorCode::MalformedPayload,
            "The request body must be sent as Content-Type: application/json",
        ));
    }
    let v: Value = serde_json::from_slice(&req.body).map_err(|e| {
        ApiError::new(
            ErrorCode::MalformedPayload,
            format!("The request body is not valid JSON: {e}"),
        )
    })?;
    if !v.is_object() {
        return Err(ApiError::new(
            ErrorCode::MalformedPayload,
            "The request body must be a JSON object",
        ));
    }
    Ok(v)
}

fn parse_query(q: Option<&str>) -> Result<HashMap<String, String>, ApiError> {
    let mut out = HashMap::new();
    for pair in q.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let dec = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| ApiError::bad_argument(format!("query argument {s:?} is not UTF-8")))
        };
        out.insert(dec(k)?, dec(v)?);
    }
    Ok(out)
}

/// Renders an error as `{code, message, requestInfo}` with Taskcluster's status.
pub fn error_response(e: &ApiError, method: &Method, request_info: Value) -> ApiResponse {
    let footer = format!(
        "\n\n---\n\n* method:     {}\n* errorCode:  {}\n* statusCode: {}\n* time:       {}",
        request_info["method"].as_str().unwrap_or(method.as_str()),
        e.code.as_str(),
        e.status(),
        request_info["time"].as_str().unwrap_or_default()
    );
    let mut body = Map::new();
    body.insert("code".into(), json!(e.code.as_str()));
    body.insert("message".into(), json!(format!("{}{footer}", e.message)));
    body.insert("requestInfo".into(), request_info);
    if let Some(Value::Object(d)) = &e.details {
        for (k, v) in d {
            body.entry(k.clone()).or_insert(v.clone());
        }
    }
    let mut resp = ApiResponse::json(e.status(), &Value::Object(body));
    if e.code == ErrorCode::AuthenticationFailed {
        resp.headers.push(("www-authenticate", "hawk".into()));
    }
    resp
}
