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
}

/// One pass of a job at `now`: what it handled, and whether more is due.
pub type PassFn =
    for<'a> fn(&'a Context<'a>, Ts, &'a Budget) -> BoxFuture<'a, Result<Pass, ApiError>>;

/// A whole run of a job that repeats its own passes; what it handled.
pub type WholeFn = for<'a> fn(&'a Context<'a>, Budget) -> BoxFuture<'a, Result<usize, JobError>>;

/// How a job runs.
pub enum Run {
    /// Its pass, repeated while work is due and the budget lasts.
    Repeat(PassFn),
    /// A run of its own.
    Whole(WholeFn),
}

/// A job's handling of a batch of a table's changed items (its stream, deployed) at `now`.
pub type OnStream = for<'a> fn(&'a Queue, Vec<Item>, Ts) -> BoxFuture<'a, Result<usize, JobError>>;

/// When the local server runs a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// Every `reaper_interval_ms` (the jobs deployed every minute).
    Reapers,
    /// Every `artifact_reaper_interval_ms` (the hourly ones).
    Expiry,
    /// Inside the publisher's loop, which sweeps the outboxes every second.
    Publisher,
}

/// A table's stream that triggers a job besides its schedule.
#[derive(Debug)]
pub struct Stream {
    /// The table.
    pub table: &'static str,
    /// Only the records that resolve a task or carry this index's entry; `None`: every one.
    pub marked_by: Option<&'static str>,
    /// Retries of a failing batch before its first record goes to the failure queue.
    pub retries: u32,
    /// The job's handling of a batch. Locally the process's own writes stand for the stream:
    /// the loop is woken when it resolves a task.
    pub run: OnStream,
}

/// One background job.
pub struct Job {
    /// Its name, the Lambda function's handler (`claimReaper`).
    pub name: &'static str,
    /// One line on what it does.
    pub about: &'static str,
    /// Its EventBridge schedule as deployed (the template parameter `<Name>Rate`'s default).
    pub rate: &'static str,
    /// When the local server runs it.
    pub local: Local,
    /// The tables and buckets it uses.
    pub needs: &'static [Need],
    /// True if it publishes events: its function gets the broker's variables and a
    /// [`Publisher`].
    pub publishes: bool,
    /// A stream that also triggers it.
    pub stream: Option<Stream>,
    /// How it runs.
    pub work: Run,
}

impl Job {
    /// Runs the job once within `budget`: its pass while work is due and the budget lasts;
    /// what it handled.
    pub async fn run(&self, c: &Context<'_>, budget: Budget) -> Result<usize, JobError> {
        match self.work {
            Run::Repeat(pass) => repeat(budget, || pass(c, Ts::now(), &budget)).await,
            Run::Whole(whole) => whole(c, budget).await,
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

const TASKS_AND_GROUPS: &[Need] = &[
    Need::Table(TASKS, Access::Write),
    Need::Table(TASK_GROUPS, Access::Write),
];

/// Expires claims whose `takenUntil` passed.
pub static CLAIM_REAPER: Job = Job {
    name: "claimReaper",
    about: "Resolves runs whose claim expired",
    rate: "rate(1 minute)",
    local: Local::Reapers,
    needs: TASKS_AND_GROUPS,
    publishes: false,
    stream: None,
    work: Run::Repeat(|c, now, budget| Box::pin(c.queue.reap_claims_once(now, BATCH, budget))),
};

/// Resolves tasks whose deadline passed.
pub static DEADLINE_REAPER: Job = Job {
    name: "deadlineReaper",
    about: "Resolves tasks whose deadline passed",
    rate: "rate(1 minute)",
    local: Local::Reapers,
    needs: TASKS_AND_GROUPS,
    publishes: false,
    stream: None,
    work: Run::Repeat(|c, now, budget| Box::pin(c.queue.reap_deadlines_once(now, BATCH, budget))),
};

/// Makes the dependents of resolved tasks pending: as resolutions are written (the tasks
/// table's stream), and on a schedule for what a failed batch left marked.
pub static DEPENDENCY_RESOLVER: Job = Job {
    name: "dependencyResolver",
    about: "Makes dependents of resolved tasks pending",
    rate: "rate(1 minute)",
    local: Local::Reapers,
    needs: TASKS_AND_GROUPS,
    publishes: false,
    stream: Some(Stream {
        table: TASKS,
        marked_by: Some(index::RESOLVED),
        retries: 10,
        run: |queue, images, now| Box::pin(super::dependencies_of(queue, images, now)),
    }),
    work: Run::Repeat(|c, now, budget| {
        Box::pin(c.queue.resolve_dependents_once(now, BATCH, budget))
    }),
};

/// Publishes the events the stream publisher left in outboxes.
pub static OUTBOX_SWEEPER: Job = Job {
    name: "outboxSweeper",
    about: "Publishes events the stream publisher left behind",
    rate: "rate(5 minutes)",
    local: Local::Publisher,
    needs: &[
        Need::Table(TASKS, Access::Write),
        Need::Table(TASK_GRAPHS, Access::Write),
    ],
    publishes: true,
    stream: None,
    work: Run::Whole(|c, budget| {
        Box::pin(async move {
            let publisher = c.publisher.ok_or(JobError::NoPublisher)?;
            publisher.sweep(c.queue, &|_| false, budget).await
        })
    }),
};

/// Deletes expired artifacts: their objects, then their rows.
pub static ARTIFACT_REAPER: Job = Job {
    name: "artifactReaper",
    about: "Deletes expired artifacts (objects, then rows)",
    rate: "rate(1 hour)",
    local: Local::Expiry,
    needs: &[
        Need::Table(ARTIFACTS, Access::Write),
        Need::Buckets(Access::Write),
    ],
    publishes: false,
    stream: None,
    work: Run::Repeat(|c, now, budget| {
        Box::pin(c.queue.expire_artifacts_once(
            c.blobs,
            now.plus(-c.artifact_grace_ms),
            BATCH,
            budget,
        ))
    }),
};

/// Deletes expired tasks, dependency edges and task groups.
pub static EXPIRY_REAPER: Job = Job {
    name: "expiryReaper",
    about: "Deletes expired tasks, dependency edges and task groups",
    rate: "rate(1 hour)",
    local: Local::Expiry,
    needs: &[
        Need::Table(TASKS, Access::Write),
        Need::Table(TASK_GROUPS, Access::Write),
        Need::Table(ARTIFACTS, Access::Write),
    ],
    publishes: false,
    stream: None,
    work: Run::Repeat(|c, now, budget| Box::pin(c.queue.expire_once(now, BATCH, budget))),
};

/// Every job.
pub static JOBS: [&Job; 6] = [
    &CLAIM_REAPER,
    &DEADLINE_REAPER,
    &DEPENDENCY_RESOLVER,
    &OUTBOX_SWEEPER,
    &ARTIFACT_REAPER,
    &EXPIRY_REAPER,
];

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
