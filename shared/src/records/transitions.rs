//! The task state machine. Every transition is a pure function of the record and `now`; it
//! appends the events it causes to the record's outbox, so that the state change and its
//! events are stored in one conditional write.

use super::outbox::{OutboxEvent, Payload};
use super::task::{
    ClaimOutcome, Priority, ReasonCreated, ReasonResolved, Run, RunState, Status, TaskRecord,
    MAX_RUNS,
};
use crate::error::{ApiError, ApiResult};
use crate::ids::new_slugid;
use crate::routing::{route_ccs, task_routing_key, Exchange, TaskKey};
use crate::time::Ts;
use serde_json::{json, Map, Value};

/// The body of a task's message: its status, the run and worker it concerns, and what the
/// exchange adds (`task.tags`, a resolution's details), serialized straight to text.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskMessage<'a> {
    version: u32,
    status: Status<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_group: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_id: Option<&'a str>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl TaskRecord {
    /// After a change: a task that is now resolved has dependents to look at.
    fn note_if_resolved(&mut self, now: Ts) {
        if !self.is_unresolved() {
            self.dependents_due = Some(now);
        }
    }

    /// One requirement was met. When none remain and the task is still unscheduled (and
    /// within its deadline), its first run becomes pending. True if it did.
    pub fn requirement_satisfied(&mut self, now: Ts) -> bool {
        self.unsatisfied = self.unsatisfied.saturating_sub(1);
        if self.unsatisfied > 0 || !self.runs.is_empty() || self.deadline_passed(now) {
            return false;
        }
        let run = self.push_run(RunState::Pending, ReasonCreated::Scheduled, now);
        self.emit_pending(&run);
        true
    }

    /// Sets the priority (the pending index entry follows it); no event, no checks. True if
    /// it changed.
    pub fn set_priority(&mut self, new: Priority) -> bool {
        let changed = self.priority != new;
        self.priority = new;
        changed
    }

    /// Appends a task-group event (no CCs) to this task's outbox, which carries it to the
    /// publisher like any other event of the task.
    pub(crate) fn emit_group_event(&mut self, exchange: Exchange, payload: Map<String, Value>) {
        let word = |k: &str, or: &str| {
            payload
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or(or)
                .to_string()
        };
        let routing_key = crate::routing::task_group_routing_key(
            &word("taskGroupId", &self.task_group_id),
            &word("schedulerId", &self.scheduler_id),
        );
        let mut body = Map::new();
        body.insert("version".into(), json!(1));
        body.extend(payload);
        self.outbox.push(OutboxEvent {
            unknown: Default::default(),
            id: new_slugid(),
            exchange: exchange.name().to_string(),
            routing_key,
            cc: vec![],
            payload: Payload::of(&body),
            run_id: None,
            fresh: true,
        });
    }

    /// Appends an event for this task, rendered from the current status.
    pub(crate) fn emit(
        &mut self,
        exchange: Exchange,
        run: Option<&Run>,
        with_worker: bool,
        extra: Map<String, Value>,
    ) {
        let (p, w) = self.provisioner_and_worker_type();
        let worker_group = run
            .filter(|_| with_worker)
            .and_then(|r| r.worker_group.clone());
        let worker_id = run
            .filter(|_| with_worker)
            .and_then(|r| r.worker_id.clone());
        let routing_key = task_routing_key(&TaskKey {
            task_id: &self.task_id,
            run_id: run.map(|r| r.run_id),
            worker_group: worker_group.as_deref(),
            worker_id: worker_id.as_deref(),
            provisioner_id: p,
            worker_type: w,
            scheduler_id: &self.scheduler_id,
            task_group_id: &self.task_group_id,
        });
        let worker = worker_group.as_deref().zip(worker_id.as_deref());
        let payload = Payload::of(&TaskMessage {
            version: 1,
            status: Status(self),
            run_id: run.map(|r| r.run_id),
            worker_group: worker.map(|(g, _)| g),
            worker_id: worker.map(|(_, i)| i),
            extra: &extra,
        });
        let event = OutboxEvent {
            unknown: Default::default(),
            id: new_slugid(),
            exchange: exchange.name().to_string(),
            routing_key,
            cc: route_ccs(&self.routes),
            payload,
            run_id: run.map(|r| r.run_id),
            fresh: true,
        };
        self.outbox.push(event);
    }

    pub(crate) fn tags_extra(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("task".into(), json!({ "tags": self.tags }));
        m
    }

    /// `task-defined`, and `task-pending` if run 0 is pending (createTask, also on repeats).
    pub fn emit_created(&mut self) {
        let tags = self.tags_extra();
        self.emit(Exchange::TaskDefined, None, false, tags);
        if let Some(r) = self
            .runs
            .first()
            .filter(|r| r.state == RunState::Pending && self.runs.len() == 1)
            .cloned()
        {
            self.emit_pending(&r);
        }
    }

    fn emit_pending(&mut self, run: &Run) {
        let tags = self.tags_extra();
        self.emit(Exchange::TaskPending, Some(run), false, tags);
    }

    fn emit_exception(&mut self, run: &Run, with_worker: bool) {
        let tags = self.tags_extra();
        self.emit(Exchange::TaskException, Some(run), with_worker, tags);
    }

    fn deadline_passed(&self, now: Ts) -> bool {
        self.deadline <= now
    }

    fn ensure_before_deadline(&self, now: Ts) -> ApiResult<()> {
        if self.deadline_passed(now) {
            return Err(ApiError::conflict(format!(
                "Task {} can't be changed: its deadline {} has passed",
                self.task_id, self.deadline
            )));
        }
        Ok(())
    }

    fn push_run(&mut self, state: RunState, reason: ReasonCreated, now: Ts) -> Run {
        let run = Run::new(self.runs.len() as u32, state, reason, now);
        self.runs.push(run.clone());
        run
    }

    /// Adds run 0 as pending (creation without unmet dependencies).
    pub fn start_first_run(&mut self, now: Ts) {
        if self.runs.is_empty() {
            self.push_run(RunState::Pending, ReasonCreated::Scheduled, now);
        }
    }

    /// scheduleTask: an unscheduled task gets its first pending run; anything else is a no-op.
    pub fn schedule(&mut self, now: Ts) -> ApiResult<bool> {
        self.ensure_before_deadline(now)?;
        if !self.runs.is_empty() {
            return Ok(false);
        }
        let run = self.push_run(RunState::Pending, ReasonCreated::Scheduled, now);
        self.emit_pending(&run);
        Ok(true)
    }

    /// rerunTask: a new pending run unless one is pending or running.
    pub fn rerun(&mut self, now: Ts) -> ApiResult<bool> {
        self.ensure_before_deadline(now)?;
        if !self.is_unresolved() || self.runs.is_empty() {
            if self.runs.len() >= MAX_RUNS {
                return Err(ApiError::conflict(format!(
                    "Task {} already has {MAX_RUNS} runs, the most a task may have",
                    self.task_id
                )));
            }
            let run = self.push_run(RunState::Pending, ReasonCreated::Rerun, now);
            self.retries_left = self.retries.min((MAX_RUNS - self.runs.len()) as u32);
            self.emit_pending(&run);
            return Ok(true);
        }
        Ok(false)
    }

    /// Resolves the last run as exception with `reason` (or adds an exception run if there
    /// is none). Used by cancelTask and the deadline reaper. Returns true if anything changed.
    fn resolve_unresolved_as(
        &mut self,
        reason: ReasonResolved,
        now: Ts,
        with_worker: bool,
    ) -> bool {
        if !self.is_unresolved() {
            return false;
        }
        if self.runs.is_empty() {
            let mut run = Run::new(0, RunState::Exception, ReasonCreated::Exception, now);
            run.reason_resolved = Some(reason);
            run.resolved = Some(now);
            self.runs.push(run);
        } else if let Some(run) = self.runs.last_mut() {
            run.state = RunState::Exception;
            run.reason_resolved = Some(reason);
            run.resolved = Some(now);
        }
        let run = self.runs.last().cloned();
        if let Some(run) = run {
            self.emit_exception(&run, with_worker);
        }
        self.note_if_resolved(now);
        true
    }

    /// cancelTask: idempotent; re-sends `task-exception` when the task was already canceled.
    pub fn cancel(&mut self, now: Ts) -> ApiResult<bool> {
        self.ensure_before_deadline(now)?;
        if self.resolve_unresolved_as(ReasonResolved::Canceled, now, true) {
            return Ok(true);
        }
        if let Some(run) = self
            .runs
            .last()
            .filter(|r| r.reason_resolved == Some(ReasonResolved::Canceled))
            .cloned()
        {
            self.emit_exception(&run, true);
        }
        Ok(false)
    }

    /// Deadline reaper: resolves an unresolved task whose deadline passed.
    pub fn deadline_exceeded(&mut self, now: Ts) -> bool {
        self.deadline_passed(now)
            && self.resolve_unresolved_as(ReasonResolved::DeadlineExceeded, now, false)
    }

    fn run_mut(&mut self, run_id: u32) -> ApiResult<&mut Run> {
        let task_id = self.task_id.clone();
        self.runs.get_mut(run_id as usize).ok_or_else(|| {
            ApiError::not_found(format!("Run {run_id} of task {task_id} does not exist"))
        })
    }

    /// Claims `run_id` for a worker until `taken_until`.
    pub fn claim(
        &mut self,
        run_id: u32,
        worker_group: &str,
        worker_id: &str,
        now: Ts,
        taken_until: Ts,
    ) -> ApiResult<ClaimOutcome> {
        self.ensure_before_deadline(now)?;
        let latest = self.runs.len().checked_sub(1).map(|l| l as u32);
        let task_id = self.task_id.clone();
        let run = self.run_mut(run_id)?;
        if run.state == RunState::Running
            && run.worker_group.as_deref() == Some(worker_group)
            && run.worker_id.as_deref() == Some(worker_id)
        {
            return Ok(ClaimOutcome::AlreadyMine);
        }
        if Some(run_id) != latest || run.state != RunState::Pending {
            return Err(ApiError::conflict(format!(
                "Run {run_id} of task {task_id} is {} and can't be claimed",
                run.state.as_str()
            )));
        }
        run.state = RunState::Running;
        run.worker_group = Some(worker_group.to_string());
        run.worker_id = Some(worker_id.to_string());
        run.started = Some(now);
        run.taken_until = Some(taken_until);
        let run = run.clone();
        let mut extra = self.tags_extra();
        extra.insert("takenUntil".into(), json!(taken_until));
        self.emit(Exchange::TaskRunning, Some(&run), true, extra);
        Ok(ClaimOutcome::Claimed)
    }

    /// reclaimTask: extends the claim of the latest, running run.
    pub fn reclaim(&mut self, run_id: u32, now: Ts, taken_until: Ts) -> ApiResult<()> {
        self.ensure_before_deadline(now)?;
        let latest = self.runs.len().checked_sub(1).map(|l| l as u32);
        let task_id = self.task_id.clone();
        let run = self.run_mut(run_id)?;
        if Some(run_id) != latest || run.state != RunState::Running {
            return Err(ApiError::conflict(format!(
                "Run {run_id} of task {task_id} is not the latest running run; it can't be reclaimed"
            )));
        }
        run.taken_until = Some(taken_until);
        Ok(())
    }

    /// reportCompleted / reportFailed / reportException. Repeating the same resolution is
    /// idempotent and re-sends its events.
    pub fn resolve(&mut self, run_id: u32, outcome: ReasonResolved, now: Ts) -> ApiResult<bool> {
        let state = match outcome {
            ReasonResolved::Completed => RunState::Completed,
            ReasonResolved::Failed => RunState::Failed,
            _ => RunState::Exception,
        };
        let task_id = self.task_id.clone();
        let latest = self.runs.len().checked_sub(1).map(|l| l as u32);
        let run = self.run_mut(run_id)?;
        if run.state == state && run.reason_resolved == Some(outcome) {
            let run = run.clone();
            self.emit_resolution(&run, None);
            if let Some(next) = self.runs.get(run_id as usize + 1).cloned() {
                if matches!(
                    next.reason_created,
                    ReasonCreated::Retry | ReasonCreated::TaskRetry
                ) && state == RunState::Exception
                {
                    self.emit_pending(&next);
                }
            }
            return Ok(false);
        }
        if run.state != RunState::Running || Some(run_id) != latest {
            return Err(ApiError::conflict(format!(
                "Run {run_id} of task {task_id} is {} and can't be resolved as {}",
                run.state.as_str(),
                state.as_str()
            )));
        }
        run.state = state;
        run.reason_resolved = Some(outcome);
        run.resolved = Some(now);
        let run = run.clone();
        let retry = self.retry_if_allowed(outcome, now);
        self.emit_resolution(&run, retry.as_ref());
        self.note_if_resolved(now);
        Ok(true)
    }

    /// worker-manager said worker `(worker_group, worker_id)` stopped or was removed: run
    /// `run_id` is resolved `exception`/`worker-shutdown` (retried as reportException
    /// retries) if it is still the task's latest run and running under that worker. Otherwise
    /// nothing changes and nothing is sent again (a run the worker resolved, or another
    /// worker's, is left alone). True if it resolved the run.
    pub fn resolve_gone_worker(
        &mut self,
        run_id: u32,
        worker_group: &str,
        worker_id: &str,
        now: Ts,
    ) -> ApiResult<bool> {
        let held = self.runs.last().is_some_and(|r| {
            r.run_id == run_id
                && r.state == RunState::Running
                && r.worker_group.as_deref() == Some(worker_group)
                && r.worker_id.as_deref() == Some(worker_id)
        });
        if !held {
            return Ok(false);
        }
        self.resolve(run_id, ReasonResolved::WorkerShutdown, now)
    }

    fn retry_if_allowed(&mut self, reason: ReasonResolved, now: Ts) -> Option<Run> {
        let reason_created = reason.retry_reason()?;
        if self.retries_left == 0 || self.runs.len() >= MAX_RUNS {
            return None;
        }
        self.retries_left -= 1;
        Some(self.push_run(RunState::Pending, reason_created, now))
    }

    fn emit_resolution(&mut self, run: &Run, retry: Option<&Run>) {
        let exchange = match run.state {
            RunState::Completed => Exchange::TaskCompleted,
            RunState::Failed => Exchange::TaskFailed,
            _ => Exchange::TaskException,
        };
        let tags = self.tags_extra();
        self.emit(exchange, Some(run), true, tags);
        if let Some(next) = retry {
            self.emit_pending(next);
        }
    }

    /// Claim reaper: expires the claim on `run_id` if `takenUntil` is still `taken_until`
    /// and has passed. Whichever came first decides, however late the reaper comes: a
    /// deadline at or before `takenUntil` wins (the deadline reaper handles it); a claim that
    /// ran out before the deadline ends `claim-expired`, and a deadline passed since then
    /// resolves its retry in the same change.
    pub fn expire_claim(&mut self, run_id: u32, taken_until: Ts, now: Ts) -> bool {
        if self.deadline_passed(taken_until) || self.runs.len() != run_id as usize + 1 {
            return false;
        }
        let Some(run) = self.runs.last_mut() else {
            return false;
        };
        if run.state != RunState::Running
            || run.taken_until != Some(taken_until)
            || taken_until > now
        {
            return false;
        }
        run.state = RunState::Exception;
        run.reason_resolved = Some(ReasonResolved::ClaimExpired);
        run.resolved = Some(now);
        let run = run.clone();
        let retry = self.retry_if_allowed(ReasonResolved::ClaimExpired, now);
        self.emit_resolution(&run, retry.as_ref());
        self.note_if_resolved(now);
        self.deadline_exceeded(now);
        true
    }

    /// Records what time alone decided by `now`, in the order it happened, exactly as the
    /// reapers would: a `takenUntil` passed before the deadline expires the latest run's
    /// claim (`claim-expired`, retried while retries remain), and a passed deadline resolves
    /// the task (`deadline-exceeded`). Workers' calls apply it first, so they answer as if
    /// the reapers had already run, however late those come. True if anything changed.
    pub fn settle(&mut self, now: Ts) -> bool {
        let expired = match self.runs.last().map(|r| (r.run_id, r.state, r.taken_until)) {
            Some((run_id, RunState::Running, Some(until))) if until <= now => {
                self.expire_claim(run_id, until, now)
            }
            _ => false,
        };
        self.deadline_exceeded(now) || expired
    }

    /// changeTaskPriority.
    pub fn change_priority(&mut self, new: Priority, now: Ts) -> ApiResult<()> {
        self.ensure_before_deadline(now)?;
        if !self.is_unresolved() {
            return Err(ApiError::conflict(format!(
                "Task {} is resolved; its priority can't change",
                self.task_id
            )));
        }
        if self.priority == new {
            return Err(ApiError::conflict(format!(
                "Task {} already has priority {}",
                self.task_id,
                new.as_str()
            )));
        }
        let old = self.priority;
        self.set_priority(new);
        let mut extra = Map::new();
        extra.insert("oldPriority".into(), json!(old.as_str()));
        extra.insert("newPriority".into(), json!(new.as_str()));
        // The message carries no run fields, so its routing key has none either.
        self.emit(Exchange::TaskPriorityChanged, None, false, extra);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::task::index;

    fn record(retries: u32) -> TaskRecord {
        TaskRecord {
            task_group_id: "G".into(),
            retries,
            retries_left: retries,
            routes: vec!["r1".into()],
            ..TaskRecord::for_test("T")
        }
    }

    fn exchanges(r: &TaskRecord) -> Vec<&str> {
        r.outbox.iter().map(|e| e.exchange.as_str()).collect()
    }

    #[test]
    fn worker_shutdown_retries_while_retries_remain() {
        let mut r = record(1);
        r.start_first_run(Ts(0));
        r.claim(0, "g", "w", Ts(1), Ts(1000)).unwrap();
        r.outbox.clear();
        r.resolve(0, ReasonResolved::WorkerShutdown, Ts(2)).unwrap();
        assert_eq!(r.runs.len(), 2);
        assert_eq!(r.runs[1].reason_created, ReasonCreated::Retry);
        assert_eq!(r.retries_left, 0);
        assert_eq!(exchanges(&r), ["task-exception", "task-pending"]);
        r.claim(1, "g", "w", Ts(3), Ts(1000)).unwrap();
        r.resolve(1, ReasonResolved::WorkerShutdown, Ts(4)).unwrap();
        assert_eq!(r.runs.len(), 2, "no retries left");
        assert_eq!(r.state(), "exception");
    }

    #[test]
    fn intermittent_task_retries_as_task_retry_and_others_never_retry() {
        let mut r = record(5);
        r.start_first_run(Ts(0));
        r.claim(0, "g", "w", Ts(1), Ts(1000)).unwrap();
        r.resolve(0, ReasonResolved::IntermittentTask, Ts(2))
            .unwrap();
        assert_eq!(r.runs[1].reason_created, ReasonCreated::TaskRetry);
        for reason in [
            ReasonResolved::MalformedPayload,
            ReasonResolved::ResourceUnavailable,
            ReasonResolved::InternalError,
        ] {
            let mut r = record(5);
            r.start_first_run(Ts(0));
            r.claim(0, "g", "w", Ts(1), Ts(1000)).unwrap();
            r.resolve(0, reason, Ts(2)).unwrap();
            assert_eq!(r.runs.len(), 1);
        }
    }

    #[test]
    fn repeating_a_resolution_is_idempotent_but_another_is_a_conflict() {
        let mut r = record(0);
        r.start_first_run(Ts(0));
        r.claim(0, "g", "w", Ts(1), Ts(1000)).unwrap();
        assert!(r
            .resolve(0, ReasonResolved::MalformedPayload, Ts(2))
            .unwrap());
        assert!(!r
            .resolve(0, ReasonResolved::MalformedPayload, Ts(3))
            .unwrap());
        assert_eq!(
            r.resolve(0, ReasonResolved::InternalError, Ts(3))
                .unwrap_err()
                .status(),
            409
        );
        assert_eq!(
            r.resolve(0, ReasonResolved::Completed, Ts(3))
                .unwrap_err()
                .status(),
            409
        );
    }

    #[test]
    fn claim_expiry_matches_the_exact_taken_until() {
        let mut r = record(1);
        r.start_first_run(Ts(0));
        r.claim(0, "g", "w", Ts(1), Ts(10)).unwrap();
        r.reclaim(0, Ts(5), Ts(20)).unwrap();
        assert!(
            !r.expire_claim(0, Ts(10), Ts(30)),
            "a reclaimed run keeps its claim"
        );
        assert!(r.expire_claim(0, Ts(20), Ts(30)));
        assert_eq!(
            r.runs[0].reason_resolved,
            Some(ReasonResolved::ClaimExpired)
        );
        assert_eq!(r.runs[1].state, RunState::Pending);
    }

    #[test]
    fn deadline_resolves_an_unscheduled_task_with_an_exception_run() {
        let mut r = record(1);
        assert!(!r.deadline_exceeded(Ts(99_999)));
        assert!(r.deadline_exceeded(Ts(100_000)));
        assert_eq!(r.runs[0].reason_created, ReasonCreated::Exception);
        assert_eq!(
            r.runs[0].reason_resolved,
            Some(ReasonResolved::DeadlineExceeded)
        );
        assert!(!r.deadline_exceeded(Ts(200_000)), "only once");
    }

    #[test]
    fn after_the_deadline_everything_is_a_conflict() {
        let mut r = record(1);
        r.start_first_run(Ts(0));
        let late = Ts(100_000);
        assert_eq!(r.claim(0, "g", "w", late, late).unwrap_err().status(), 409);
        assert_eq!(r.schedule(late).unwrap_err().status(), 409);
        assert_eq!(r.rerun(late).unwrap_err().status(), 409);
        assert_eq!(r.cancel(late).unwrap_err().status(), 409);
        assert_eq!(
            r.change_priority(Priority::High, late)
                .unwrap_err()
                .status(),
            409
        );
    }

    #[test]
    fn rerun_caps_at_fifty_runs() {
        let mut r = record(0);
        r.start_first_run(Ts(0));
        for i in 0..49u32 {
            r.claim(i, "g", "w", Ts(1), Ts(10)).unwrap();
            r.resolve(i, ReasonResolved::Failed, Ts(2)).unwrap();
            assert!(r.rerun(Ts(3)).unwrap());
        }
        assert_eq!(r.runs.len(), 50);
        r.claim(49, "g", "w", Ts(1), Ts(10)).unwrap();
        r.resolve(49, ReasonResolved::Failed, Ts(2)).unwrap();
        assert_eq!(r.rerun(Ts(3)).unwrap_err().status(), 409);
    }

    #[test]
    fn index_entries_follow_the_state() {
        let mut r = record(0);
        let names = |r: &TaskRecord| {
            r.index_entries()
                .iter()
                .map(|e| e.index)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&r), [index::DEADLINE]);
        r.start_first_run(Ts(0));
        assert_eq!(names(&r), [index::PENDING, index::DEADLINE]);
        r.claim(0, "g", "w", Ts(1), Ts(10)).unwrap();
        assert_eq!(
            names(&r),
            [
                index::CLAIMED,
                index::CLAIMS,
                index::DEADLINE,
                index::OUTBOX
            ]
        );
        r.outbox.clear();
        r.resolve(0, ReasonResolved::Completed, Ts(2)).unwrap();
        r.outbox.clear();
        assert_eq!(names(&r), [index::RESOLVED], "dependents to look at");
        r.dependents_due = None;
        assert!(names(&r).is_empty());
    }

    #[test]
    fn the_first_run_starts_when_the_last_requirement_is_met() {
        let mut r = record(0);
        r.unsatisfied = 2;
        assert!(!r.requirement_satisfied(Ts(1)));
        assert!(r.runs.is_empty());
        assert!(r.requirement_satisfied(Ts(2)));
        assert_eq!(r.state(), "pending");
        assert_eq!(exchanges(&r), ["task-pending"]);
        assert!(!r.requirement_satisfied(Ts(3)), "only once");
        assert_eq!(r.runs.len(), 1);
    }

    #[test]
    fn requirements_met_after_the_deadline_start_nothing() {
        let mut r = record(0);
        r.unsatisfied = 1;
        assert!(!r.requirement_satisfied(Ts(100_000)));
        assert!(r.runs.is_empty());
    }

    #[test]
    fn a_claim_or_a_deadline_settles_by_whichever_passed_first_however_late() {
        // The claim ran out (10) before the deadline (100_000); settled long after both.
        let mut r = record(1);
        r.start_first_run(Ts(0));
        r.claim(0, "g", "w", Ts(1), Ts(10)).unwrap();
        assert!(r.clone().expire_claim(0, Ts(10), Ts(200_000)));
        assert!(r.settle(Ts(200_000)));
        let reasons: Vec<_> = r.runs.iter().map(|r| r.reason_resolved).collect();
        assert_eq!(
            reasons,
            [
                Some(ReasonResolved::ClaimExpired),
                Some(ReasonResolved::DeadlineExceeded)
            ]
        );
        assert_eq!(
            exchanges(&r),
            [
                "task-running",
                "task-exception",
                "task-pending",
                "task-exception"
            ]
        );
        assert!(!r.settle(Ts(300_000)), "only once");
        // The deadline came first: the claim never expires, the deadline resolves its run.
        let mut d = record(1);
        d.start_first_run(Ts(0));
        d.claim(0, "g", "w", Ts(1), Ts(100_000)).unwrap();
        assert!(!d.clone().expire_claim(0, Ts(100_000), Ts(200_000)));
        assert!(d.settle(Ts(200_000)));
        assert_eq!(d.runs.len(), 1);
        assert_eq!(
            d.runs[0].reason_resolved,
            Some(ReasonResolved::DeadlineExceeded)
        );
    }

    #[test]
    fn every_final_resolution_marks_dependents_due_but_a_retry_does_not() {
        let mut r = record(1);
        r.start_first_run(Ts(0));
        r.claim(0, "g", "w", Ts(1), Ts(10)).unwrap();
        assert!(r.expire_claim(0, Ts(10), Ts(11)));
        assert_eq!(r.dependents_due, None, "retried, still unresolved");
        r.claim(1, "g", "w", Ts(12), Ts(20)).unwrap();
        r.resolve(1, ReasonResolved::Failed, Ts(13)).unwrap();
        assert_eq!(r.dependents_due, Some(Ts(13)));
        let mut c = record(0);
        c.cancel(Ts(5)).unwrap();
        assert_eq!(c.dependents_due, Some(Ts(5)));
        let mut d = record(0);
        assert!(d.deadline_exceeded(Ts(100_000)));
        assert_eq!(d.dependents_due, Some(Ts(100_000)));
    }
}
