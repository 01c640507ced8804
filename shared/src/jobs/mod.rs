//! Background work: each job ([`declare`]) repeats its pass while work is due and its
//! [`Budget`] lasts, and returns what it did, or a [`JobError`] that says whether trying
//! again can help. What a job leaves stays in its index, so the next run (a timer's tick, the
//! next scheduled invocation) continues where it stopped. The loops and schedules that run
//! the declarations live outside (the local server's timers, EventBridge rules, streams).

use crate::error::ApiError;
use crate::events::drain::{
    drain_all, drain_stream, drain_written, DrainError, DrainOutcome, RecentIds, Waiting,
};
use crate::events::held::drain_held;
use crate::events::EventSink;
use crate::hints::LocalHints;
use crate::metrics;
use crate::queue::core::Pass;
use crate::queue::Queue;
use crate::records::graph::{GraphRecord, SK_TASK_GRAPH};
use crate::records::outbox::Outboxed;
use crate::records::task::{TaskRecord, SK_STATUS};
use crate::store::Item;
use crate::time::Ts;
use std::sync::Arc;

pub mod declare;
pub mod follow;
use crate::scheduler::{Reaction, Scheduler};
pub use declare::{Job, JOBS};

/// Items each pass handles per shard.
pub const BATCH: usize = 100;

pub use crate::time::{Budget, BUDGET_SHARE};

/// Repeats `pass` while it finds more due and the budget lasts; returns the items handled.
async fn repeat<F, Fut, E>(budget: Budget, mut pass: F) -> Result<usize, JobError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Pass, E>>,
    E: Into<JobError>,
{
    let mut total = 0;
    loop {
        let p = pass().await.map_err(Into::into)?;
        total += p.done;
        if !p.more || !budget.left() {
            return Ok(total);
        }
    }
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A queue operation failed.
    #[error(transparent)]
    Queue(#[from] ApiError),
    /// Publishing (or the store under it) failed.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// A job that publishes was run without a publisher (a bug in its caller).
    #[error("the job publishes events, but was given no publisher")]
    NoPublisher,
    /// A job fed by the broker was run without the scheduler (a bug in its caller).
    #[error("the job feeds the task-graph scheduler, but was given none")]
    NoScheduler,
    /// The job was invoked by an event it does not take, or one it cannot read.
    #[error("{0}")]
    Event(String),
}

impl JobError {
    /// True if running the same pass again may succeed (a throttled or unreachable store,
    /// an unreachable broker, a record changing too fast); false for a bug, which repeating
    /// cannot cure.
    pub fn is_retryable(&self) -> bool {
        match self {
            JobError::Queue(e) => e.is_retryable(),
            JobError::Drain(DrainError::Sink(_)) => true,
            JobError::Drain(DrainError::Store(e)) => e.is_transient() || e.is_condition_failed(),
            JobError::NoPublisher | JobError::NoScheduler | JobError::Event(_) => false,
        }
    }
}

/// The dependency worker for a batch of changed items (the tasks table's stream in AWS):
/// every status image that carries a resolution mark gets its dependents looked at now,
/// rather than at the next scheduled pass. Repeats are harmless: the mark is cleared by a
/// write conditioned on the image's version, and a lost one finds the mark gone. A task whose
/// resolution could not be handled is left to the scheduled pass (its `resolved` entry is
/// restored) before the error is returned; so is one too large for the `budget` (see
/// [`Queue::resolve_dependents_of`]), which the scheduled pass goes on with, alone: an image
/// of a resolution already left to the pass (`resolution_held`) is passed over.
pub async fn dependencies_of(
    queue: &Queue,
    images: Vec<Item>,
    now: Ts,
    budget: &Budget,
) -> Result<usize, JobError> {
    // Each task's images that may carry a mark, newest first: most carry none (the local
    // server's change log hands the resolver every write's), and a search of the stored text
    // for the attribute's name passes over those unparsed.
    let mut named: std::collections::BTreeMap<String, Vec<Item>> = Default::default();
    for image in images {
        if image.sk == SK_STATUS && image.data.may_hold(b"\"dependentsDue\"") {
            named.entry(image.pk.clone()).or_default().push(image);
        }
    }
    // The newest marked image of each task; the record in it saves the read (a write
    // conditioned on its version confirms it, or the task is read again). A resolution
    // already left to the scheduled pass is the pass's: a second go beside the pass's would
    // satisfy the partition's edges at twice their pace.
    let mut marked = named.into_values().filter_map(|mut images| {
        images.sort_by_key(|i| std::cmp::Reverse(i.version));
        images
            .into_iter()
            .find_map(marked_record)
            .filter(|(_, rec)| !rec.as_ref().is_some_and(|(r, _)| r.resolution_held))
    });
    let mut n = 0;
    let mut failed = None;
    loop {
        let chunk: Vec<_> = marked.by_ref().take(16).collect();
        if chunk.is_empty() {
            break;
        }
        let ids: Vec<String> = chunk.iter().map(|(id, _)| id.clone()).collect();
        let done = futures_util::future::join_all(chunk.into_iter().map(|(id, rec)| async move {
            match rec {
                Some(loaded) => queue.resolve_dependents_of(loaded, now, budget).await,
                None => queue.resolve_dependents(&id, now, budget).await,
            }
        }))
        .await;
        for (id, result) in ids.iter().zip(done) {
            match result {
                Ok(release) => {
                    n += release.satisfied;
                    if !release.finished {
                        queue.hold_resolution(id).await?;
                    }
                }
                Err(e) => {
                    // Where the stream is the only trigger (no `resolved` entry), leave the
                    // task to the scheduled pass before the batch is retried.
                    queue.hold_resolution(id).await?;
                    failed = Some(e);
                }
            }
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(n),
    }
}

/// The task a status image shows, if the image carries a resolution mark (`dependentsDue`),
/// with the record and its version; a record this build cannot decode is read again by id
/// if the mark, read alone, is there.
fn marked_record(image: Item) -> Option<(String, Option<(TaskRecord, u64)>)> {
    match image.data.decode::<TaskRecord>() {
        Ok(rec) => rec
            .dependents_due
            .is_some()
            .then_some((image.pk, Some((rec, image.version)))),
        Err(_) => {
            #[derive(serde::Deserialize)]
            struct Mark {
                #[serde(default, rename = "dependentsDue")]
                dependents_due: Option<serde::de::IgnoredAny>,
            }
            let mark = image.data.decode::<Mark>();
            mark.is_ok_and(|m| m.dependents_due.is_some())
                .then_some((image.pk, None))
        }
    }
}

/// Publishes what waits in outboxes, remembering what it published (a record written while
/// its earlier events were still being removed carries them again, and they must not go out
/// twice). One per process: the local server's loop, or a warm publisher function.
pub struct Publisher {
    sink: Arc<dyn EventSink>,
    published: RecentIds,
}

fn delivered(outcome: DrainOutcome) -> usize {
    match outcome {
        DrainOutcome::Delivered(n) => n,
        DrainOutcome::Empty => 0,
    }
}

/// Sets [`metrics::UNPUBLISHED_AGE`] for `job` from the oldest undelivered event's time, if
/// any (else 0), and logs a warning while one waits.
pub fn report_unpublished(queue: &Queue, job: &'static str, oldest: Option<Ts>, now: Ts) {
    let age = oldest.map_or(0.0, |t| now.secs_since(t));
    queue.metrics.set_gauge(
        &metrics::UNPUBLISHED_AGE,
        vec![(vec![job.to_string()], age)],
    );
    if oldest.is_some() {
        tracing::warn!(
            job,
            oldest_unpublished_secs = age,
            "events wait to be published"
        );
    }
}

impl Publisher {
    /// A publisher into `sink`.
    pub fn new(sink: Arc<dyn EventSink>) -> Self {
        Publisher {
            sink,
            published: RecentIds::default(),
        }
    }

    /// The sink it publishes to.
    pub fn sink(&self) -> &dyn EventSink {
        self.sink.as_ref()
    }

    /// Makes the sink ready for consumers before the first event: on a broker, declares
    /// every exchange of every enabled layout (see [`EventSink::prepare`]).
    pub async fn prepare(&self) -> Result<(), JobError> {
        self.sink
            .prepare()
            .await
            .map_err(|e| JobError::Drain(DrainError::Sink(e)))
    }

    /// Delivers the events of the records this process just wrote (the fast path; the sweep
    /// remains the safety net for anything else), and of the task graphs if this process
    /// wrote any.
    pub async fn recent(&self, queue: &Queue, hints: &LocalHints) -> Result<usize, JobError> {
        let written = hints.take_dirty();
        let prefix = &queue.cfg.exchange_prefix;
        let store = queue.store.as_ref();
        let (sink, published) = (self.sink(), &self.published);
        let drained = drain_written(store, sink, prefix, written, published, Ts::now()).await;
        hints.drained();
        let mut n = delivered(drained?);
        if hints.take_graph_events() {
            n += self.graphs(queue).await.inspect_err(|_| {
                // Look again next time.
                hints.keep_graph_events();
            })?;
        }
        Ok(n)
    }

    /// The scheduler's events: every shard of the graphs' outbox index, once.
    async fn graphs(&self, queue: &Queue) -> Result<usize, JobError> {
        Ok(self.graph_pass(queue, &Waiting::at(Ts::now())).await?.done)
    }

    async fn graph_pass(&self, queue: &Queue, held: &Waiting) -> Result<Pass, JobError> {
        self.pass::<GraphRecord>(
            queue,
            &queue.cfg.scheduler_exchange_prefix,
            &|_| false,
            held,
        )
        .await
    }

    /// One pass over `R`'s held events ([`crate::events::held`]), then, once none is left
    /// (a record's outbox follows what it had held), over its outbox index.
    async fn pass<R: Outboxed>(
        &self,
        queue: &Queue,
        prefix: &str,
        skip: &(dyn Fn(&str) -> bool + Sync),
        held: &Waiting,
    ) -> Result<Pass, JobError> {
        let store = queue.store.as_ref();
        let first =
            drain_held::<R>(store, self.sink(), prefix, BATCH, &self.published, held).await?;
        if first.more {
            return Ok(Pass {
                done: first.delivered,
                more: true,
            });
        }
        let (done, more) = drain_all::<R>(
            store,
            self.sink(),
            prefix,
            BATCH,
            skip,
            &self.published,
            held,
        )
        .await?;
        Ok(Pass {
            done: first.delivered + done,
            more,
        })
    }

    /// Passes over every shard of the outbox index, the tasks' and the task graphs', while
    /// events wait and the budget lasts, leaving out the tasks for which `skip` is true (a
    /// faster path holds them, with their events, and will deliver them; draining them here
    /// too would publish them twice).
    ///
    /// Sets [`metrics::UNPUBLISHED_AGE`] to how long the oldest event a failed pass left
    /// waits (since a stream publisher first failed to deliver it), 0 when none is left, and
    /// logs it: a broker outage longer than the stream's retries shows there.
    pub async fn sweep(
        &self,
        queue: &Queue,
        skip: &(dyn Fn(&str) -> bool + Sync),
        budget: Budget,
    ) -> Result<usize, JobError> {
        let held = Waiting::at(Ts::now());
        let result = repeat(budget, || async {
            let prefix = &queue.cfg.exchange_prefix;
            let tasks = self.pass::<TaskRecord>(queue, prefix, skip, &held).await?;
            let graphs = self.graph_pass(queue, &held).await?;
            Ok::<_, JobError>(Pass {
                done: tasks.done + graphs.done,
                more: tasks.more || graphs.more,
            })
        })
        .await;
        let oldest = held.oldest.into_inner().ok().flatten();
        report_unpublished(queue, declare::OUTBOX_SWEEPER.name, oldest, Ts::now());
        result
    }

    /// Delivers the outboxes in a batch of changed items (the tables' streams in AWS): task
    /// status images with the queue's prefix, task graph images with the scheduler's. Events
    /// it cannot deliver are held for the sweeper as waiting since `now`.
    pub async fn stream(
        &self,
        queue: &Queue,
        images: Vec<Item>,
        now: Ts,
    ) -> Result<Handled, JobError> {
        let (graphs, tasks): (Vec<Item>, Vec<Item>) =
            images.into_iter().partition(|i| i.sk == SK_TASK_GRAPH);
        let store = queue.store.as_ref();
        let tasks = drain_stream::<TaskRecord>(
            store,
            self.sink(),
            &queue.cfg.exchange_prefix,
            tasks,
            &self.published,
            now,
        )
        .await?;
        let graphs = drain_stream::<GraphRecord>(
            store,
            self.sink(),
            &queue.cfg.scheduler_exchange_prefix,
            graphs,
            &self.published,
            now,
        )
        .await?;
        Ok(Handled {
            done: tasks.delivered + graphs.delivered,
            held: tasks.held + graphs.held,
        })
    }
}

/// What a job did with a batch of a stream.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    /// Records (or events) handled.
    pub done: usize,
    /// Records whose events were left waiting for the sweeper (the broker was away).
    pub held: usize,
}

impl From<usize> for Handled {
    fn from(done: usize) -> Self {
        Handled { done, held: 0 }
    }
}

/// One message of an Amazon MQ event: its queue, whether the broker redelivered it, and its
/// body as JSON (or why it is not base64 JSON).
struct MqMessage<'a> {
    queue: &'a str,
    redelivered: &'a serde_json::Value,
    body: Result<serde_json::Value, String>,
}

/// The messages of one Amazon MQ for RabbitMQ event (`eventSource` `aws:rmq`):
/// `{"rmqMessagesByQueue": {"<queue>::<vhost>": [{"basicProperties", "redelivered", "data"}]}}`
/// with each body base64 in `data`, in order.
///
/// The event is read as JSON rather than as `aws_lambda_events`' type: Amazon MQ sends
/// `"priority": null`, which that type's `u8` refuses (aws/aws-lambda-dotnet#1562).
fn mq_messages(event: &serde_json::Value) -> Result<Vec<MqMessage<'_>>, JobError> {
    use base64::Engine as _;
    if let Some(source) = event["eventSource"].as_str() {
        if source != "aws:rmq" {
            return Err(JobError::Event(format!(
                "not an Amazon MQ for RabbitMQ event: {source}"
            )));
        }
    }
    let queues = event["rmqMessagesByQueue"]
        .as_object()
        .ok_or_else(|| JobError::Event("no rmqMessagesByQueue in the event".into()))?;
    let mut out = vec![];
    for (queue, messages) in queues {
        for m in messages.as_array().map(Vec::as_slice).unwrap_or_default() {
            let body = m["data"]
                .as_str()
                .ok_or_else(|| "no data".to_string())
                .and_then(|d| {
                    base64::engine::general_purpose::STANDARD
                        .decode(d)
                        .map_err(|e| format!("not base64: {e}"))
                })
                .and_then(|b| {
                    crate::json::from_bytes::<serde_json::Value>(&b)
                        .map_err(|e| format!("not JSON: {e}"))
                });
            out.push(MqMessage {
                queue,
                redelivered: &m["redelivered"],
                body,
            });
        }
    }
    Ok(out)
}

/// Handles one Amazon MQ event of resolution messages (see [`mq_messages`]): each body is
/// handed to the scheduler in order; the reply counts what happened (`messages`, `handled`,
/// `ignored`, `skipped`). A body that is not base64 JSON can never succeed, so it is logged
/// and skipped (a poison message must not block the queue); any other failure fails the whole
/// batch (nothing is acknowledged; what was stored is found again on redelivery).
pub async fn resolution_batch(
    scheduler: &Scheduler,
    event: &serde_json::Value,
    now: Ts,
) -> Result<serde_json::Value, JobError> {
    let messages = mq_messages(event)?;
    let (mut handled, mut ignored, mut skipped) = (0usize, 0usize, 0usize);
    for m in &messages {
        let (queue, redelivered) = (m.queue, m.redelivered);
        let body = match &m.body {
            Ok(body) => body,
            Err(e) => {
                tracing::error!(%queue, error = %e, %redelivered, "skipping an undecodable message");
                skipped += 1;
                continue;
            }
        };
        match scheduler.consume(body, now).await {
            Ok(Reaction::Handled) => handled += 1,
            Ok(Reaction::Ignored) => ignored += 1,
            Err(e) => {
                tracing::warn!(%queue, error = %e, "batch failed; the broker redelivers it");
                return Err(e.into());
            }
        }
    }
    let total = messages.len();
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

/// Handles one Amazon MQ event of worker-manager's `worker-stopped` and `worker-removed`
/// messages (see [`mq_messages`]; upstream's `pulse-worker-message`: `workerPoolId`,
/// `workerGroup`, `workerId` and more): each named worker's claimed runs are resolved
/// `exception`/`worker-shutdown` at `now`, with a retry where allowed
/// ([`Queue::resolve_gone_workers`]). A message that cannot name a worker is logged and
/// skipped, never retried; a failure of the store fails the whole batch, which is redelivered
/// (resolving is idempotent). The claimed index is read again after
/// [`QueueConfig::index_settle_ms`](crate::queue::QueueConfig::index_settle_ms), for runs
/// claimed within its lag. The reply counts `messages`, `resolved` runs and `skipped`.
pub async fn worker_gone_batch(
    queue: &Queue,
    event: &serde_json::Value,
    now: Ts,
) -> Result<serde_json::Value, JobError> {
    let messages = mq_messages(event)?;
    let mut skipped = 0usize;
    // Each pool's claimed runs are read once for all the batch's workers of that pool.
    let mut pools: std::collections::BTreeMap<
        String,
        std::collections::BTreeSet<(String, String)>,
    > = Default::default();
    for m in &messages {
        let named = m.body.as_ref().map_err(String::clone).and_then(|b| {
            let field = |f: &str| {
                b[f].as_str()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| format!("no {f}"))
            };
            let pool = field("workerPoolId")?;
            crate::ids::TaskQueueId::parse(pool)
                .map_err(|e| format!("workerPoolId {pool:?}: {e}"))?;
            Ok((pool, field("workerGroup")?, field("workerId")?))
        });
        match named {
            Ok((pool, group, worker)) => {
                pools
                    .entry(pool.to_string())
                    .or_default()
                    .insert((group.to_string(), worker.to_string()));
            }
            Err(e) => {
                let (queue, redelivered) = (m.queue, m.redelivered);
                tracing::error!(%queue, error = %e, %redelivered, "skipping a message that names no worker");
                skipped += 1;
            }
        }
    }
    let mut resolved = 0;
    // A run claimed just before the message may not be in the claimed index yet (a GSI
    // lags its writes): a second look, once the index has settled, finds it.
    let settle = queue.cfg.index_settle_ms;
    let looks = if settle > 0 && !pools.is_empty() {
        2
    } else {
        1
    };
    for look in 0..looks {
        let now = if look == 0 {
            now
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(settle)).await;
            now.plus(i64::try_from(settle).unwrap_or(i64::MAX))
        };
        for (pool, workers) in &pools {
            let n = queue.resolve_gone_workers(pool, workers, now).await?;
            if n > 0 {
                tracing::info!(worker_pool_id = %pool, workers = workers.len(), runs = n, look, "resolved the runs of workers worker-manager let go");
            }
            resolved += n;
        }
    }
    Ok(serde_json::json!({
        "messages": messages.len(), "resolved": resolved, "skipped": skipped
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Data;

    fn image(data: Data) -> Item {
        Item {
            pk: "t".into(),
            sk: SK_STATUS.into(),
            version: 1,
            data,
            indexes: vec![],
        }
    }

    /// What the stream's resolver concludes of one image: passed over unparsed, or marked.
    fn resolution_marked(image: &Item) -> bool {
        image.data.may_hold(b"\"dependentsDue\"") && marked_record(image.clone()).is_some()
    }

    /// Only an image whose `dependentsDue` holds a time is marked, as text or as a value.
    #[test]
    fn a_resolution_mark_is_read_without_the_rest_of_the_image() {
        let text = |s: &str| image(Data::from_bytes(s.as_bytes().to_vec()));
        assert!(resolution_marked(&text(
            r#"{"taskId":"t","runs":[{"state":"completed"}],"dependentsDue":1700000000000}"#
        )));
        assert!(!resolution_marked(&text(
            r#"{"taskId":"t","dependentsDue":null}"#
        )));
        assert!(!resolution_marked(&text(r#"{"taskId":"t"}"#)));
        assert!(!resolution_marked(&text("{not json")));
        // The name deeper in the image: found by the search, refused by the read.
        assert!(!resolution_marked(&text(
            r#"{"taskId":"t","tags":{"dependentsDue":"1"}}"#
        )));
        let value = |v: serde_json::Value| image(Data::from(v));
        assert!(resolution_marked(&value(
            serde_json::json!({"dependentsDue": 5})
        )));
        assert!(!resolution_marked(&value(serde_json::json!({"runs": []}))));
    }

    /// A resolution the stream's resolver left to the scheduled pass is the pass's alone: the
    /// stream's later images of it are passed over (two goes at once would satisfy the edges
    /// at twice their partition's pace), and the pass releases the dependent.
    #[tokio::test]
    async fn a_resolution_left_to_the_scheduled_pass_is_passed_over_by_the_stream() {
        use crate::ids::{new_slugid, TaskId, TaskQueueId};
        use crate::queue::QueueConfig;
        use crate::records::task::ReasonResolved;
        use crate::records::task::TASKS;
        use crate::store::shard::Shards;
        use crate::store::Store;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(crate::store::sqlite::SqliteStore::open(&dir.path().join("db")).unwrap());
        let queue = Queue::new(
            store.clone(),
            Arc::new(crate::signal::LocalSignal::default()),
            crate::creds::IssuerCredentials {
                client_id: "static/q".into(),
                access_token: "t".into(),
            },
            QueueConfig {
                events_from_stream: true,
                ..QueueConfig::default()
            },
        );
        let now = Ts::now();
        let def = |deps: Vec<&str>| {
            let mut body = serde_json::json!({
                "taskQueueId": "prov/held", "created": now, "deadline": now.plus(3_600_000),
                "payload": {}, "dependencies": deps,
                "metadata": {"name": "n", "description": "d", "owner": "o@example.com",
                             "source": "https://example.com/"}
            });
            crate::schema::validate_input("create-task-request", &mut body).unwrap();
            body
        };
        let (dep, dependent) = (
            TaskId::parse(&new_slugid()).unwrap(),
            TaskId::parse(&new_slugid()).unwrap(),
        );
        queue
            .create_task(&dep, def(vec![]), false, now)
            .await
            .unwrap();
        queue
            .create_task(&dependent, def(vec![dep.as_str()]), false, now)
            .await
            .unwrap();
        let tq = TaskQueueId::parse("prov/held").unwrap();
        let pass = queue.try_claim_work(&tq, "g", "w", 1, now).await.unwrap();
        assert_eq!(pass.claims.len(), 1);
        queue
            .resolve(&dep, 0, ReasonResolved::Completed, now)
            .await
            .unwrap();
        let state = |id: TaskId| {
            let queue = &queue;
            async move { queue.status(&id, now).await.unwrap().state() }
        };
        queue.hold_resolution(dep.as_str()).await.unwrap();
        let held = store
            .get(TASKS, dep.as_str(), SK_STATUS)
            .await
            .unwrap()
            .unwrap();
        assert!(resolution_marked(&held));
        let budget = Budget::of(std::time::Duration::from_secs(30));
        assert_eq!(
            dependencies_of(&queue, vec![held], now, &budget)
                .await
                .unwrap(),
            0
        );
        assert_eq!(state(dependent.clone()).await, "unscheduled");
        let pass = queue
            .resolve_dependents_once(now, 100, Shards::ALL, &budget)
            .await
            .unwrap();
        assert_eq!(pass.done, 1, "the pass released it");
        assert_eq!(state(dependent).await, "pending");
        let (rec, _) = queue.load(dep.as_str()).await.unwrap().unwrap();
        assert!(!rec.resolution_held && rec.dependents_due.is_none());
    }
}
