//! The HTTP API of the four services (queue, auth, task-graph scheduler, object),
//! independent of any server: the local server (axum) and the Lambda functions
//! (API Gateway payload v2 events) both turn their request into an [`ApiRequest`] and send back the
//! [`ApiResponse`].
//!
//! Each endpoint is one declaration ([`declare::Endpoint`]) in the file of its resource under
//! [`endpoints`] (the queue's), [`scheduler`], [`auth_service`] or [`object_service`];
//! [`SERVICES`] lists them all, and the router, the Lambda functions and the SAM template
//! read that list.
//!
//! Request pipeline, as upstream: match the route → parse the body → authenticate → URL
//! parameters → query → input schema (defaults filled) → handler (which authorises with the
//! declared scopes, sometimes after reading the task or group they name) → output schema.

pub mod auth_service;
pub mod caller;
pub mod declare;
pub mod endpoints;
pub mod object_service;
pub mod openapi;
pub mod references;
pub mod router;
pub mod scheduler;

use crate::auth::{AuthService, Realm, TEST_GET_SCOPES};
use crate::blobs::{BlobStore, NoBlobs};
use crate::error::{ApiError, ErrorCode};
use crate::metrics;
use crate::queue::Queue;
use crate::schema;
use crate::time::Ts;
use bytes::Bytes;
use declare::{Authn, Call, Endpoint, Reply, Scopes, Service};
use http::{HeaderMap, Method};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Largest accepted body (upstream's `inputLimit`).
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Every service, in the order the router tries their prefixes.
pub static SERVICES: &[&Service] = &[
    &endpoints::QUEUE,
    &auth_service::AUTH,
    &scheduler::SCHEDULER,
    &object_service::OBJECT,
];

/// A request, as any server hands it over.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// HTTP method.
    pub method: Method,
    /// The raw (still percent-encoded) path, including [`PREFIX`].
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
    /// Other spellings of `path` that the client may have signed, tried when `path` does not
    /// verify: behind a gateway that decodes the path, its exact bytes are gone (see
    /// [`router::signed_paths`]). Empty for a server that sees the path as sent.
    pub also_signed: Vec<String>,
    /// Request headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// The id its server gave it (API Gateway's, else the local server's), for its log line.
    pub request_id: String,
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
    /// The existing deployment that authenticates every request, when delegated to
    /// ([`Api::with_delegated_auth`]).
    pub delegated: Option<Arc<crate::auth::remote::RemoteAuth>>,
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
            delegated: None,
        }
    }

    /// The same API with every request authenticated by an existing deployment's auth
    /// service ([`crate::auth::remote`]); the services that are the authority on clients and
    /// roles ([`declare::Service::authority`]) are then not served.
    pub fn with_delegated_auth(mut self, remote: crate::auth::remote::RemoteAuth) -> Self {
        self.delegated = Some(Arc::new(remote));
        self
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

    /// Serves what `serves` names; any other route is 404. Every call is counted
    /// ([`crate::metrics`]) and logged in one line (target `tcq::api`).
    pub async fn handle(&self, serves: Serves, req: ApiRequest) -> ApiResponse {
        let started = Instant::now();
        let mut seen = Seen::default();
        let (resp, error) = self.answer(serves, &req, &mut seen).await;
        let elapsed = started.elapsed();
        let status = resp.status.to_string();
        // Any other method a client sends would make a series of its own.
        let method = match req.method {
            Method::GET | Method::PUT | Method::POST | Method::DELETE | Method::OPTIONS => {
                req.method.as_str()
            }
            _ => "other",
        };
        let labels = [method, seen.method, &status, seen.service];
        let m = &self.queue.metrics;
        m.add(&metrics::HTTP_REQUESTS, &labels, 1.0);
        m.observe(&metrics::HTTP_DURATION, &labels, elapsed.as_secs_f64());
        log_call(&req, &seen, resp.status, elapsed, error.as_ref());
        resp
    }

    async fn answer(
        &self,
        serves: Serves,
        req: &ApiRequest,
        seen: &mut Seen,
    ) -> (ApiResponse, Option<ApiError>) {
        let now = Ts::now();
        if req.method == Method::OPTIONS {
            seen.method = "preflight";
            let resp = ApiResponse {
                status: 204,
                headers: standard_headers(),
                body: vec![],
            };
            return (resp, None);
        }
        if req.method == Method::GET && references::is_document_path(&req.path) {
            seen.method = "reference";
            return match references::document(&req.path, &root_url(&req.headers)) {
                Some(doc) => (ApiResponse::json(200, &doc), None),
                None => {
                    let e = ApiError::not_found(format!("No such document: {}", req.path));
                    let info = json!({ "method": "", "params": {}, "payload": {}, "time": now });
                    (error_response(&e, &req.method, info), Some(e))
                }
            };
        }
        match self.serve(req, serves, now, seen).await {
            Ok(reply) => {
                let mut r = ApiResponse::json(reply.status, &reply.body);
                r.headers.extend(reply.headers);
                (r, None)
            }
            Err(e) => {
                // Built only on the error path: re-reading the body here is cheaper than
                // copying every request's body in case an error needs it.
                // Not echoed when the body itself was too large: the answer must stay small
                // (a Lambda response is at most 6 MB).
                let payload = (seen.body_parsed && e.code != ErrorCode::InputTooLarge)
                    .then(|| crate::json::from_bytes::<Value>(&req.body).ok())
                    .flatten()
                    .unwrap_or_else(|| json!({}));
                let info = json!({ "method": seen.method, "params": seen.params, "payload": payload, "time": now });
                (error_response(&e, &req.method, info), Some(e))
            }
        }
    }

    async fn serve(
        &self,
        req: &ApiRequest,
        serves: Serves,
        now: Ts,
        seen: &mut Seen,
    ) -> Result<Reply, ApiError> {
        let delegated = self.delegated.is_some();
        let m = router::find(&req.method, &req.path)
            .filter(|m| serves.covers(m.service, m.endpoint))
            .filter(|m| !(delegated && m.service.authority))
            .ok_or_else(|| {
                ApiError::not_found(format!("No such endpoint: {} {}", req.method, req.path))
            })?;
        let endpoint = m.endpoint;
        seen.method = endpoint.name;
        seen.service = m.service.name;
        seen.route = endpoint.route;
        seen.params = Value::Object(
            m.raw
                .iter()
                .map(|(k, v)| (k.to_string(), json!(router::decode(v))))
                .collect::<Map<_, _>>(),
        );
        if req.body.len() > MAX_BODY_BYTES {
            return Err(ApiError::new(
                ErrorCode::InputTooLarge,
                format!("Request body exceeds {MAX_BODY_BYTES} bytes"),
            ));
        }
        let mut body = parse_body(endpoint, req)?;
        seen.body_parsed = true;
        // The test endpoints authenticate against upstream's fixed test client only.
        let realm = match endpoint.authn {
            Authn::TestClient if endpoint.verb == declare::Verb::Post => {
                Realm::Tester(crate::json::string_list(&body["clientScopes"]))
            }
            Authn::TestClient => {
                Realm::Tester(TEST_GET_SCOPES.iter().map(|s| s.to_string()).collect())
            }
            Authn::Deployment => Realm::Deployment,
        };
        let scheme = caller::scheme(req);
        let authority = match &self.delegated {
            Some(remote) => caller::Authority::Remote(remote, &self.queue.metrics),
            None => caller::Authority::Own(&self.auth),
        };
        let caller = match caller::authenticate(authority, req, now, &realm).await {
            Ok(c) => c,
            Err(e) => {
                if let Some(scheme) = scheme {
                    let reason = metrics::failure_reason(&e.message);
                    self.queue
                        .metrics
                        .add(&metrics::AUTH_FAILURE, &[reason, scheme], 1.0);
                }
                return Err(e);
            }
        };
        if let (Some(scheme), Some(client)) = (scheme, &caller.client_id) {
            let label = metrics::client_label(client);
            self.queue
                .metrics
                .add(&metrics::AUTH_SUCCESS, &[label, scheme], 1.0);
            seen.client_id = Some(client.clone());
        }
        let params = router::check_params(&m.raw)?;
        let query = parse_query(req.query.as_deref())?;
        if let Some(input) = endpoint.input {
            let base = || format!("{}/schemas/{}/v1/", root_url(&req.headers), m.service.name);
            schema::validate_input_at(input, &mut body, base)?;
        }
        let mut call = Call {
            endpoint,
            params,
            query,
            body,
            caller,
            now,
            authorized: false,
        };
        let reply = (endpoint.handler)(self, &mut call).await?;
        if !endpoint.success.allows(reply.status) {
            return Err(ApiError::internal(format!(
                "{} answered {}, which it does not declare",
                endpoint.name, reply.status
            )));
        }
        if !call.authorized && !matches!(endpoint.scopes, Scopes::None) {
            return Err(ApiError::internal(format!(
                "{} answered without checking its scopes",
                endpoint.name
            )));
        }
        // Only successful replies have an output schema (a 424 error artifact has its own body).
        if self.validate_output && reply.status < 400 {
            if let Some(output) = endpoint.output {
                if let Err(errs) = schema::check_quietly(output, &reply.body) {
                    return Err(ApiError::internal(format!(
                        "{} response fails {output}: {}",
                        endpoint.name,
                        errs.join("; ")
                    )));
                }
            }
        }
        Ok(reply)
    }
}

/// What a server answers; any other route is 404.
#[derive(Debug, Clone, Copy)]
pub enum Serves {
    /// Every route of every service (the local server).
    All,
    /// Every route of one service (the auth service's one Lambda function).
    Service(&'static Service),
    /// One endpoint (a Lambda function per endpoint).
    Endpoint(&'static Endpoint),
}

impl Serves {
    fn covers(self, service: &Service, endpoint: &Endpoint) -> bool {
        match self {
            Serves::All => true,
            Serves::Service(s) => std::ptr::eq(s, service),
            Serves::Endpoint(e) => std::ptr::eq(e, endpoint),
        }
    }
}

/// How far a request got, for the `requestInfo` of an error and the call's log line.
struct Seen {
    method: &'static str,
    service: &'static str,
    route: &'static str,
    params: Value,
    body_parsed: bool,
    client_id: Option<String>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            method: "unknown",
            // A CloudWatch dimension's value is never empty.
            service: "none",
            route: "",
            params: json!({}),
            body_parsed: false,
            client_id: None,
        }
    }
}

/// The one log line of an API call (target `tcq::api`, info; error for a 5xx, with its
/// cause chain): the endpoint, route, status, duration, the signed-in clientId, the task or
/// task queue named, and the request id. Never a header, the query (a `bewit` is a
/// credential), the body, or a 4xx error's message (it may quote the body).
fn log_call(
    req: &ApiRequest,
    seen: &Seen,
    status: u16,
    elapsed: std::time::Duration,
    error: Option<&ApiError>,
) {
    let param = |k: &str| seen.params.get(k).and_then(Value::as_str);
    let task_queue_id = match (param("provisionerId"), param("workerType")) {
        (Some(p), Some(w)) => Some(format!("{p}/{w}")),
        _ => param("taskQueueId").map(String::from),
    };
    let duration_ms = (elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0;
    let client_id = seen.client_id.as_deref().unwrap_or_default();
    let task_id = param("taskId").unwrap_or_default();
    let task_queue_id = task_queue_id.as_deref().unwrap_or_default();
    let code = error.map_or("", |e| e.code.as_str());
    macro_rules! line {
        ($level:ident, $($extra:tt)*) => {
            tracing::$level!(
                target: "tcq::api",
                name = seen.method,
                service = seen.service,
                method = %req.method,
                route = seen.route,
                resource = %req.path,
                status,
                duration_ms,
                client_id,
                task_id,
                task_queue_id,
                request_id = %req.request_id,
                code,
                $($extra)*
            )
        };
    }
    match error {
        Some(e) if status >= 500 => {
            line!(error, message = %e.message, cause = %e.cause_chain(), "api call")
        }
        _ => line!(info, "api call"),
    }
}

fn parse_body(endpoint: &Endpoint, req: &ApiRequest) -> Result<Value, ApiError> {
    let is_json = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if req.body.is_empty() || (!is_json && endpoint.input.is_none()) {
        if endpoint.input.is_some() && !req.body.is_empty() && !is_json {
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
    let v: Value = crate::json::from_bytes(&req.body).map_err(|e| {
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

/// The deployment's root URL as the caller reached it: the `Host` it asked for, over the
/// scheme a proxy in front says (`X-Forwarded-Proto`, as API Gateway sets), else http.
pub fn root_url(headers: &HeaderMap) -> String {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let host = header("x-forwarded-host")
        .or_else(|| header("host"))
        .unwrap_or("localhost");
    let proto = header("x-forwarded-proto").unwrap_or("http");
    format!("{proto}://{host}")
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
    // Exactly upstream's three fields; structured details (the scopes required and those
    // unsatisfied, an incident's id) are written into the message, as upstream writes them.
    let details = match &e.details {
        Some(d) => format!(
            "\n* details:\n\n```\n{}\n```",
            serde_json::to_string_pretty(d).unwrap_or_default()
        ),
        None => String::new(),
    };
    let body = json!({
        "code": e.code.as_str(),
        "message": format!("{}{footer}{details}", e.message),
        "requestInfo": request_info,
    });
    let mut resp = ApiResponse::json(e.status(), &body);
    if e.code == ErrorCode::AuthenticationFailed {
        resp.headers.push(("www-authenticate", "hawk".into()));
    }
    resp
}
