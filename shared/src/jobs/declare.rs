//! Every background job, declared once, as endpoints are ([`crate::api::declare`]): its name,
//! what runs it deployed (a schedule, a table's stream) and locally, what it needs, and its
//! run. The local server's loops, the Lambda entry, the SAM template and the tests iterate
//! [`JOBS`]; a job's behaviour is its declaration here and its pass (`crate::queue`).

use super::{repeat, Budget, JobError, Publisher, BATCH};
use crate::api::declare::{Access, Need};
use crate::blobs::BlobStore;
use crate::error::ApiError;
use crate::queue::core::Pass;
use crate::queue::Queue;
use crate::records::artifact::ARTIFACTS;
use crate::records::graph::TASK_GRAPHS;
use crate::records::group::TASK_GROUPS;
use crate::records::task::{index, TASKS};
use crate::scheduler::Scheduler;
use crate::store::shard::Shards;
use crate::store::Item;
use crate::time::Ts;
use futures_util::future::BoxFuture;

/// What a run of a job is given.
pub struct Context<'a> {
    /// The queue.
    pub queue: &'a Queue,
    /// The artifacts' objects.
    pub blobs: &'a dyn BlobStore,
    /// How long after its expiry an artifact's object is deleted, in ms.
    pub artifact_grace_ms: i64,
    /// The publisher of a job that [publishes](Job::publishes).
    pub publisher: Option<&'a Publisher>,
    /// The task-graph scheduler, for a job fed by the [broker](Job::broker).
    pub scheduler: Option<&'a Scheduler>,
    /// The shards of the `resolved` index the dependency resolver's pass looks at: every
    /// one, but for the local server's passes woken by its own resolutions, which know theirs.
    pub shards: Shards,
}

/// One pass of a job at `now`: what it handled, and whether more is due.
pub type PassFn =
    for<'a> fn(&'a Context<'a>, Ts, &'a Budget) -> BoxFuture<'a, Result<Pass, ApiError>>;

/// A whole run of a job that repeats its own passes; what it handled.
pub type WholeFn = for<'a> fn(&'a Context<'a>, Budget) -> BoxFuture<'a, Result<usize, JobError>>;

/// How a scheduled job runs.
pub enum Run {
    /// Its pass, repeated while work is due and the budget lasts.
    Repeat(PassFn),
    /// A run of its own.
    Whole(WholeFn),
}

/// A job that runs on a schedule.
pub struct Schedule {
    /// Its EventBridge schedule as deployed (the template parameter `<Name>Rate`'s default).
    pub rate: &'static str,
    /// What each firing runs.
    pub run: Run,
}

/// A job's handling of a batch of a table's changed items (its stream, deployed) at `now`,
/// within the invocation's budget.
pub type OnStream = for<'a> fn(
    &'a Context<'a>,
    Vec<Item>,
    Ts,
    &'a Budget,
) -> BoxFuture<'a, Result<super::Handled, JobError>>;

/// A job's handling of a batch of the broker's messages (an Amazon MQ event) at `now`; the
/// reply says what it did.
pub type OnBroker = for<'a> fn(
    &'a Context<'a>,
    &'a serde_json::Value,
    Ts,
) -> BoxFuture<'a, Result<serde_json::Value, JobError>>;

/// When the local server runs a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// Every `reaper_interval_ms` (the jobs deployed every minute).
    Reapers,
    /// Every `artifact_reaper_interval_ms` (the hourly ones).
    Expiry,
    /// Inside the publisher's loop: it sweeps the outboxes every second, delivers the events
    /// this process writes when it follows no change log, and hands the resolutions to the
    /// scheduler in process.
    Publisher,
    /// On each read of the metrics port, never on a timer: the figures are read when asked.
    Scrape,
    /// Once as the server starts, in the background, and again until it succeeds (the
    /// broker may come up after the server).
    Start,
    /// Consuming its [feed](Job::broker) on the broker, when one is configured.
    Broker,
}

/// A table's stream that triggers a job.
#[derive(Debug)]
pub struct Stream {
    /// The table.
    pub table: &'static str,
    /// Only the records that resolve a task or carry this index's entry; `None`: every one.
    pub marked_by: Option<&'static str>,
    /// Retries of a failing batch before its first record goes to the failure queue.
    pub retries: u32,
    /// Batches of one shard handled at once (Lambda's `ParallelizationFactor`, 1 to 10); the
    /// records of one item stay in order.
    pub parallel: u32,
}

/// The tables' streams that trigger a job, and its handling of their batches.
pub struct Streams {
    /// The streams.
    pub from: &'static [Stream],
    /// True if their records are the only copy of what the job handles (the events of a
    /// write): every failure is retried, and a function that falls behind its streams is
    /// paged. Otherwise a failure that repeating cannot cure is logged and the batch
    /// acknowledged, left to the job's schedule.
    pub only_copy: bool,
    /// The job's handling of a batch. The local server hands it the batches of its embedded
    /// store's change log ([`super::follow`]), or, without one, its own writes' hints.
    pub run: OnStream,
}

/// What a feed's queue is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binds {
    /// This queue's resolution exchanges, for the tasks of the task-graph scheduler. The
    /// publishers declare the queue, so that it holds every such message from the first on.
    Resolutions,
    /// worker-manager's `worker-stopped` and `worker-removed` exchanges (under
    /// `TCQ_WORKER_MANAGER_EXCHANGE_PREFIX`), every message.
    WorkerManager,
}

/// A durable queue on the broker that feeds a job: deployed, an Amazon MQ event source
/// mapping on it invokes the job's function with batches of its messages; locally, the server
/// consumes it (a job whose [`Local`] is [`Local::Broker`]).
pub struct Feed {
    /// The queue's name after the deployment's prefix (`<stack>-<queue>` as deployed).
    pub queue: &'static str,
    /// What it is bound to.
    pub binds: Binds,
    /// The job's handling of a batch of its messages (an Amazon MQ event).
    pub run: OnBroker,
}

/// One background job.
pub struct Job {
    /// Its name, the Lambda function's handler (`claimReaper`).
    pub name: &'static str,
    /// One line on what it does.
    pub about: &'static str,
    /// Its schedule as deployed, if it has one.
    pub schedule: Option<Schedule>,
    /// The tables' streams that trigger it, if any.
    pub streams: Option<Streams>,
    /// The durable queue on the broker that feeds it, if any.
    pub broker: Option<Feed>,
    /// When the local server runs it.
    pub local: Local,
    /// The tables and buckets it uses.
    pub needs: &'static [Need],
    /// True if it publishes events: its function gets the broker's variables and a
    /// [`Publisher`].
    pub publishes: bool,
    /// Its function's timeout as deployed, in seconds.
    pub timeout_secs: u32,
    /// Its function's memory as deployed, in MB.
    pub memory_mb: u32,
    /// The SQS queue (of `infra/resources.json`) its failed work is recorded in, if any.
    pub failures_to: Option<&'static str>,
}

impl Job {
    /// Runs the job's scheduled work once within `budget`: its pass while work is due and the
    /// budget lasts; what it handled.
    pub async fn run(&self, c: &Context<'_>, budget: Budget) -> Result<usize, JobError> {
        let Some(schedule) = &self.schedule else {
            return Err(JobError::Event(format!(
                "{} runs on no schedule",
                self.name
            )));
        };
        match schedule.run {
            Run::Repeat(pass) => repeat(budget, || pass(c, Ts::now(), &budget)).await,
            Run::Whole(whole) => whole(c, budget).await,
        }
    }

    /// True if every failure of a stream batch is to be retried (see [`Streams::only_copy`]).
    pub fn retries_every_stream_failure(&self) -> bool {
        self.streams.as_ref().is_some_and(|s| s.only_copy)
    }

    /// Handles a batch of the broker's messages.
    pub async fn on_broker(
        &self,
        c: &Context<'_>,
        event: &serde_json::Value,
        now: Ts,
    ) -> Result<serde_json::Value, JobError> {
        match &self.broker {
            Some(feed) => (feed.run)(c, event, now).await,
            None => Err(JobError::Event(format!(
                "{} reads no broker queue",
                self.name
            ))),
        }
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Job {
    fn eq(&self, other: &Job) -> bool {
        std::ptr::eq(self, other)
    }
}

/// A scheduled job's limits: five minutes (it stops at its budget and the next firing
/// continues), 512 MB, failures recorded in `job-failures`.
const SCHEDULED_SECS: u32 = 300;
const SCHEDULED_MB: u32 = 512;
const JOB_FAILURES: Option<&str> = Some("job-failures");

const TASKS_AND_GROUPS: &[Need] = &[
    Need::Table(TASKS, Access::Write),
    Need::Table(TASK_GROUPS, Access::Write),
];

/// A job on a schedule only, with the scheduled jobs' limits.
const fn scheduled(
    name: &'static str,
    about: &'static str,
    rate: &'static str,
    local: Local,
    needs: &'static [Need],
    run: Run,
) -> Job {
    Job {
        name,
        about,
        schedule: Some(Schedule { rate, run }),
        streams: None,
        broker: None,
        local,
        needs,
        publishes: false,
        timeout_secs: SCHEDULED_SECS,
        memory_mb: SCHEDULED_MB,
        failures_to: JOB_FAILURES,
    }
}

const TASKS_AND_GRAPHS: &[Need] = &[
    Need::Table(TASKS, Access::Write),
    Need::Table(TASK_GRAPHS, Access::Write),
];

/// Publishes the events of the tasks and task-graphs tables' streams to RabbitMQ, with
/// confirms. Events it cannot publish are held for the sweeper, in order per task
/// ([`crate::events::held`]); a batch that could not be read or held is retried from its
/// first record.
pub static PUBLISHER: Job = Job {
    name: "publisher",
    about: "Publishes the events of the tasks and task-graphs tables' streams to RabbitMQ",
    schedule: None,
    streams: Some(Streams {
        from: &[
            Stream {
                table: TASKS,
                marked_by: None,
                retries: 50,
                parallel: 1,
            },
            Stream {
                table: TASK_GRAPHS,
                marked_by: None,
                retries: 50,
                parallel: 1,
            },
        ],
        only_copy: true,
        run: |c, images, now, _| {
            Box::pin(async move {
                let publisher = c.publisher.ok_or(JobError::NoPublisher)?;
                publisher.stream(c.queue, images, now).await
            })
        },
    }),
    broker: None,
    local: Local::Publisher,
    needs: TASKS_AND_GRAPHS,
    publishes: true,
    timeout_secs: 60,
    memory_mb: 512,
    failures_to: Some("publisher-failures"),
};

/// Expires claims whose `takenUntil` passed.
pub static CLAIM_REAPER: Job = scheduled(
    "claimReaper",
    "Resolves runs whose claim expired",
    "rate(1 minute)",
    Local::Reapers,
    TASKS_AND_GROUPS,
    Run::Repeat(|c, now, budget| Box::pin(c.queue.reap_claims_once(now, BATCH, budget))),
);

/// Resolves tasks whose deadline passed.
pub static DEADLINE_REAPER: Job = scheduled(
    "deadlineReaper",
    "Resolves tasks whose deadline passed",
    "rate(1 minute)",
    Local::Reapers,
    TASKS_AND_GROUPS,
    Run::Repeat(|c, now, budget| Box::pin(c.queue.reap_deadlines_once(now, BATCH, budget))),
);

/// Priority aging: marks the pending runs that waited past the threshold
/// (`TCQ_PRIORITY_AGING_MS`), which claims then take before every run that waited less
/// ([`crate::queue::aging`]). Deployed every minute, so a run ages within a minute of its
/// threshold; locally every `reaper_interval_ms`.
pub static PRIORITY_AGER: Job = Job {
    memory_mb: 128,
    ..scheduled(
        "priorityAger",
        "Moves pending runs that waited past the aging threshold ahead of every priority",
        "rate(1 minute)",
        Local::Reapers,
        &[
            Need::Table(TASKS, Access::Write),
            Need::Table(TASK_GROUPS, Access::Read),
        ],
        Run::Repeat(|c, now, budget| Box::pin(c.queue.age_pending_once(now, BATCH, budget))),
    )
};

/// Goes on with the cancellations and priority changes of task groups too large for one call
/// (`TCQ_GROUP_CALL_TASKS` members), from where each got to: deployed every minute, locally
/// every `reaper_interval_ms`.
pub static GROUP_CHANGES: Job = scheduled(
    "groupChanges",
    "Finishes cancelling or re-prioritising the tasks of large task groups",
    "rate(1 minute)",
    Local::Reapers,
    TASKS_AND_GROUPS,
    Run::Repeat(|c, now, budget| Box::pin(c.queue.advance_group_changes_once(now, BATCH, budget))),
);

/// Makes the dependents of resolved tasks pending: as resolutions are written (the tasks
/// table's stream), and on a schedule for what a failed batch left marked.
pub static DEPENDENCY_RESOLVER: Job = Job {
    streams: Some(Streams {
        from: &[Stream {
            table: TASKS,
            marked_by: Some(index::RESOLVED),
            retries: 10,
            // A task with thousands of dependents takes seconds (they are paced): the
            // resolutions of other tasks on its shard go on beside it.
            parallel: 10,
        }],
        only_copy: false,
        run: |c, images, now, budget| {
            Box::pin(async move {
                super::dependencies_of(c.queue, images, now, budget)
                    .await
                    .map(Into::into)
            })
        },
    }),
    ..scheduled(
        "dependencyResolver",
        "Makes dependents of resolved tasks pending",
        "rate(1 minute)",
        Local::Reapers,
        TASKS_AND_GROUPS,
        Run::Repeat(|c, now, budget| {
            Box::pin(
                c.queue
                    .resolve_dependents_once(now, BATCH, c.shards, budget),
            )
        }),
    )
};

/// Publishes the events the stream publisher left in outboxes.
pub static OUTBOX_SWEEPER: Job = Job {
    publishes: true,
    ..scheduled(
        "outboxSweeper",
        "Publishes events the stream publisher left behind",
        "rate(5 minutes)",
        Local::Publisher,
        TASKS_AND_GRAPHS,
        Run::Whole(|c, budget| {
            Box::pin(async move {
                let publisher = c.publisher.ok_or(JobError::NoPublisher)?;
                publisher.sweep(c.queue, &|_| false, budget).await
            })
        }),
    )
};

/// Declares every exchange of the enabled layouts (the queue's, the scheduler's, the legacy
/// one) and the task-graph consumer's durable queue on the broker, so that a consumer that
/// binds at start-up, as every Pulse consumer does, finds them before the first task: as
/// deployed, within a minute of the stack's creation (and of a broker's replacement); locally,
/// as the server starts. A warm firing finds the connection open and does nothing else.
pub static EXCHANGE_DECLARER: Job = Job {
    publishes: true,
    timeout_secs: 30,
    memory_mb: 128,
    ..scheduled(
        "exchangeDeclarer",
        "Declares the exchanges on the broker before any task",
        "rate(1 minute)",
        Local::Start,
        &[],
        Run::Whole(|c, _| {
            Box::pin(async move {
                c.publisher.ok_or(JobError::NoPublisher)?.prepare().await?;
                Ok(0)
            })
        }),
    )
};

/// Deletes expired artifacts: their objects, then their rows.
pub static ARTIFACT_REAPER: Job = scheduled(
    "artifactReaper",
    "Deletes expired artifacts (objects, then rows)",
    "rate(1 hour)",
    Local::Expiry,
    &[
        Need::Table(ARTIFACTS, Access::Write),
        Need::Buckets(Access::Write),
    ],
    Run::Repeat(|c, now, budget| {
        Box::pin(c.queue.expire_artifacts_once(
            c.blobs,
            now.plus(-c.artifact_grace_ms),
            BATCH,
            budget,
        ))
    }),
);

/// Deletes expired tasks (with their artifacts and dependency edges) and task groups.
pub static EXPIRY_REAPER: Job = scheduled(
    "expiryReaper",
    "Deletes expired tasks (with their artifacts and dependency edges) and task groups",
    "rate(1 hour)",
    Local::Expiry,
    &[
        Need::Table(TASKS, Access::Write),
        Need::Table(TASK_GROUPS, Access::Write),
        Need::Table(ARTIFACTS, Access::Write),
        Need::Buckets(Access::Write),
    ],
    Run::Repeat(|c, now, budget| {
        Box::pin(
            c.queue
                .expire_once(c.blobs, now, c.artifact_grace_ms, BATCH, budget),
        )
    }),
);

/// Reads every task queue's figures into the gauges (pending, claimed, the oldest pending
/// run's age, workers): deployed, the invocation prints them as EMF lines, one per task
/// queue; locally each scrape of `/metrics` reads them.
pub static QUEUE_METRICS: Job = scheduled(
    "queueMetrics",
    "Reads each task queue's pending, claimed, oldest pending age and workers into the gauges",
    "rate(1 minute)",
    Local::Scrape,
    &[
        Need::Table(TASKS, Access::Read),
        Need::Table(TASK_GROUPS, Access::Read),
    ],
    Run::Whole(|c, _| Box::pin(crate::queue::figures::record_gauges(c.queue, Ts::now()))),
);

/// The task-graph scheduler's consumer: an Amazon MQ (RabbitMQ) event source mapping on the
/// durable queue the publishers declare invokes it with batches of the resolution messages
/// about the scheduler's tasks. The mapping acknowledges a batch only when the function
/// succeeds; any failure redelivers the whole batch, which is safe because the scheduler's
/// handling of a resolution is idempotent.
pub static TASK_GRAPH_CONSUMER: Job = Job {
    name: "taskGraphConsumer",
    about: "The task-graph scheduler's consumer of task-completed, task-failed and task-exception",
    schedule: None,
    streams: None,
    broker: Some(Feed {
        queue: "task-graph-scheduler",
        binds: Binds::Resolutions,
        run: |c, event, now| {
            Box::pin(async move {
                let scheduler = c.scheduler.ok_or(JobError::NoScheduler)?;
                super::resolution_batch(scheduler, event, now).await
            })
        },
    }),
    local: Local::Publisher,
    needs: &[
        Need::Table(TASK_GRAPHS, Access::Write),
        Need::Table(TASKS, Access::Write),
        Need::Table(TASK_GROUPS, Access::Write),
    ],
    publishes: false,
    timeout_secs: 120,
    memory_mb: 256,
    failures_to: None,
};

/// worker-manager's consumer: when worker-manager says a worker stopped or was removed
/// (`worker-stopped`, `worker-removed`), the runs that worker still holds are resolved
/// `exception`/`worker-shutdown` at once, retried where allowed, instead of waiting for their
/// claims to expire (upstream's worker-removed resolver). Deployed, an Amazon MQ event source
/// mapping on its queue invokes it; locally the server consumes the queue when it has a
/// broker. Its events go out through the tasks' outboxes, as any resolution's.
pub static WORKER_GONE_RESOLVER: Job = Job {
    name: "workerGoneResolver",
    about: "Resolves the runs of workers worker-manager stopped or removed",
    schedule: None,
    streams: None,
    broker: Some(Feed {
        queue: "worker-removed",
        binds: Binds::WorkerManager,
        run: |c, event, now| Box::pin(super::worker_gone_batch(c.queue, event, now)),
    }),
    local: Local::Broker,
    needs: TASKS_AND_GROUPS,
    publishes: false,
    timeout_secs: 120,
    memory_mb: 256,
    failures_to: None,
};

/// Every job, in the order of the stack's functions.
pub static JOBS: [&Job; 13] = [
    &PUBLISHER,
    &CLAIM_REAPER,
    &DEADLINE_REAPER,
    &PRIORITY_AGER,
    &GROUP_CHANGES,
    &DEPENDENCY_RESOLVER,
    &OUTBOX_SWEEPER,
    &EXCHANGE_DECLARER,
    &ARTIFACT_REAPER,
    &EXPIRY_REAPER,
    &TASK_GRAPH_CONSUMER,
    &WORKER_GONE_RESOLVER,
    &QUEUE_METRICS,
];

/// The tables some job reads the stream of, and the jobs that read them: what a store that
/// keeps its own change log keeps it of, and for whom.
pub fn stream_readers() -> (Vec<&'static str>, Vec<&'static str>) {
    let mut tables: Vec<&'static str> = vec![];
    let mut readers = vec![];
    for job in JOBS {
        let Some(streams) = &job.streams else {
            continue;
        };
        readers.push(job.name);
        for s in streams.from {
            if !tables.contains(&s.table) {
                tables.push(s.table);
            }
        }
    }
    (tables, readers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_unique() {
        let mut names: Vec<&str> = JOBS.iter().map(|j| j.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), JOBS.len());
    }
}
