//! The functions that are not HTTP endpoints: the background jobs ([`shared::jobs::JOBS`]),
//! invoked by their schedules, their tables' streams or the broker (Amazon MQ), as each
//! declares. A stream batch reports partial batch failures, so that only what failed comes
//! back, and only when trying again can help ([`JobError::is_retryable`]).

use super::Error;
use crate::config::LambdaConfig;
use aws_lambda_events::event::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_dynamo::AttributeValue;
use shared::api::Api;
use shared::events::amqp::AmqpSink;
use shared::jobs::{self, Job, JobError, Publisher};
use shared::metrics;
use shared::store::dynamodb::{DynamoStore, ImageData};
use shared::store::shard::Shards;
use shared::time::Ts;
use std::sync::Arc;

/// The RabbitMQ sink of `TCQ_AMQP_URL`; it connects on first use and the connection is kept
/// across warm invocations. Every (re)connect also declares the durable queue of every job
/// fed by the broker (`TCQ_FEED_QUEUE_PREFIX`, the stack's name), bound as the job declares,
/// before anything is published: the queues the event source mappings read.
fn amqp_sink(cfg: &LambdaConfig) -> Result<Arc<AmqpSink>, Error> {
    let url = cfg.amqp_url.clone().ok_or("TCQ_AMQP_URL is not set")?;
    let feeds = jobs::JOBS.iter().filter_map(|j| j.broker.as_ref());
    Ok(Arc::new(
        feeds.fold(cfg.queue.amqp_sink(&url), |sink, f| {
            sink.with_durable_queue(cfg.queue.feed_queue(f))
        }),
    ))
}

/// The store item of a stream record's new image, or `None` if it is not one of ours.
fn stream_item(image: &serde_dynamo::Item) -> Option<shared::store::Item> {
    let attrs = image.inner();
    let text = |k: &str| match attrs.get(k) {
        Some(AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    };
    let version = match attrs.get("v") {
        Some(AttributeValue::N(n)) => n.parse().ok()?,
        _ => return None,
    };
    let data = match attrs.get("d") {
        Some(AttributeValue::B(bytes)) => ImageData::Deflated(bytes),
        Some(AttributeValue::S(json)) => ImageData::Json(json),
        _ => return None,
    };
    DynamoStore::item_from_image(text("pk")?, text("sk")?, version, data)
}

/// The new images of a DynamoDB Streams batch, as store items.
fn stream_images(records: &[EventRecord]) -> Vec<shared::store::Item> {
    records
        .iter()
        .filter_map(|r| stream_item(&r.change.new_image))
        .collect()
}

/// The reply to a stream batch. On a failure that may pass (or on any, with `always_retry`),
/// a partial batch failure from the first record, so that Lambda retries the whole batch in
/// order (handling a record twice changes nothing); a failure that repeating cannot cure is
/// logged and the batch acknowledged: what it left is held for the scheduled pass.
fn stream_batch_reply(
    records: &[EventRecord],
    result: Result<usize, JobError>,
    always_retry: bool,
) -> Result<DynamoDbEventResponse, Error> {
    let mut reply = DynamoDbEventResponse::default();
    match result {
        Ok(n) => tracing::info!(records = records.len(), handled = n, "stream batch"),
        Err(e) if always_retry || e.is_retryable() => {
            tracing::warn!(error = %e, "stream batch failed; Lambda retries it");
            let first = records
                .first()
                .and_then(|r| r.change.sequence_number.clone())
                .ok_or_else(|| Error::from(e.to_string()))?;
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(first);
            reply.batch_item_failures.push(failure);
        }
        Err(e) => {
            tracing::error!(error = %e, "stream batch failed for good; left to the scheduled pass")
        }
    }
    Ok(reply)
}

/// Each record's age once its batch was handled at `now` ([`metrics::STREAM_LAG`]); a record
/// without its creation time (never from DynamoDB) is left out.
fn observe_lag(queue: &shared::queue::Queue, job: &Job, records: &[EventRecord], now: Ts) {
    for r in records {
        let at = r.change.approximate_creation_date_time.timestamp_millis();
        if at > 0 {
            let secs = now.secs_since(Ts(at));
            queue
                .metrics
                .observe(&metrics::STREAM_LAG, &[job.name], secs);
        }
    }
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

/// What invoked a job's function.
enum Invoked {
    /// A batch of a table's stream (`Records`).
    Stream,
    /// A batch of the broker's messages (`eventSource` `aws:rmq`), read as JSON (see
    /// [`jobs::resolution_batch`]).
    Broker,
    /// Its schedule (an EventBridge event, of which nothing is read), or a hand-made
    /// invocation.
    Schedule,
}

impl Invoked {
    fn of(event: &serde_json::Value) -> Invoked {
        if event.get("Records").is_some() {
            Invoked::Stream
        } else if event.get("rmqMessagesByQueue").is_some() || event["eventSource"] == "aws:rmq" {
            Invoked::Broker
        } else {
            Invoked::Schedule
        }
    }
}

/// Runs a background job per invocation, as its declaration says: a stream's batch, the
/// broker's, or its schedule's pass, repeated while work is due and [`jobs::BUDGET_SHARE`]
/// of its time lasts (the next invocation continues where it stopped); the reply says what it
/// did.
pub async fn serve_job(cfg: LambdaConfig, job: &'static Job) -> Result<(), Error> {
    let api = Arc::new(super::api(&cfg).await?);
    let publisher = match job.publishes {
        true => {
            let sink = amqp_sink(&cfg)?;
            // Declares the exchanges and the scheduler's consumer queue at cold start (best
            // effort, within Lambda's 10 s init limit whatever the broker does: every publish
            // connects again if needed).
            let init = std::time::Duration::from_secs(3);
            if let Err(e) = sink.ensure_connected_within(init).await {
                tracing::warn!(error = %e, "RabbitMQ not reachable at start; will retry on publish");
            }
            Some(Arc::new(Publisher::new(sink)))
        }
        false => None,
    };
    if job.broker.is_some() {
        tracing::info!(scheduler_id = %api.scheduler.scheduler_id, "task-graph consumer");
    }
    let grace = cfg.queue.artifact_expiry_grace_ms;
    let namespace: Arc<str> = cfg.metrics_namespace.into();
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let (api, publisher, namespace) = (api.clone(), publisher.clone(), namespace.clone());
            async move {
                let out = run_job(&api, job, publisher, grace, event).await;
                // Frozen once it answers: wake-ups for waiting claimWork calls leave first.
                api.queue.signal.flush(super::WAKEUP_FLUSH).await;
                crate::print_emf(&api.queue.metrics, &namespace);
                out
            }
        },
    ))
    .await
}

type JobPublisher = Option<Arc<Publisher>>;

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
    let ctx = jobs::declare::Context {
        queue,
        blobs: api.blobs.as_ref(),
        artifact_grace_ms: grace,
        publisher: publisher.as_deref(),
        scheduler: Some(api.scheduler.as_ref()),
        shards: Shards::ALL,
    };
    match Invoked::of(&event.payload) {
        Invoked::Stream => {
            let Some(streams) = &job.streams else {
                return Err(format!(
                    "{} reads no stream, but was given a batch of records",
                    job.name
                )
                .into());
            };
            let event: StreamEvent = serde_json::from_value(event.payload)
                .map_err(|e| format!("not a DynamoDB stream event: {e}"))?;
            let records = &event.records;
            let result = (streams.run)(&ctx, stream_images(records), Ts::now(), &budget).await;
            if result.is_ok() {
                observe_lag(queue, job, records, Ts::now());
            }
            if job.publishes && result.as_ref().map_or(true, |h| h.held > 0) {
                // The batch's events wait: as long as its oldest change.
                let oldest = records
                    .iter()
                    .map(|r| r.change.approximate_creation_date_time.timestamp_millis())
                    .filter(|at| *at > 0)
                    .min()
                    .map(Ts);
                jobs::report_unpublished(queue, job.name, oldest, Ts::now());
            }
            let reply = stream_batch_reply(records, result.map(|h| h.done), streams.only_copy)?;
            return Ok(serde_json::to_value(reply)?);
        }
        Invoked::Broker => {
            return Ok(job.on_broker(&ctx, &event.payload, Ts::now()).await?);
        }
        Invoked::Schedule => {}
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stream batch as Lambda hands it over (every field AWS always sends).
    fn batch(images: &[serde_json::Value]) -> StreamEvent {
        let records: Vec<_> = images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                json!({
                    "awsRegion": "us-east-1", "eventID": i.to_string(), "eventName": "MODIFY",
                    "eventSource": "aws:dynamodb", "eventVersion": "1.1",
                    "dynamodb": {
                        "ApproximateCreationDateTime": 1_764_000_000.0,
                        "NewImage": image, "SequenceNumber": format!("{}", 100 + i),
                        "SizeBytes": 300, "StreamViewType": "NEW_IMAGE"
                    }
                })
            })
            .collect();
        serde_json::from_value(json!({ "Records": records })).expect("a stream event")
    }

    #[test]
    fn stream_images_are_read_as_items_and_others_left_out() {
        let ours = json!({
            "pk": { "S": "task-1" }, "sk": { "S": "status" }, "v": { "N": "7" },
            "d": { "S": "{\"state\":\"pending\"}" }
        });
        // Not deflated data, and no version: not items this code wrote.
        let garbled = json!({
            "pk": { "S": "task-2" }, "sk": { "S": "status" }, "v": { "N": "1" },
            "d": { "B": "bm90IGRlZmxhdGVk" }
        });
        let unversioned = json!({ "pk": { "S": "task-3" }, "sk": { "S": "status" } });
        let event = batch(&[ours, garbled, unversioned]);
        let items = stream_images(&event.records);
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].pk.as_str(), items[0].version), ("task-1", 7));
        assert_eq!(items[0].data, json!({ "state": "pending" }));
    }

    #[test]
    fn a_failed_batch_is_retried_from_its_first_record_unless_retrying_cannot_help() {
        let event = batch(&[json!({}), json!({})]);
        let retryable = || {
            let down = shared::events::SinkError::new("down");
            Err(JobError::Drain(shared::events::drain::DrainError::Sink(
                down,
            )))
        };
        let reply = stream_batch_reply(&event.records, retryable(), false).expect("a reply");
        assert_eq!(
            serde_json::to_value(reply).expect("JSON"),
            json!({ "batchItemFailures": [{ "itemIdentifier": "100" }] })
        );
        let reply =
            stream_batch_reply(&event.records, Err(JobError::NoPublisher), false).expect("a reply");
        assert!(
            reply.batch_item_failures.is_empty(),
            "a bug is left to the schedule"
        );
        let reply =
            stream_batch_reply(&event.records, Err(JobError::NoPublisher), true).expect("a reply");
        assert_eq!(
            reply.batch_item_failures.len(),
            1,
            "unless every failure is retried"
        );
        let reply = stream_batch_reply(&event.records, Ok(2), false).expect("a reply");
        assert!(reply.batch_item_failures.is_empty());
    }
}
