//! Lambda entry points. Each function's `main` is one call into this module: HTTP endpoints
//! go through `lambda_http` into the same [`Api`] the local server hosts, scheduled jobs
//! through `lambda_runtime`. Clients are built once per cold start.

use crate::{init_tracing, open_store, LocalConfig};
use clap::Parser;
use lambda_http::{Body, Request, RequestExt, Response};
use shared::api::{Api, ApiRequest};
use shared::auth::ROOT_CLIENT_ID;
use shared::creds::IssuerCredentials;
use shared::queue::Queue;
use shared::signal::LocalSignal;
use shared::time::Ts;
use std::sync::Arc;

type Error = lambda_http::Error;

/// The queue and auth services over DynamoDB, configured from the environment. A missing
/// variable is named here, at cold start, rather than failing the first request.
///
/// Secrets: `TCQ_QUEUE_ACCESS_TOKEN` (required) and `TCQ_ROOT_ACCESS_TOKEN` (optional; without
/// it there is no root client, and clients must already exist in the `auth` table).
pub async fn api_from_env() -> Result<Api, Error> {
    let mut cfg = LocalConfig::parse_from(["tc-queue"]);
    cfg.backend = "aws".into();
    let token = cfg
        .queue_access_token
        .clone()
        .ok_or("TCQ_QUEUE_ACCESS_TOKEN is not set (the queue's credentials, used to issue workers' temporary credentials)")?;
    let store = open_store(&cfg).await.map_err(|e| e.to_string())?;
    let issuer = IssuerCredentials {
        client_id: cfg.queue_client_id.clone(),
        access_token: token,
    };
    let root = cfg.root_access_token.clone().map(|t| IssuerCredentials {
        client_id: ROOT_CLIENT_ID.into(),
        access_token: t,
    });
    if root.is_none() {
        tracing::warn!("TCQ_ROOT_ACCESS_TOKEN is not set: no root client");
    }
    let auth = crate::auth_service(
        store.clone(),
        root.as_ref(),
        &issuer,
        cfg.anonymous_scopes(),
    );
    let qcfg = cfg.queue_config();
    let queue = Arc::new(Queue::new(
        store,
        Arc::new(LocalSignal::default()),
        issuer,
        qcfg,
    ));
    Ok(Api::new(queue, Arc::new(auth)))
}

/// The queue over DynamoDB alone (for the scheduled jobs).
pub async fn queue_from_env() -> Result<Arc<Queue>, Error> {
    Ok(api_from_env().await?.queue)
}

/// Serves one endpoint (named as in the route table) behind API Gateway.
pub async fn serve_endpoint(name: &'static str) -> Result<(), Error> {
    init_tracing();
    let api = Arc::new(api_from_env().await?);
    lambda_http::run(lambda_http::service_fn(move |req: Request| {
        let api = api.clone();
        async move { Ok::<_, Error>(handle(&api, Some(name), req).await) }
    }))
    .await
}

/// Serves every route of the auth service (`/api/auth/v1/`) behind API Gateway: it is small
/// and rarely called, so one function holds all of it.
pub async fn serve_auth() -> Result<(), Error> {
    init_tracing();
    let api = Arc::new(api_from_env().await?);
    lambda_http::run(lambda_http::service_fn(move |req: Request| {
        let api = api.clone();
        async move { Ok::<_, Error>(handle(&api, None, req).await) }
    }))
    .await
}

/// Converts a gateway request into the API's and back; `name` selects one queue endpoint,
/// `None` the auth service. The path is taken raw (still percent-encoded) so that `%2F`
/// inside a taskQueueId survives.
pub async fn handle(api: &Api, name: Option<&str>, req: Request) -> Response<Body> {
    let raw_path = req.raw_http_path().to_string();
    let (parts, body) = req.into_parts();
    let path = if raw_path.is_empty() {
        parts.uri.path().to_string()
    } else {
        raw_path
    };
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
    };
    let out = match name {
        Some(name) => api.handle_only(name, req).await,
        None => api.handle_auth(req).await,
    };
    let mut resp = Response::builder().status(out.status);
    for (k, v) in out.headers {
        resp = resp.header(k, v);
    }
    resp.body(Body::Text(String::from_utf8_lossy(&out.body).into_owned()))
        .unwrap_or_default()
}

/// The scheduled jobs.
#[derive(Debug, Clone, Copy)]
pub enum Job {
    /// Expires claims whose takenUntil passed.
    ClaimReaper,
    /// Resolves tasks whose deadline passed.
    DeadlineReaper,
}

/// Runs one scheduled job per EventBridge event; the reply says what the pass did.
pub async fn serve_job(job: Job) -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let queue = queue_from_env().await?;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |_event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let queue = queue.clone();
            async move {
                let now = Ts::now();
                let n = match job {
                    Job::ClaimReaper => shared::reaper::claims(&queue, now).await?,
                    Job::DeadlineReaper => shared::reaper::deadlines(&queue, now).await?,
                };
                tracing::info!(?job, resolved = n, "scheduled pass");
                Ok::<_, lambda_runtime::Error>(
                    serde_json::json!({ "job": format!("{job:?}"), "resolved": n }),
                )
            }
        },
    ))
    .await
}
