//! The HTTP API, locally: routes selected as API Gateway selects them among the template's
//! routes, requests handed over as payload format 2.0 events (with the path decoded, as the
//! gateway decodes it), and API Gateway's and Lambda's limits applied: 10 MB bodies, 6 MB
//! invocation payloads and responses, each route's integration timeout.

use super::lambda::{Failure, Functions};
use super::template::{Route, Target};
use super::Services;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, Response, StatusCode};
use base64::Engine;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// API Gateway's limit on a request body.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// What the gateway routes.
pub struct Gateway {
    routes: Vec<Route>,
    functions: Arc<Functions>,
    services: Arc<Services>,
    client: reqwest::Client,
}

/// Route selection as API Gateway documents it: among the routes whose method (or `ANY`) and
/// path match, the one with the most literal segments wins, then a non-greedy one; with none,
/// the `$default` route (the one without a path), if there is one. Returns the route and its
/// path parameters.
pub fn select<'a>(
    routes: &'a [Route],
    method: &str,
    path: &str,
) -> Option<(&'a Route, Map<String, Value>)> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let default = || {
        routes
            .iter()
            .find(|r| r.is_default())
            .map(|r| (r, Map::new()))
    };
    routes
        .iter()
        .filter(|r| !r.is_default() && (r.method == method || r.method == "ANY"))
        .filter_map(|r| {
            let pat: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
            let greedy = pat.last().is_some_and(|l| l.ends_with("+}"));
            let fixed = if greedy { pat.len() - 1 } else { pat.len() };
            let fits = if greedy {
                segs.len() > fixed
            } else {
                segs.len() == fixed
            };
            let ok = fits
                && pat[..fixed]
                    .iter()
                    .zip(&segs)
                    .all(|(p, s)| p.starts_with('{') && !s.is_empty() || p == s);
            if !ok {
                return None;
            }
            let mut params = Map::new();
            for (p, s) in pat[..fixed].iter().zip(&segs) {
                if let Some(name) = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    params.insert(name.to_string(), json!(s));
                }
            }
            if greedy {
                let name = pat[fixed].trim_start_matches('{').trim_end_matches("+}");
                params.insert(name.to_string(), json!(segs[fixed..].join("/")));
            }
            let literals = pat.iter().filter(|p| !p.starts_with('{')).count();
            Some(((literals, !greedy), (r, params)))
        })
        .max_by_key(|(rank, _)| *rank)
        .map(|(_, found)| found)
        .or_else(default)
}

fn gateway_error(status: StatusCode, message: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(json!({ "message": message }).to_string()))
        .unwrap_or_default()
}

fn headers_json(h: &HeaderMap) -> Map<String, Value> {
    let mut out: Map<String, Value> = Map::new();
    for (k, v) in h {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        match out.get_mut(k.as_str()) {
            Some(Value::String(prev)) => {
                prev.push(',');
                prev.push_str(&v);
            }
            _ => {
                out.insert(k.as_str().to_string(), json!(v));
            }
        }
    }
    out
}

fn decode_path(p: &str) -> String {
    percent_encoding::percent_decode_str(p)
        .decode_utf8_lossy()
        .into_owned()
}

/// The host the client called (its `Host` header).
fn host_of(h: &HeaderMap) -> String {
    h.get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string()
}

/// The payload format 2.0 event for a request on `route`.
fn event(
    route: &Route,
    params: Map<String, Value>,
    req: &axum::http::request::Parts,
    body: &[u8],
) -> Value {
    let path = decode_path(req.uri.path());
    let query = req.uri.query().unwrap_or_default();
    let (body, b64) = match std::str::from_utf8(body) {
        _ if body.is_empty() => (Value::Null, false),
        Ok(s) => (json!(s), false),
        Err(_) => (
            json!(base64::engine::general_purpose::STANDARD.encode(body)),
            true,
        ),
    };
    let mut qs = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        qs.insert(decode_path(k), json!(decode_path(v)));
    }
    let host = host_of(&req.headers);
    let route_key = route.key();
    let now = shared::time::Ts::now();
    json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers_json(&req.headers),
        "queryStringParameters": if qs.is_empty() { Value::Null } else { Value::Object(qs) },
        "pathParameters": if params.is_empty() { Value::Null } else { Value::Object(params) },
        "requestContext": {
            "accountId": super::template::ACCOUNT,
            "apiId": "local",
            "domainName": host,
            "domainPrefix": "local",
            "http": {
                "method": req.method.as_str(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": req.headers.get("user-agent").and_then(|h| h.to_str().ok()).unwrap_or_default()
            },
            "requestId": crate::slugid(),
            "routeKey": route_key,
            "stage": "$default",
            "time": now.to_string(),
            "timeEpoch": now.millis()
        },
        "body": body,
        "isBase64Encoded": b64
    })
}

/// The HTTP response for a function's payload format 2.0 answer.
fn response(v: &Value) -> Response<Body> {
    let status = v["statusCode"].as_u64().unwrap_or(200) as u16;
    let mut b = Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
    for (k, v) in v["headers"].as_object().into_iter().flatten() {
        if let Some(v) = v.as_str() {
            b = b.header(k.as_str(), v);
        }
    }
    for c in v["cookies"].as_array().into_iter().flatten() {
        if let Some(c) = c.as_str() {
            b = b.header("set-cookie", c);
        }
    }
    let body = v["body"].as_str().unwrap_or_default();
    let bytes = if v["isBase64Encoded"] == json!(true) {
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap_or_default()
    } else {
        body.as_bytes().to_vec()
    };
    b.body(Body::from(bytes)).unwrap_or_default()
}

impl Gateway {
    /// A gateway over `routes`, invoking `functions` and proxying to `services`.
    pub fn new(routes: Vec<Route>, functions: Arc<Functions>, services: Arc<Services>) -> Gateway {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Gateway {
            routes,
            functions,
            services,
            client,
        }
    }

    /// The axum service.
    pub fn router(self) -> axum::Router {
        axum::Router::new()
            .fallback(serve)
            .with_state(Arc::new(self))
    }
}

async fn serve(State(g): State<Arc<Gateway>>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return gateway_error(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large");
    };
    // Routing sees the decoded path, as API Gateway does.
    let path = decode_path(parts.uri.path());
    let Some((route, params)) = select(&g.routes, parts.method.as_str(), &path) else {
        return gateway_error(StatusCode::NOT_FOUND, "Not Found");
    };
    let function = match &route.target {
        Target::Function(f) => f,
        Target::Service(s) => return proxy(&g, s, route, &parts, body, &path).await,
    };
    let Some(pool) = g.functions.get(function) else {
        return gateway_error(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    };
    let event = event(route, params, &parts, &body);
    // The invocation goes on when the gateway gives up, as it does on Lambda.
    let invocation = tokio::spawn(async move { pool.invoke(&event).await });
    match tokio::time::timeout(route.timeout, invocation).await {
        Err(_) => gateway_error(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable"),
        Ok(Err(_)) => gateway_error(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
        Ok(Ok(Ok(v))) => response(&v),
        Ok(Ok(Err(Failure::Throttled))) => {
            gateway_error(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests")
        }
        // Lambda refuses an event over its 6 MB limit before the function runs.
        Ok(Ok(Err(Failure::RequestTooLarge(_)))) => {
            gateway_error(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large")
        }
        Ok(Ok(Err(f))) => {
            tracing::warn!(%function, failure = ?f, "integration failed");
            gateway_error(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
        }
    }
}

/// Headers that stop at the gateway (hop by hop, or set for the backend anew).
const NOT_FORWARDED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Characters a decoded path cannot carry in a request line; `/` stays as it is.
const PATH_UNSAFE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// An HTTP proxy integration over a VPC link: the request goes to one of the service's
/// tasks with the path the gateway routed on (decoded: the harder case for a server that
/// checks signatures over the path), the backend's `Host`, the headers the integration's
/// parameter mapping sets, and the client's address, port and scheme in `Forwarded` and the
/// `X-Forwarded-*` headers. No task running: 503 at once, as the gateway answers when the
/// registry has no healthy instance; no answer within the integration's timeout: 503.
async fn proxy(
    g: &Gateway,
    service: &str,
    route: &Route,
    parts: &axum::http::request::Parts,
    body: axum::body::Bytes,
    decoded: &str,
) -> Response<Body> {
    let unavailable = || gateway_error(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable");
    let Some(addr) = g.services.get(service).and_then(|s| s.pick()) else {
        return unavailable();
    };
    let path = percent_encoding::utf8_percent_encode(decoded, PATH_UNSAFE).to_string();
    let url = match parts.uri.query() {
        Some(q) => format!("http://{addr}{path}?{q}"),
        None => format!("http://{addr}{path}"),
    };
    let host = host_of(&parts.headers);
    let (domain, port) = host
        .rsplit_once(':')
        .map(|(d, p)| (d.to_string(), p.to_string()))
        .unwrap_or_else(|| (host.clone(), "80".into()));
    let mut req = g.client.request(parts.method.clone(), url);
    for (k, v) in &parts.headers {
        let overwritten = route
            .set_headers
            .iter()
            .any(|(h, _)| h.eq_ignore_ascii_case(k.as_str()));
        if !NOT_FORWARDED.contains(&k.as_str()) && !overwritten {
            req = req.header(k, v);
        }
    }
    // The integration's parameter mapping (`$context.domainName`: the domain the client
    // called, without its port; `$context.requestId`: the gateway's id for the request).
    for (name, var) in &route.set_headers {
        let value = match var.as_str() {
            "$context.requestId" => crate::slugid(),
            _ => domain.clone(),
        };
        req = req.header(name.as_str(), value);
    }
    // The gateway's own `Forwarded` element, without the host: what the claim service needs
    // comes from the mapping above.
    let req = req
        .header("forwarded", format!("by={addr};for=127.0.0.1;proto=http"))
        .header("x-forwarded-for", "127.0.0.1")
        .header("x-forwarded-proto", "http")
        .header("x-forwarded-port", port)
        .body(body)
        .timeout(route.timeout);
    let Ok(resp) = req.send().await else {
        return unavailable();
    };
    let mut b = Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        if !NOT_FORWARDED.contains(&k.as_str()) {
            b = b.header(k, v);
        }
    }
    match resp.bytes().await {
        Ok(bytes) => b.body(Body::from(bytes)).unwrap_or_default(),
        Err(_) => unavailable(),
    }
}
