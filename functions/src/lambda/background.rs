//! The functions that are not HTTP endpoints: the publisher and the dependency resolver on the
//! tables' streams, the scheduled jobs, and the task-graph scheduler's consumer fed by Amazon
//! MQ. Each reports partial batch failures, so that only what failed comes back, and only
//! when trying again can help ([`JobError::is_retryable`]).

use super::Error;
use crate::config::LambdaConfig;
use shared::api::Api;
use shared::events::amqp::AmqpSink;
use shared::jobs::{self, Job, JobError, Publisher};
use shared::store::dynamodb::DynamoStore;
use shared::time::Ts;
use std::sync::Arc;

/// The RabbitMQ sink of `TCQ_AMQP_URL`; it connects on first use and the connection is kept
/// across warm invocations. With `TCQ_SCHEDULER_QUEUE` set, every (re)connect also declares
/// that durable queue, bound to the resolution exchanges for the tasks of the scheduler
/// `TCQ_SCHEDULER_ID`, before anything is published: the queue the task-graph consumer's
/// event source mapping reads.
fn amqp_sink(cfg: &LambdaConfig) -> Result<Arc<AmqpSink>, Error> {
    let url = cfg.amqp_url.clone().ok_or("TCQ_AMQP_URL is not set")?;
    let sink = cfg.queue.amqp_sink(&url);
    Ok(Arc::new(match cfg.scheduler_queue() {
        Some((name, pattern)) => sink.with_durable_queue(name, pattern),
        None => sink,
    }))
}

/// The task-graph scheduler's consumer: an Amazon MQ (RabbitMQ) event source mapping on the
/// durable queue the publisher declares (`TCQ_SCHEDULER_QUEUE`) invokes it with batches of
/// the queue's task-completed, task-failed and task-exception messages about the scheduler's
/// tasks (`TCQ_SCHEDULER_ID`). The mapping acknowledges a batch only when the function
/// succeeds; any failure redelivers the whole batch, which is safe because
/// [`shared::scheduler::Scheduler::on_resolution`] is idempotent.
pub async fn serve_task_graph_consumer(cfg: LambdaConfig) -> Result<(), Error> {
    let api = Arc::new(super::api(&cfg).await?);
    tracing::info!(scheduler_id = %api.scheduler.scheduler_id, "task-graph consumer");
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let api = api.clone();
            async move {
                let out = task_graph_batch(&api, &event.payload, Ts::now()).await;
                api.queue.signal.flush(super::WAKEUP_FLUSH).await;
                out.map_err(lambda_runtime::Error::from)
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
/// RabbitMQ with confirms. A failed batch is reported as a partial batch failure from its
/// first record, so Lambda retries it from there (at least once; order per task kept).
pub async fn serve_publisher(cfg: LambdaConfig) -> Result<(), Error> {
    let queue = super::api(&cfg).await?.queue;
    let sink = amqp_sink(&cfg)?;
    // Declares the exchanges and the scheduler's consumer queue at cold start (best effort:
    // every publish connects again if needed).
    // Within Lambda's 10 s init limit, whatever the broker does.
    let init = std::time::Duration::from_secs(3);
    if let Err(e) = sink.ensure_connected_within(init).await {
        tracing::warn!(error = %e, "RabbitMQ not reachable at start; will retry on publish");
    }
    let publisher = Arc::new(Publisher::new(sink));
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let (queue, publisher) = (queue.clone(), publisher.clone());
            async move {
                let records = event.payload["Records"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let result = publisher.stream(&queue, stream_images(&records)).await;
                // Whatever failed, the batch is retried: its events are in the stream (or
                // held in their outboxes), and retrying in order keeps their order.
                stream_batch_reply(&records, result, true)
            }
        },
    ))
    .await
}

/// The new images of a DynamoDB Streams batch, as store items.
fn stream_images(records: &[serde_json::Value]) -> Vec<shared::store::Item> {
    records
        .iter()
        .filter_map(|r| DynamoStore::item_from_stream_image(&r["dynamodb"]["NewImage"]))
        .collect()
}

/// The reply to a stream batch. On a failure that may pass (or on any, with `always_retry`),
/// a partial batch failure from the first record, so that Lambda retries the whole batch in
/// order (handling a record twice changes nothing); a failure that repeating cannot cure is
/// logged and the batch acknowledged: what it left is held for the scheduled pass.
fn stream_batch_reply(
    records: &[serde_json::Value],
    result: Result<usize, JobError>,
    always_retry: bool,
) -> Result<serde_json::Value, Error> {
    let failures = match result {
        Ok(n) => {
            tracing::info!(records = records.len(), handled = n, "stream batch");
            vec![]
        }
        Err(e) if always_retry || e.is_retryable() => {
            tracing::warn!(error = %e, "stream batch failed; Lambda retries it");
            let first = records
                .first()
                .and_then(|r| r["dynamodb"]["SequenceNumber"].as_str())
                .ok_or_else(|| Error::from(e.to_string()))?;
            vec![serde_json::json!({ "itemIdentifier": first })]
        }
        Err(e) => {
            tracing::error!(error = %e, "stream batch failed for good; left to the scheduled pass");
            vec![]
        }
    };
    Ok(serde_json::json!({ "batchItemFailures": failures }))
}

/// [`jobs::BUDGET_SHARE`] of what is left of an invocation (its deadline, from the runtime).
fn budget_of(ctx: &lambda_runtime::Context) -> jobs::Budget {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    let left = std::time::Duration::from_millis(ctx.deadline.saturating_sub(now_ms));
    jobs::Budget::share_of(std::time::Instant::now() + left)
}

/// Runs one scheduled job per EventBridge event, its passes repeated while work is due and
/// [`jobs::BUDGET_SHARE`] of its time lasts (the next invocation continues where it stopped);
/// the reply says what it did. A job with a stream also takes the stream's batches.
pub async fn serve_job(cfg: LambdaConfig, job: &'static Job) -> Result<(), Error> {
    let api = Arc::new(super::api(&cfg).await?);
    let publisher = match job.publishes {
        true => {
            let sink = amqp_sink(&cfg)?;
            Some((sink.clone(), Arc::new(Publisher::new(sink))))
        }
        false => None,
    };
    let grace = cfg.queue.artifact_expiry_grace_ms;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let (api, publisher) = (api.clone(), publisher.clone());
            async move {
                let out = run_job(&api, job, publisher, grace, event).await;
                // Frozen once it answers: wake-ups for waiting claimWork calls leave first.
                api.queue.signal.flush(super::WAKEUP_FLUSH).await;
                out
            }
        },
    ))
    .await
}

type JobPublisher = Option<(Arc<AmqpSink>, Arc<Publisher>)>;

/// One invocation of a job function.
async fn run_job(
    api: &Api,
    job: &'static Job,
    publisher: JobPublisher,
    grace: i64,
    event: lambda_runtime::LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, Error> {
    let queue = &api.queue;
    let budget = budget_of(&event.context);
    if let (Some(stream), Some(records)) = (&job.stream, event.payload["Records"].as_array()) {
        let result = (stream.run)(queue, stream_images(records), Ts::now()).await;
        return stream_batch_reply(records, result, false);
    }
    if let Some((sink, _)) = &publisher {
        // Connecting declares the scheduler's consumer queue, so it exists within a minute
        // of a deployment even before any event is published.
        sink.ensure_connected().await?;
    }
    let ctx = jobs::declare::Context {
        queue,
        blobs: api.blobs.as_ref(),
        artifact_grace_ms: grace,
        publisher: publisher.as_ref().map(|(_, p)| p.as_ref()),
    };
    match job.run(&ctx, budget).await {
        Ok(n) => {
            tracing::info!(job = job.name, done = n, "scheduled pass");
            Ok::<_, Error>(serde_json::json!({ "job": job.name, "done": n }))
        }
        Err(e) => {
            if e.is_retryable() {
                tracing::warn!(job = job.name, error = %e, "scheduled pass failed; the next one retries");
            } else {
                tracing::error!(job = job.name, error = %e, "scheduled pass failed");
            }
            Err(e.into())
        }
    }
}
