//! The API behind an API Gateway HTTP API (payload v2): each function serves one endpoint (or
//! the auth service) of the same [`Api`] the local server hosts; one more serves the web
//! inspector on the `$default` route.

use super::Error;
use crate::config::LambdaConfig;
use lambda_http::{Body, Request, RequestExt, Response};
use shared::api::router::through_gateway;
use shared::api::{Api, ApiRequest, Serves};
use std::sync::Arc;

/// Serves `serves` until the Lambda runtime stops the function; the services are built once
/// per cold start.
pub async fn serve(cfg: LambdaConfig, serves: Serves) -> Result<(), Error> {
    let api = Arc::new(super::api(&cfg).await?);
    let namespace: Arc<str> = cfg.metrics_namespace.into();
    lambda_http::run(lambda_http::service_fn(move |req: Request| {
        let (api, namespace) = (api.clone(), namespace.clone());
        async move {
            let resp = handle(&api, serves, req).await;
            crate::print_emf(&api.queue.metrics, &namespace);
            Ok::<_, Error>(resp)
        }
    }))
    .await
}

/// Serves the web inspector until the Lambda runtime stops the function: no store, no
/// secrets, nothing to set up at a cold start.
pub async fn serve_ui() -> Result<(), Error> {
    lambda_http::run(lambda_http::service_fn(|req: Request| async move {
        Ok::<_, Error>(handle_ui(req))
    }))
    .await
}

/// The inspector's answer to a gateway request: text as text, anything else base64-encoded
/// (`Body::Binary`), as the gateway expects binary bodies.
pub fn handle_ui(req: Request) -> Response<Body> {
    let raw = req.raw_http_path().to_string();
    let path = if raw.is_empty() {
        req.uri().path().to_string()
    } else {
        raw
    };
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
    let out = crate::ui::respond(req.method(), &path, accept);
    let text = out.headers.iter().any(|(k, v)| {
        *k == "content-type"
            && (v.starts_with("text/") || v.starts_with("application/json") || v.contains("svg"))
    });
    let mut resp = Response::builder().status(out.status);
    for (k, v) in out.headers {
        resp = resp.header(k, v);
    }
    let body = match String::from_utf8(out.body) {
        Ok(s) if text => Body::Text(s),
        Ok(s) => Body::Binary(s.into_bytes()),
        Err(e) => Body::Binary(e.into_bytes()),
    };
    resp.body(body).unwrap_or_default()
}

/// Converts a gateway request into the API's and the answer back. The path is taken raw and
/// made canonical (parameters encoded as the clients encode and sign them), so that `%2F`
/// inside a taskQueueId survives a gateway that decodes it; a signature over an artifact name
/// whose `/` were sent raw is checked too.
pub async fn handle(api: &Api, serves: Serves, req: Request) -> Response<Body> {
    let raw = req.raw_http_path().to_string();
    let request_id = match req.request_context_ref() {
        Some(lambda_http::request::RequestContext::ApiGatewayV2(c)) => c.request_id.clone(),
        _ => None,
    }
    .or_else(|| req.lambda_context_ref().map(|c| c.request_id.clone()))
    .unwrap_or_else(shared::ids::new_slugid);
    let (parts, body) = req.into_parts();
    let given = if raw.is_empty() {
        parts.uri.path().to_string()
    } else {
        raw
    };
    let (path, also_signed) = through_gateway(&parts.method, given);
    let body = match body {
        Body::Empty => bytes::Bytes::new(),
        Body::Text(t) => bytes::Bytes::from(t),
        Body::Binary(b) => bytes::Bytes::from(b),
        _ => bytes::Bytes::new(),
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
    let out = api.handle(serves, req).await;
    // The container is frozen once it answers: wake-ups for other processes leave first.
    api.queue.signal.flush(super::WAKEUP_FLUSH).await;
    // Worker metadata a claim made due goes out before the answer: once the container is
    // frozen (or recycled) nothing would write it (held-back runs below the batch wait on).
    let due = shared::queue::workers::Flush::Due;
    api.queue.flush_seen(shared::time::Ts::now(), due).await;
    let mut resp = Response::builder().status(out.status);
    for (k, v) in out.headers {
        resp = resp.header(k, v);
    }
    resp.body(Body::Text(String::from_utf8_lossy(&out.body).into_owned()))
        .unwrap_or_default()
}
