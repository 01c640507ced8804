//! Lambda entry points. Each function's `main` is one call into this module: HTTP endpoints
//! go through `lambda_http` into the same [`Api`] the local server hosts, scheduled jobs
//! through `lambda_runtime`. Clients are built once per cold start.

use crate::{init_tracing, open_store, LocalConfig};
use clap::Parser;
use lambda_http::{Body, Request, RequestExt, Response};
use shared::amqp::AmqpSink;
use shared::api::{Api, ApiRequest};
use shared::auth::ROOT_CLIENT_ID;
use shared::creds::IssuerCredentials;
use shared::queue::Queue;
use shared::signal::LocalSignal;
use shared::store::dynamodb::DynamoStore;
use shared::time::Ts;
use std::sync::Arc;

type Error = lambda_http::Error;

/// A secret from `<var>`, else from the Secrets Manager secret named by `<var>_SECRET`.
async fn secret(var: &str, direct: Option<String>) -> Result<Option<String>, Error> {
    if direct.is_some() {
        return Ok(direct);
    }
    match std::env::var(format!("{var}_SECRET")) {
        Ok(name) => {
            let sdk = shared::store::dynamodb::sdk_config().await?;
            Ok(Some(shared::secrets::access_token(&sdk, &name).await?))
        }
        Err(_) => Ok(None),
    }
}

/// The queue and auth services over DynamoDB, configured from the environment. A missing
/// variable is named here, at cold start, rather than failing the first request.
///
/// Secrets: the queue's access token (required) and the root client's (optional; without it
/// there is no root client, and clients must already exist in the `auth` table), each from
/// `TCQ_QUEUE_ACCESS_TOKEN` / `TCQ_ROOT_ACCESS_TOKEN` or from the Secrets Manager secret named
/// by `TCQ_QUEUE_ACCESS_TOKEN_SECRET` / `TCQ_ROOT_ACCESS_TOKEN_SECRET`.
pub async fn api_from_env() -> Result<Api, Error> {
    let mut cfg = LocalConfig::parse_from(["tc-queue"]);
    cfg.backend = "aws".into();
    let token = secret("TCQ_QUEUE_ACCESS_TOKEN", cfg.queue_access_token.clone())
        .await?
        .ok_or("TCQ_QUEUE_ACCESS_TOKEN or TCQ_QUEUE_ACCESS_TOKEN_SECRET is not set (the queue's credentials, used to issue workers' temporary credentials)")?;
    cfg.root_access_token = secret("TCQ_ROOT_ACCESS_TOKEN", cfg.root_access_token.clone()).await?;
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
    // The aws backend selects S3 unless TCQ_ARTIFACT_STORAGE says otherwise.
    let blobs = crate::open_blobs(&cfg, "", &issuer.access_token)
        .await
        .map_err(|e| e.to_string())?
        .port();
    let queue = Arc::new(Queue::new(
        store,
        Arc::new(LocalSignal::default()),
        issuer,
        qcfg,
    ));
    Ok(Api::new(queue, Arc::new(auth))
        .with_blobs(blobs)
        .with_scheduler_id(&cfg.scheduler_id))
}

/// The queue over DynamoDB alone (for the scheduled jobs).
pub async fn queue_from_env() -> Result<Arc<Queue>, Error> {
    Ok(api_from_env().await?.queue)
}

/// Serves one endpoint (named as in the route table) behind API Gateway.
pub async fn serve_endpoint(name: &'static str) -> Result<(), Error> {
    crate::multicall::serve_http(Target::Queue(name)).await
}

/// Serves one task-graph scheduler endpoint (named as in
/// [`shared::api::routes::SCHEDULER_ROUTES`]) behind API Gateway.
pub async fn serve_scheduler_endpoint(name: &'static str) -> Result<(), Error> {
    crate::multicall::serve_http(Target::Scheduler(name)).await
}

/// Serves every route of the auth service (`/api/auth/v1/`) behind API Gateway: it is small
/// and rarely called, so one function holds all of it.
pub async fn serve_auth() -> Result<(), Error> {
    crate::multicall::serve_http(Target::Auth).await
}

/// Converts a gateway request into the API's and back; `name` selects one queue endpoint,
/// `None` the auth service. The path is taken raw and made canonical (parameters encoded as
/// the clients encode and sign them; see [`crate::multicall::gateway_path`]), so that `%2F`
/// inside a taskQueueId survives a gateway that decodes it.
pub async fn handle(api: &Api, name: Option<&str>, req: Request) -> Response<Body> {
    let target = match name {
        Some(name) => Target::Queue(name),
        None => Target::Auth,
    };
    handle_for(api, target, req).await
}

/// What one HTTP function serves.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// One queue endpoint.
    Queue(&'a str),
    /// The auth service.
    Auth,
    /// One task-graph scheduler endpoint.
    Scheduler(&'a str),
}

/// Converts a gateway request into the API's (path made canonical) and the answer back.
pub async fn handle_for(api: &Api, target: Target<'_>, req: Request) -> Response<Body> {
    let req = crate::multicall::canonical_request(req);
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
    let out = match target {
        Target::Queue(name) => api.handle_only(name, req).await,
        Target::Auth => api.handle_auth(req).await,
        Target::Scheduler(name) => api.handle_scheduler_only(name, req).await,
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
    /// Publishes events stranded in outboxes (the stream publisher's safety net).
    OutboxSweeper,
    /// Makes dependents of newly resolved tasks pending (one pass over the `resolved` index).
    DependencyResolver,
    /// Deletes expired tasks, dependency edges and task groups.
    ExpiryReaper,
}

/// The RabbitMQ sink configured by `TCQ_AMQP_URL`; it connects on first use and the
/// connection is kept across warm invocations.
///
/// With `TCQ_SCHEDULER_QUEUE` set, every (re)connect also declares that durable queue, bound
/// to the resolution exchanges for the tasks of the scheduler `TCQ_SCHEDULER_ID`, before
/// anything is published: the queue the task-graph consumer's event source mapping reads.
fn amqp_sink_from_env(queue: &Queue) -> Result<Arc<AmqpSink>, Error> {
    let url = std::env::var("TCQ_AMQP_URL").map_err(|_| "TCQ_AMQP_URL is not set")?;
    let sink = AmqpSink::new(url, queue.cfg.exchange_prefix.clone())
        .with_scheduler_prefix(queue.cfg.scheduler_exchange_prefix.clone());
    Ok(Arc::new(match scheduler_queue_from_env() {
        Some((name, pattern)) => sink.with_durable_queue(name, pattern),
        None => sink,
    }))
}

/// The durable consumer queue of `TCQ_SCHEDULER_QUEUE` (unset or empty: none) and its binding
/// pattern, for the scheduler `TCQ_SCHEDULER_ID` (default upstream's).
pub fn scheduler_queue_from_env() -> Option<(String, String)> {
    let name = std::env::var("TCQ_SCHEDULER_QUEUE")
        .ok()
        .filter(|n| !n.is_empty())?;
    let id = std::env::var("TCQ_SCHEDULER_ID")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| shared::scheduler::DEFAULT_SCHEDULER_ID.into());
    Some((name, shared::amqp::scheduler_pattern(&id)))
}

/// The task-graph scheduler's consumer: an Amazon MQ (RabbitMQ) event source mapping on the
/// durable queue the publisher declares (`TCQ_SCHEDULER_QUEUE`) invokes it with batches of
/// the queue's task-completed, task-failed and task-exception messages about the scheduler's
/// tasks (`TCQ_SCHEDULER_ID`). The mapping acknowledges a batch only when the function
/// succeeds; any failure redelivers the whole batch, which is safe because
/// [`shared::scheduler::Scheduler::on_resolution`] is idempotent.
pub async fn serve_task_graph_consumer() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let api = Arc::new(api_from_env().await?);
    tracing::info!(scheduler_id = %api.scheduler.scheduler_id, "task-graph consumer");
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let api = api.clone();
            async move {
                task_graph_batch(&api, &event.payload, Ts::now())
                    .await
                    .map_err(lambda_runtime::Error::from)
            }
        },
    ))
    .await
}

/// Handles one Amazon MQ for RabbitMQ event (`eventSource` `aws:rmq`):
/// `{"rmqMessagesByQueue": {"<queue>::<vhost>": [{"basicProperties", "redelivered", "data"}]}}`
/// with each body base64 in `data`. Each body is handed to the scheduler in order; the reply
/// counts what happened. A body that is not base64 JSON can never succeed, so it is logged and
/// skipped (a poison message must not block the queue); any other failure fails the whole
/// batch (nothing is acknowledged; what was stored is found again on redelivery).
pub async fn task_graph_batch(
    api: &Api,
    event: &serde_json::Value,
    now: Ts,
) -> Result<serde_json::Value, String> {
    use base64::Engine as _;
    if let Some(source) = event["eventSource"].as_str() {
        if source != "aws:rmq" {
            return Err(format!("not an Amazon MQ for RabbitMQ event: {source}"));
        }
    }
    let (mut handled, mut ignored, mut skipped, mut total) = (0usize, 0usize, 0usize, 0usize);
    let queues = event["rmqMessagesByQueue"]
        .as_object()
        .ok_or("no rmqMessagesByQueue in the event")?;
    for (queue, messages) in queues {
        for m in messages.as_array().map(Vec::as_slice).unwrap_or_default() {
            total += 1;
            let body = m["data"]
                .as_str()
                .ok_or_else(|| "no data".to_string())
                .and_then(|d| {
                    base64::engine::general_purpose::STANDARD
                        .decode(d)
                        .map_err(|e| format!("not base64: {e}"))
                })
                .and_then(|b| {
                    serde_json::from_slice::<serde_json::Value>(&b)
                        .map_err(|e| format!("not JSON: {e}"))
                });
            let body = match body {
                Ok(body) => body,
                Err(e) => {
                    tracing::error!(%queue, error = %e, redelivered = %m["redelivered"], "skipping an undecodable message");
                    skipped += 1;
                    continue;
                }
            };
            match api.scheduler.consume(&body, now).await {
                Ok(shared::scheduler::Reaction::Handled) => handled += 1,
                Ok(shared::scheduler::Reaction::Ignored) => ignored += 1,
                Err(e) => {
                    tracing::warn!(%queue, error = %e, "batch failed; the broker redelivers it");
                    return Err(format!("scheduler: {e}"));
                }
            }
        }
    }
    tracing::info!(
        total,
        handled,
        ignored,
        skipped,
        "task-graph consumer batch"
    );
    Ok(serde_json::json!({
        "messages": total, "handled": handled, "ignored": ignored, "skipped": skipped
    }))
}

/// The publisher: DynamoDB Streams event sources on the tasks and task-graphs tables
/// (NEW_IMAGE) invoke it with batches of changed items; it publishes their outbox events to
/// RabbitMQ with confirms, then removes them. A failed batch is reported as a partial batch failure from
/// its first record, so Lambda retries from there (at least once; order per task kept).
pub async fn serve_publisher() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let queue = queue_from_env().await?;
    let sink = amqp_sink_from_env(&queue)?;
    // Declares the exchanges and the scheduler's consumer queue at cold start (best effort:
    // every publish connects again if needed).
    if let Err(e) = sink.ensure_connected().await {
        tracing::warn!(error = %e, "RabbitMQ not reachable at start; will retry on publish");
    }
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let (queue, sink) = (queue.clone(), sink.clone());
            async move {
                let records = event.payload["Records"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let result =
                    shared::reaper::outbox_stream(&queue, sink.as_ref(), stream_images(&records))
                        .await
                        .map(|n| format!("Delivered({n})"));
                stream_batch_reply(&records, result)
            }
        },
    ))
    .await
}

/// The dependency resolver on the tasks table's stream: resolutions are handled as they are
/// written (the schedule remains as a sweep). A failure is reported from the batch's first
/// record, so Lambda retries the batch; handling a record twice changes nothing.
async fn dependency_stream_batch(
    queue: &Queue,
    records: &[serde_json::Value],
    now: Ts,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let result = shared::reaper::dependencies_of(queue, stream_images(records), now)
        .await
        .map(|n| format!("{n} edges satisfied"));
    stream_batch_reply(records, result)
}

/// The new images of a DynamoDB Streams batch, as store items.
fn stream_images(records: &[serde_json::Value]) -> Vec<shared::store::Item> {
    records
        .iter()
        .filter_map(|r| DynamoStore::item_from_stream_image(&r["dynamodb"]["NewImage"]))
        .collect()
}

/// The reply to a stream batch: on failure, a partial batch failure from the first record, so
/// that Lambda retries the whole batch in order (handling a record twice changes nothing).
fn stream_batch_reply(
    records: &[serde_json::Value],
    result: Result<String, String>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let failures = match result {
        Ok(outcome) => {
            tracing::info!(records = records.len(), %outcome, "stream batch");
            vec![]
        }
        Err(e) => {
            tracing::warn!(error = %e, "stream batch failed; Lambda retries it");
            let first = records
                .first()
                .and_then(|r| r["dynamodb"]["SequenceNumber"].as_str())
                .ok_or_else(|| lambda_runtime::Error::from(e))?;
            vec![serde_json::json!({ "itemIdentifier": first })]
        }
    };
    Ok(serde_json::json!({ "batchItemFailures": failures }))
}

/// Runs one scheduled job per EventBridge event; the reply says what the pass did. The
/// dependency resolver also takes batches from the tasks table's stream.
pub async fn serve_job(job: Job) -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let queue = queue_from_env().await?;
    let sink = match job {
        Job::OutboxSweeper => Some(amqp_sink_from_env(&queue)?),
        _ => None,
    };
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let (queue, sink) = (queue.clone(), sink.clone());
            async move {
                let now = Ts::now();
                if let (Job::DependencyResolver, Some(records)) =
                    (job, event.payload["Records"].as_array())
                {
                    return dependency_stream_batch(&queue, records, now).await;
                }
                let n = match (job, sink) {
                    (Job::ClaimReaper, _) => shared::reaper::claims(&queue, now).await?,
                    (Job::DeadlineReaper, _) => shared::reaper::deadlines(&queue, now).await?,
                    (Job::DependencyResolver, _) => {
                        shared::reaper::dependencies(&queue, now).await?
                    }
                    (Job::ExpiryReaper, _) => shared::reaper::expiry(&queue, now).await?,
                    (Job::OutboxSweeper, Some(sink)) => {
                        // Connecting declares the scheduler's consumer queue, so it exists
                        // within a minute of a deployment even before any event is published.
                        sink.ensure_connected().await?;
                        shared::reaper::outbox(&queue, sink.as_ref()).await?
                    }
                    (Job::OutboxSweeper, None) => return Err("no sink".into()),
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
