//! The API behind an API Gateway HTTP API (payload v2): each function serves one endpoint (or
//! the auth service) of the same [`Api`] the local server hosts; one more serves the web
//! inspector on the `$default` route.
//!
//! The gateway's event is read as what it is, a payload v2 request, and answered as a v2
//! response. `lambda_http` read every event twice (first as a REST API event, which a v2 event
//! fails only at its end) and converted it to and from `http` types on the way: about 5 % of a
//! warm claimWork's CPU.

use super::Error;
use crate::config::LambdaConfig;
use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use base64::Engine;
use lambda_runtime::LambdaEvent;
use shared::api::router::through_gateway;
use shared::api::{Api, ApiRequest, Serves};
use std::sync::Arc;

/// Serves `serves` until the Lambda runtime stops the function; the services are built once
/// per cold start.
pub async fn serve(cfg: LambdaConfig, serves: Serves) -> Result<(), Error> {
    let api = Arc::new(super::api(&cfg).await?);
    let namespace: Arc<str> = cfg.metrics_namespace.into();
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: LambdaEvent<ApiGatewayV2httpRequest>| {
            let (api, namespace) = (api.clone(), namespace.clone());
            async move {
                let mut req = event.payload;
                // The gateway's id for the request, else the invocation's.
                if req.request_context.request_id.is_none() {
                    req.request_context.request_id = Some(event.context.request_id);
                }
                let resp = handle(&api, serves, req).await;
                crate::print_emf(&api.queue.metrics, &namespace);
                Ok::<_, Error>(resp)
            }
        },
    ))
    .await
}

/// Serves the web inspector until the Lambda runtime stops the function: no store, no
/// secrets, nothing to set up at a cold start.
pub async fn serve_ui() -> Result<(), Error> {
    lambda_runtime::run(lambda_runtime::service_fn(
        |event: LambdaEvent<ApiGatewayV2httpRequest>| async move {
            Ok::<_, Error>(handle_ui(event.payload))
        },
    ))
    .await
}

/// The path as the client sent it (the gateway's `rawPath`), else the one it routed.
fn raw_path(req: &ApiGatewayV2httpRequest) -> String {
    match req.raw_path.as_deref() {
        Some(raw) if !raw.is_empty() => raw.to_string(),
        _ => req.request_context.http.path.clone().unwrap_or_default(),
    }
}

/// A v2 response: `status`, `headers`, and `body` as text when it is (or is meant to be)
/// text, else base64-encoded as the gateway expects binary bodies.
fn response(
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    text: bool,
) -> ApiGatewayV2httpResponse {
    let mut resp = ApiGatewayV2httpResponse::default();
    resp.status_code = i64::from(status);
    for (k, v) in headers {
        if let Ok(v) = http::HeaderValue::from_str(&v) {
            resp.headers.append(k, v);
        }
    }
    let body = match String::from_utf8(body) {
        Ok(s) if text => Body::Text(s),
        Ok(s) => Body::Binary(s.into_bytes()),
        Err(e) => Body::Binary(e.into_bytes()),
    };
    resp.is_base64_encoded = matches!(body, Body::Binary(_));
    resp.body = Some(body);
    resp
}

/// The inspector's answer to a gateway request: text as text, anything else base64-encoded.
pub fn handle_ui(req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpResponse {
    let path = raw_path(&req);
    let accept = req.headers.get("accept").and_then(|v| v.to_str().ok());
    let out = crate::ui::respond(&req.request_context.http.method, &path, accept);
    let text = out.headers.iter().any(|(k, v)| {
        *k == "content-type"
            && (v.starts_with("text/") || v.starts_with("application/json") || v.contains("svg"))
    });
    response(out.status, out.headers, out.body, text)
}

/// Converts a gateway request into the API's and the answer back. The path is taken raw and
/// made canonical (parameters encoded as the clients encode and sign them), so that `%2F`
/// inside a taskQueueId survives a gateway that decodes it; a signature over an artifact name
/// whose `/` were sent raw is checked too.
pub async fn handle(
    api: &Api,
    serves: Serves,
    req: ApiGatewayV2httpRequest,
) -> ApiGatewayV2httpResponse {
    let given = raw_path(&req);
    let method = req.request_context.http.method;
    let request_id = req
        .request_context
        .request_id
        .unwrap_or_else(shared::ids::new_slugid);
    let (path, also_signed) = through_gateway(&method, given);
    let body = match req.body {
        None => bytes::Bytes::new(),
        // A body that does not decode is handed over as sent: the endpoint then refuses it as
        // malformed, as it would any other.
        Some(b) if req.is_base64_encoded => {
            match base64::engine::general_purpose::STANDARD.decode(&b) {
                Ok(decoded) => bytes::Bytes::from(decoded),
                Err(_) => bytes::Bytes::from(b),
            }
        }
        Some(b) => bytes::Bytes::from(b),
    };
    let req = ApiRequest {
        method,
        path,
        query: req.raw_query_string.filter(|q| !q.is_empty()),
        headers: req.headers,
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
    response(out.status, out.headers, out.body, true)
}
