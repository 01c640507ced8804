//! A task: its definition item and its status record (runs, retries, priority, outbox), with
//! the keys and index entries of both. The state machine is in [`super::transitions`].
//!
//! | table   | pk           | sk                   | what                                        |
//! |---------|--------------|----------------------|---------------------------------------------|
//! | `tasks` | taskId       | `def`                | the immutable task definition               |
//! | `tasks` | taskId       | `status`             | runs, retries, priority, event outbox       |
//! | `tasks` | taskId       | `dead-letter#<id>`   | an event that failed its message schema     |
//!
//! Sparse indexes over `tasks/status` (present only while the condition holds):
//!
//! | index      | pk                 | sk                                       | while             |
//! |------------|--------------------|------------------------------------------|-------------------|
//! | `pending`  | taskQueueId        | `<rank>:<scheduled ms>:<taskId>:<runId>` | last run pending (2) |
//! | `claimed`  | taskQueueId        | `<started ms>:<taskId>`                  | last run running  |
//! | `claims`   | `claims#<shard>`   | `<takenUntil ms>:<taskId>`               | last run running  |
//! | `deadline` | `deadline#<shard>` | `<deadline ms>:<taskId>`                 | task unresolved   |
//! | `outbox`   | `outbox#<shard>`   | `<taskId>`                               | events to deliver (1) |
//! | `resolved` | `resolved#<shard>` | `<resolved ms>:<taskId>`                 | dependents unseen |
//!
//! (1) Where the tables' streams deliver events (AWS), only while a publisher that could not
//! deliver holds them ([`TaskRecord::sweep`]).
//! (2) `<rank>` is the priority's (`0` highest .. `6` lowest), or `-` once the run waited past
//! the aging threshold ([`TaskRecord::aged`]): `-` sorts before every digit, so aged runs are
//! claimed first, oldest first, by the same query that claims the rest.
//!
//! `task-expiry` (pk `task-expiry#<shard>`, sk `<expires ms>:<pk>:<sk>`) holds the items of
//! this table that expire on their own: definitions (which take their task's partition with
//! them) and dependency edges ([`super::edge`]).

use super::outbox::{outbox_entry, OutboxEvent, Outboxed};
use crate::store::shard::{shard_of, shard_pk, time_key, time_keyed};
use crate::store::IndexEntry;
use crate::time::Ts;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Tasks: definitions and statuses (and the dependency edges of [`super::edge`]).
pub const TASKS: &str = "tasks";
/// Sort key of a task's definition item.
pub const SK_DEF: &str = "def";
/// Sort key of a task's status item.
pub const SK_STATUS: &str = "status";

/// Sort key under which an event that failed its schema is kept for inspection, in the
/// partition of the record that held it.
pub fn sk_dead_letter(event_id: &str) -> String {
    format!("dead-letter#{event_id}")
}

/// Index names of the `tasks` table.
pub mod index {
    /// Pending runs by task queue, priority then age.
    pub const PENDING: &str = "pending";
    /// Running runs by task queue and claim time.
    pub const CLAIMED: &str = "claimed";
    /// Running runs by `takenUntil`, for the claim reaper.
    pub const CLAIMS: &str = "claims";
    /// Unresolved tasks by deadline, for the deadline reaper.
    pub const DEADLINE: &str = "deadline";
    /// Status items holding undelivered events.
    pub const OUTBOX: &str = crate::records::outbox::OUTBOX_INDEX;
    /// Resolved tasks whose dependents have not been looked at yet.
    pub const RESOLVED: &str = "resolved";
    /// Task definitions and dependency edges by `expires`.
    pub const TASK_EXPIRY: &str = "task-expiry";
}

/// The expiry entry of an item of [`TASKS`] that expires on its own (a definition, which
/// takes its task's partition with it, or a dependency edge).
pub fn task_expiry_entry(expires: Ts, pk: &str, sk: &str) -> IndexEntry {
    IndexEntry {
        index: index::TASK_EXPIRY,
        pk: shard_pk(index::TASK_EXPIRY, shard_of(pk)),
        sk: format!("{}:{pk}:{sk}", time_key(expires)),
    }
}

fn sharded(index: &'static str, at: Ts, task_id: &str) -> IndexEntry {
    IndexEntry {
        index,
        pk: shard_pk(index, shard_of(task_id)),
        sk: time_keyed(at, task_id),
    }
}

/// Where a pending run sorts in its task queue's pending index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingRank {
    /// Waited past the aging threshold: before every priority, oldest first.
    Aged,
    /// Its priority's place, highest first.
    Priority(Priority),
}

impl PendingRank {
    /// Every rank, in claim order.
    pub const ALL: [PendingRank; 8] = [
        PendingRank::Aged,
        PendingRank::Priority(Priority::Highest),
        PendingRank::Priority(Priority::VeryHigh),
        PendingRank::Priority(Priority::High),
        PendingRank::Priority(Priority::Medium),
        PendingRank::Priority(Priority::Low),
        PendingRank::Priority(Priority::VeryLow),
        PendingRank::Priority(Priority::Lowest),
    ];

    /// The start of the sort keys of this rank's entries (`-:` or `<priority rank>:`).
    pub fn prefix(self) -> String {
        match self {
            // '-' sorts before '0'.
            PendingRank::Aged => "-:".to_string(),
            PendingRank::Priority(p) => format!("{}:", p.rank()),
        }
    }
}

/// The pending index entry of a run.
pub fn pending_entry(
    task_queue_id: &str,
    rank: PendingRank,
    scheduled: Ts,
    task_id: &str,
    run_id: u32,
) -> IndexEntry {
    IndexEntry {
        index: index::PENDING,
        pk: task_queue_id.to_string(),
        sk: format!(
            "{}{}:{task_id}:{run_id}",
            rank.prefix(),
            time_key(scheduled)
        ),
    }
}

/// The claimed-by-queue entry of a running run.
pub fn claimed_entry(task_queue_id: &str, started: Ts, task_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::CLAIMED,
        pk: task_queue_id.to_string(),
        sk: time_keyed(started, task_id),
    }
}

/// The claim-expiry entry of a running run.
pub fn claims_entry(taken_until: Ts, task_id: &str) -> IndexEntry {
    sharded(index::CLAIMS, taken_until, task_id)
}

/// The deadline entry of an unresolved task.
pub fn deadline_entry(deadline: Ts, task_id: &str) -> IndexEntry {
    sharded(index::DEADLINE, deadline, task_id)
}

/// The entry of a resolved task whose dependents are still to be looked at.
pub fn resolved_entry(resolved: Ts, task_id: &str) -> IndexEntry {
    sharded(index::RESOLVED, resolved, task_id)
}

/// Upstream's cap on runs per task.
pub const MAX_RUNS: usize = 50;

/// Task priority, highest first. `normal` is not accepted (removed upstream in v102).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Priority {
    /// Claimed first.
    Highest,
    /// Second.
    VeryHigh,
    /// Third.
    High,
    /// Fourth.
    Medium,
    /// Fifth.
    Low,
    /// Sixth.
    VeryLow,
    /// Claimed last; the default.
    Lowest,
}

impl Priority {
    /// All priorities, highest first.
    pub const ALL: [Priority; 7] = [
        Priority::Highest,
        Priority::VeryHigh,
        Priority::High,
        Priority::Medium,
        Priority::Low,
        Priority::VeryLow,
        Priority::Lowest,
    ];
    /// 0 for highest .. 6 for lowest; the pending index sorts on it.
    pub fn rank(self) -> u8 {
        self as u8
    }
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Highest => "highest",
            Priority::VeryHigh => "very-high",
            Priority::High => "high",
            Priority::Medium => "medium",
            Priority::Low => "low",
            Priority::VeryLow => "very-low",
            Priority::Lowest => "lowest",
        }
    }
    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// State of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Waiting for a worker.
    Pending,
    /// Claimed by a worker.
    Running,
    /// Resolved successfully.
    Completed,
    /// Resolved unsuccessfully.
    Failed,
    /// Resolved by an exception.
    Exception,
}

impl RunState {
    /// True once resolved.
    pub fn is_resolved(self) -> bool {
        matches!(
            self,
            RunState::Completed | RunState::Failed | RunState::Exception
        )
    }
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Exception => "exception",
        }
    }
}

/// Why a run was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCreated {
    /// First run of a scheduled task.
    Scheduled,
    /// Automatic retry after worker-shutdown or claim-expired.
    Retry,
    /// Automatic retry after intermittent-task.
    TaskRetry,
    /// rerunTask.
    Rerun,
    /// Created only to carry an exception (cancel or deadline of an unscheduled task).
    Exception,
}

/// Why a run was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonResolved {
    /// reportCompleted.
    Completed,
    /// reportFailed.
    Failed,
    /// The task's deadline passed.
    DeadlineExceeded,
    /// cancelTask.
    Canceled,
    /// Legacy only.
    Superseded,
    /// The worker did not reclaim in time.
    ClaimExpired,
    /// The worker shut down (retried).
    WorkerShutdown,
    /// The payload was invalid.
    MalformedPayload,
    /// A resource was unavailable.
    ResourceUnavailable,
    /// The worker failed internally.
    InternalError,
    /// The task asked to be retried (retried).
    IntermittentTask,
}

impl ReasonResolved {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonResolved::Completed => "completed",
            ReasonResolved::Failed => "failed",
            ReasonResolved::DeadlineExceeded => "deadline-exceeded",
            ReasonResolved::Canceled => "canceled",
            ReasonResolved::Superseded => "superseded",
            ReasonResolved::ClaimExpired => "claim-expired",
            ReasonResolved::WorkerShutdown => "worker-shutdown",
            ReasonResolved::MalformedPayload => "malformed-payload",
            ReasonResolved::ResourceUnavailable => "resource-unavailable",
            ReasonResolved::InternalError => "internal-error",
            ReasonResolved::IntermittentTask => "intermittent-task",
        }
    }

    /// Parses one of the reasons a worker may report with reportException.
    pub fn parse_worker_reason(s: &str) -> Option<ReasonResolved> {
        [
            ReasonResolved::WorkerShutdown,
            ReasonResolved::MalformedPayload,
            ReasonResolved::ResourceUnavailable,
            ReasonResolved::InternalError,
            ReasonResolved::IntermittentTask,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
    /// The reason a retry run is created with, if this reason retries at all.
    pub fn retry_reason(self) -> Option<ReasonCreated> {
        match self {
            ReasonResolved::WorkerShutdown | ReasonResolved::ClaimExpired => {
                Some(ReasonCreated::Retry)
            }
            ReasonResolved::IntermittentTask => Some(ReasonCreated::TaskRetry),
            _ => None,
        }
    }
}

/// One run, serialised exactly as in the task status structure (absent keys omitted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Index in `runs`.
    pub run_id: u32,
    /// Current state.
    pub state: RunState,
    /// Why it was created.
    pub reason_created: ReasonCreated,
    /// Why it was resolved.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason_resolved: Option<ReasonResolved>,
    /// Claiming worker's group.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub worker_group: Option<String>,
    /// Claiming worker's id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub worker_id: Option<String>,
    /// Claim expiry; kept after resolution.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub taken_until: Option<Ts>,
    /// When the run was created.
    pub scheduled: Ts,
    /// When it was claimed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub started: Option<Ts>,
    /// When it was resolved.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved: Option<Ts>,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

impl Run {
    pub(crate) fn new(run_id: u32, state: RunState, reason: ReasonCreated, now: Ts) -> Run {
        Run {
            unknown: Default::default(),
            run_id,
            state,
            reason_created: reason,
            reason_resolved: None,
            worker_group: None,
            worker_id: None,
            taken_until: None,
            scheduled: now,
            started: None,
            resolved: None,
        }
    }
}

/// The status item of a task: everything that changes after creation, plus the few
/// definition fields that routing keys and events need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// taskId.
    pub task_id: String,
    /// `<provisionerId>/<workerType>`.
    pub task_queue_id: String,
    /// schedulerId.
    pub scheduler_id: String,
    /// projectId.
    pub project_id: String,
    /// taskGroupId.
    pub task_group_id: String,
    /// Current priority (changeTaskPriority updates it).
    pub priority: Priority,
    /// Deadline.
    pub deadline: Ts,
    /// Expiry.
    pub expires: Ts,
    /// `task.retries`.
    pub retries: u32,
    /// Automatic retries left.
    pub retries_left: u32,
    /// The runs, index == runId.
    pub runs: Vec<Run>,
    /// `task.routes`, for CCs.
    pub routes: Vec<String>,
    /// `task.tags`, carried in messages.
    pub tags: Value,
    /// Events not yet delivered.
    #[serde(default)]
    pub outbox: Vec<OutboxEvent>,
    /// Requirements not yet met before the first run may start: unsatisfied dependency edges,
    /// plus one for a self-dependency or defineTask (only scheduleTask lifts those).
    #[serde(default)]
    pub unsatisfied: u32,
    /// When the task last resolved, while its dependents have not been looked at since: the
    /// dependency worker finds it through the `resolved` index and clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependents_due: Option<Ts>,
    /// True while the task counts towards its group's unresolved-task counter: set with the
    /// increment (createTask, or a rerun of a resolved task), cleared with the decrement (the
    /// dependency worker, after the task resolved).
    #[serde(default)]
    pub group_counted: bool,
    /// Whether events wait in the outbox until a publisher removes them, findable by the
    /// outbox sweeper meanwhile (the `outbox` index entry), and a resolution waits for the
    /// dependency worker in the `resolved` index. Always so, unless a table stream delivers
    /// both ([`crate::queue::QueueConfig::events_from_stream`]): then each write stores only
    /// its own events, which its stream record carries to the publisher, and a resolution's
    /// record goes to the dependency resolver, so neither index entry (a write unit to add,
    /// one to remove, each) nor a removal write is needed. A stream function that cannot
    /// finish sets this (the publisher with the events it holds), and it stays set.
    #[serde(default = "super::outbox::sweep_by_default")]
    pub sweep: bool,
    /// Set when a stream's dependency resolver left this resolution to the scheduled pass
    /// (it failed, or its release outlasted the budget), cleared with `dependents_due`: the
    /// stream's images of it are passed over, so that one go at a time releases the edges,
    /// at their partition's pace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resolution_held: bool,
    /// When a stream publisher first failed to deliver the events this record holds for the
    /// sweeper; cleared once its outbox empties (the oldest unpublished event's age).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Ts>,
    /// The run that waited past the aging threshold while pending (the priority ager marks
    /// it): its pending entry sorts before every priority's. A later run is not aged by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aged: Option<u32>,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

/// The task status structure of a record, serialized straight from it (an event's body or
/// an answer built as text needs no `Value` of it).
pub struct Status<'a>(pub &'a TaskRecord);

impl Serialize for Status<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let r = self.0;
        let (p, w) = r.provisioner_and_worker_type();
        let mut m = s.serialize_struct("TaskStatus", 13)?;
        m.serialize_field("taskId", &r.task_id)?;
        m.serialize_field("provisionerId", p)?;
        m.serialize_field("workerType", w)?;
        m.serialize_field("taskQueueId", &r.task_queue_id)?;
        m.serialize_field("schedulerId", &r.scheduler_id)?;
        m.serialize_field("projectId", &r.project_id)?;
        m.serialize_field("taskGroupId", &r.task_group_id)?;
        m.serialize_field("priority", r.priority.as_str())?;
        m.serialize_field("deadline", &r.deadline)?;
        m.serialize_field("expires", &r.expires)?;
        m.serialize_field("retriesLeft", &r.retries_left)?;
        m.serialize_field("state", r.state())?;
        m.serialize_field("runs", &PublicRuns(&r.runs))?;
        m.end()
    }
}

/// The runs as the status structure shows them: without attributes this build does not
/// know (a newer build's, kept only to be written back).
struct PublicRuns<'a>(&'a [Run]);

impl Serialize for PublicRuns<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for run in self.0 {
            if run.unknown.is_empty() {
                seq.serialize_element(run)?;
            } else {
                let mut known = run.clone();
                known.unknown.clear();
                seq.serialize_element(&known)?;
            }
        }
        seq.end()
    }
}

/// What a claim hands to the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Newly claimed.
    Claimed,
    /// Already held by the same worker (claimTask is idempotent).
    AlreadyMine,
}

impl TaskRecord {
    /// The task's state: its last run's, or `unscheduled`.
    pub fn state(&self) -> &'static str {
        self.runs
            .last()
            .map(|r| r.state.as_str())
            .unwrap_or("unscheduled")
    }

    /// True if there is no run yet, or the last run is pending or running.
    pub fn is_unresolved(&self) -> bool {
        self.runs
            .last()
            .map(|r| !r.state.is_resolved())
            .unwrap_or(true)
    }

    pub(crate) fn provisioner_and_worker_type(&self) -> (&str, &str) {
        self.task_queue_id
            .split_once('/')
            .unwrap_or((&self.task_queue_id, ""))
    }

    /// The task status structure.
    pub fn status_json(&self) -> Value {
        serde_json::to_value(Status(self)).unwrap_or_else(|e| {
            tracing::error!(task_id = %self.task_id, error = %e, "BUG: a status does not serialize");
            Value::Null
        })
    }

    /// Where the last run sorts in the pending index while pending.
    pub fn pending_rank(&self) -> PendingRank {
        match self.runs.last() {
            Some(r) if self.aged == Some(r.run_id) => PendingRank::Aged,
            _ => PendingRank::Priority(self.priority),
        }
    }

    /// Marks the last run aged if it is pending and not yet so; true if that changed the
    /// record.
    pub fn age(&mut self, run_id: u32) -> bool {
        let pending = self
            .runs
            .last()
            .is_some_and(|r| r.run_id == run_id && r.state == RunState::Pending);
        if !pending || self.aged == Some(run_id) {
            return false;
        }
        self.aged = Some(run_id);
        true
    }

    /// The sparse index entries implied by the current state.
    pub fn index_entries(&self) -> Vec<IndexEntry> {
        let mut out = Vec::with_capacity(3);
        match self.runs.last() {
            Some(r) if r.state == RunState::Pending => {
                out.push(pending_entry(
                    &self.task_queue_id,
                    self.pending_rank(),
                    r.scheduled,
                    &self.task_id,
                    r.run_id,
                ));
            }
            Some(r) if r.state == RunState::Running => {
                let started = r.started.unwrap_or(r.scheduled);
                out.push(claimed_entry(&self.task_queue_id, started, &self.task_id));
                out.push(claims_entry(
                    r.taken_until.unwrap_or(started),
                    &self.task_id,
                ));
            }
            _ => {}
        }
        if self.is_unresolved() {
            out.push(deadline_entry(self.deadline, &self.task_id));
        }
        if !self.outbox.is_empty() && self.sweep {
            out.push(outbox_entry(&self.task_id));
        }
        if let (Some(t), true) = (self.dependents_due, self.sweep) {
            out.push(resolved_entry(t, &self.task_id));
        }
        out
    }
}

impl Outboxed for TaskRecord {
    const TABLE: &'static str = TASKS;
    const SK: &'static str = SK_STATUS;
    fn pk(&self) -> &str {
        &self.task_id
    }
    fn outbox(&self) -> &[OutboxEvent] {
        &self.outbox
    }
    fn outbox_mut(&mut self) -> &mut Vec<OutboxEvent> {
        &mut self.outbox
    }
    fn index_entries(&self) -> Vec<IndexEntry> {
        TaskRecord::index_entries(self)
    }
    fn stream_delivered(&self) -> bool {
        !self.sweep
    }
    fn hold_for_sweep(&mut self, since: Ts) {
        self.sweep = true;
        self.held_since = Some(self.held_since.map_or(since, |t| t.min(since)));
    }
    fn held_since(&self) -> Option<Ts> {
        self.held_since
    }
    fn clear_held(&mut self) {
        self.held_since = None;
    }
}

/// A bare record for unit tests: one task in a group of its own, no runs, no events.
#[cfg(test)]
impl TaskRecord {
    pub(crate) fn for_test(task_id: &str) -> TaskRecord {
        TaskRecord {
            unknown: Default::default(),
            task_id: task_id.to_string(),
            task_queue_id: "prov/wt".into(),
            scheduler_id: "-".into(),
            project_id: "none".into(),
            task_group_id: task_id.to_string(),
            priority: Priority::Lowest,
            deadline: Ts(100_000),
            expires: Ts(1_000_000),
            retries: 0,
            retries_left: 0,
            runs: vec![],
            routes: vec![],
            tags: serde_json::json!({}),
            outbox: vec![],
            unsatisfied: 0,
            dependents_due: None,
            group_counted: false,
            resolution_held: false,
            sweep: true,
            aged: None,
            held_since: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_are_the_wire_names() {
        for r in [
            ReasonResolved::Completed,
            ReasonResolved::Failed,
            ReasonResolved::DeadlineExceeded,
            ReasonResolved::Canceled,
            ReasonResolved::Superseded,
            ReasonResolved::ClaimExpired,
            ReasonResolved::WorkerShutdown,
            ReasonResolved::MalformedPayload,
            ReasonResolved::ResourceUnavailable,
            ReasonResolved::InternalError,
            ReasonResolved::IntermittentTask,
        ] {
            assert_eq!(serde_json::json!(r), r.as_str());
        }
    }

    #[test]
    fn higher_priority_sorts_first_then_older() {
        let at = |p| PendingRank::Priority(p);
        let a = pending_entry("p/w", at(Priority::High), Ts(2000), "t1", 0);
        let b = pending_entry("p/w", at(Priority::Lowest), Ts(1000), "t2", 0);
        let c = pending_entry("p/w", at(Priority::High), Ts(1000), "t3", 0);
        let mut v = [a.sk.clone(), b.sk.clone(), c.sk.clone()];
        v.sort();
        assert_eq!(v, [c.sk, a.sk, b.sk]);
    }

    #[test]
    fn aged_runs_sort_before_every_priority_and_among_themselves_oldest_first() {
        let aged_new = pending_entry("p/w", PendingRank::Aged, Ts(9000), "t1", 0);
        let aged_old = pending_entry("p/w", PendingRank::Aged, Ts(1000), "t2", 3);
        let highest = pending_entry(
            "p/w",
            PendingRank::Priority(Priority::Highest),
            Ts(0),
            "t3",
            0,
        );
        let mut v = [highest.sk.clone(), aged_new.sk.clone(), aged_old.sk.clone()];
        v.sort();
        assert_eq!(v, [aged_old.sk, aged_new.sk, highest.sk]);
        let prefixes: Vec<String> = PendingRank::ALL.iter().map(|r| r.prefix()).collect();
        let mut sorted = prefixes.clone();
        sorted.sort();
        assert_eq!(prefixes, sorted, "PendingRank::ALL is in claim order");
    }

    #[test]
    fn due_bound_includes_a_claim_due_now() {
        let e = claims_entry(Ts(5000), "abc");
        assert!(e.sk <= crate::store::shard::due_upto(Ts(5000)));
        assert!(e.sk > crate::store::shard::due_upto(Ts(4999)));
    }
}
