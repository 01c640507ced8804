//! The queue's operations over the ports. Each takes `now` from its caller; handlers stay thin.

use crate::creds::{self, IssuerCredentials};
use crate::error::{ApiError, ApiResult};
use crate::ids::{TaskId, TaskQueueId};
use crate::keys::{self, index, SHARDS};
use crate::model::{ClaimOutcome, Priority, ReasonResolved, Run, RunState, TaskRecord};
use crate::signal::WorkSignal;
use crate::store::{Cond, Cursor, Item, SkRange, Store, StoreError, WriteOp};
use crate::time::{Ts, DAY, MINUTE};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Tunables of the queue, with upstream's defaults.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// How long a claim lasts (upstream `claimTimeout`, 1200 s).
    pub claim_timeout_ms: i64,
    /// How long claimWork waits for work (20 s).
    pub claim_work_timeout_ms: i64,
    /// How often a waiting claimWork re-reads the index even without a signal (a safety net
    /// for signals from other processes; in-process signals wake it at once).
    pub claim_work_recheck_ms: i64,
    /// Longest allowed deadline, in days (5).
    pub max_task_deadline_days: i64,
    /// How long a task group outlives its longest-lived task.
    pub group_expiry_extension_ms: i64,
    /// Exchange name prefix.
    pub exchange_prefix: String,
    /// Exchange name prefix of the task-graph scheduler's events, which the same publisher
    /// delivers.
    pub scheduler_exchange_prefix: String,
    /// True where the tasks table's stream triggers the publisher and the dependency resolver
    /// on every write (AWS): new task records then store only each write's own events and
    /// leave out the `outbox` and `resolved` index entries (see [`TaskRecord::sweep`]); a
    /// stream function that cannot finish adds them back for the scheduled passes.
    pub events_from_stream: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            claim_timeout_ms: 1200 * 1000,
            claim_work_timeout_ms: 20 * 1000,
            claim_work_recheck_ms: 5 * 1000,
            max_task_deadline_days: 5,
            group_expiry_extension_ms: GROUP_EXPIRY_EXTENSION_MS,
            exchange_prefix: crate::routing::DEFAULT_EXCHANGE_PREFIX.to_string(),
            scheduler_exchange_prefix: crate::routing::SCHEDULER_EXCHANGE_PREFIX.to_string(),
            events_from_stream: false,
        }
    }
}

/// Clock skew allowed on `created`, and on the deadline limit.
const DRIFT_MS: i64 = 15 * MINUTE;
/// Default for [`QueueConfig::group_expiry_extension_ms`]: an hour, as upstream.
pub const GROUP_EXPIRY_EXTENSION_MS: i64 = 60 * MINUTE;
/// Optimistic-concurrency attempts before giving up with 409.
pub(crate) const MAX_ATTEMPTS: usize = 25;
/// Page size limit of every list endpoint.
pub const MAX_PAGE: usize = 1000;

/// The queue service.
pub struct Queue {
    /// Storage.
    pub store: Arc<dyn Store>,
    /// Wakes waiting claimWork calls.
    pub signal: Arc<dyn WorkSignal>,
    /// Issues workers' temporary credentials.
    pub issuer: IssuerCredentials,
    /// Tunables.
    pub cfg: QueueConfig,
    /// Notified whenever new events sit in an outbox, so a publisher can drain promptly.
    pub events_waiting: Arc<Notify>,
    /// Notified whenever a resolved task awaits the dependency worker.
    pub dependents_waiting: Arc<Notify>,
    /// Tasks written with events since the publisher last looked (a hint, not the record:
    /// the outbox index is, so nothing is lost if this process dies).
    dirty: std::sync::Mutex<std::collections::HashMap<String, (TaskRecord, u64)>>,
    /// Events this process published recently: a record written while its earlier events
    /// were still being removed carries them again, and they must not go out twice.
    pub published: crate::events::RecentIds,
    /// Set when this process wrote a task graph's event (the scheduler's), so that the
    /// publisher looks at the graphs' outboxes at once rather than at its next sweep.
    pub graph_events: std::sync::atomic::AtomicBool,
    /// Task definitions never change after creation, so each process keeps the ones it read.
    defs: std::sync::Mutex<std::collections::HashMap<String, Value>>,
}

/// Publisher hints kept before further ones are dropped.
const DIRTY_MAX: usize = 10_000;

/// Definitions kept in memory before the cache starts over.
const DEF_CACHE_MAX: usize = 10_000;

fn internal(e: StoreError) -> ApiError {
    match e {
        StoreError::ItemTooLarge(n) => ApiError::new(
            crate::error::ErrorCode::InputTooLarge,
            format!("The task is too large to store ({n} bytes; items are limited to 400 KB)"),
        ),
        other => ApiError::internal(other),
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> ApiResult<T> {
    serde_json::from_value(v).map_err(ApiError::internal)
}

/// A page request: `limit` (capped at 1000) and an opaque token.
#[derive(Debug, Clone, Default)]
pub struct PageReq {
    /// Maximum items.
    pub limit: usize,
    /// Where to continue.
    pub token: Option<String>,
}

/// Encodes a store cursor as an opaque continuation token.
pub fn encode_token(c: &Cursor) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([c.0, c.1, c.2]).to_string())
}

/// Decodes a continuation token; a bad one is `400 InvalidRequestArguments`.
pub fn decode_token(t: &str) -> ApiResult<Cursor> {
    use base64::Engine;
    let bad = || ApiError::bad_argument("continuationToken is not valid");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .map_err(|_| bad())?;
    let v: Vec<String> = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    match <[String; 3]>::try_from(v) {
        Ok([a, b, c]) => Ok((a, b, c)),
        Err(_) => Err(bad()),
    }
}

/// A claim handed to a worker.
pub struct Claim {
    /// The status after the claim.
    pub record: TaskRecord,
    /// The claimed run, as it stands after the claim.
    pub run: Run,
    /// The task definition.
    pub task: Value,
    /// Temporary credentials for the run.
    pub credentials: creds::TempCredentials,
}

/// What one claim pass did.
pub struct ClaimPass {
    /// The runs claimed.
    pub claims: Vec<Claim>,
    /// Claimable candidates lost to concurrent claimers.
    pub lost: usize,
}

impl Claim {
    /// The claim-work/claim-task response item.
    pub fn to_json(&self) -> Value {
        let run = &self.run;
        json!({
            "status": self.record.status_json(),
            "runId": run.run_id,
            "workerGroup": run.worker_group,
            "workerId": run.worker_id,
            "takenUntil": run.taken_until,
            "task": self.task,
            "credentials": self.credentials.to_json(),
        })
    }
}

impl Queue {
    /// A queue over the given ports.
    pub fn new(
        store: Arc<dyn Store>,
        signal: Arc<dyn WorkSignal>,
        issuer: IssuerCredentials,
        cfg: QueueConfig,
    ) -> Self {
        Queue {
            store,
            signal,
            issuer,
            cfg,
            events_waiting: Arc::new(Notify::new()),
            dependents_waiting: Arc::new(Notify::new()),
            dirty: Default::default(),
            published: Default::default(),
            graph_events: Default::default(),
            defs: Default::default(),
        }
    }

    /// A task's status record and version, read strongly.
    pub(crate) async fn load(&self, task_id: &str) -> ApiResult<Option<(TaskRecord, u64)>> {
        self.load_with(task_id, true).await
    }

    /// A task's status record, strongly or eventually consistent. An eventual read may be an
    /// older version or miss a task created moments ago: only a write conditioned on the
    /// version read may rest on it.
    async fn load_with(
        &self,
        task_id: &str,
        consistent: bool,
    ) -> ApiResult<Option<(TaskRecord, u64)>> {
        let item = self
            .store
            .get_as(keys::TASKS, task_id, keys::SK_STATUS, consistent)
            .await;
        match item.map_err(internal)? {
            Some(item) => Ok(Some((decode(item.data)?, item.version))),
            None => Ok(None),
        }
    }

    pub(crate) async fn load_def(&self, task_id: &str) -> ApiResult<Option<Value>> {
        if let Some(def) = self.defs.lock().ok().and_then(|c| c.get(task_id).cloned()) {
            return Ok(Some(def));
        }
        // Definitions never change, so an eventually consistent read is current whenever it
        // finds one; only a task created moments ago may need the strong read.
        let def = match self
            .store
            .get_eventual(keys::TASKS, task_id, keys::SK_DEF)
            .await
            .map_err(internal)?
        {
            Some(i) => Some(i.data),
            None => self
                .store
                .get(keys::TASKS, task_id, keys::SK_DEF)
                .await
                .map_err(internal)?
                .map(|i| i.data),
        };
        if let (Some(d), Ok(mut cache)) = (&def, self.defs.lock()) {
            if cache.len() >= DEF_CACHE_MAX {
                cache.clear();
            }
            cache.insert(task_id.to_string(), d.clone());
        }
        Ok(def)
    }

    /// Drops a definition from the cache (its task expired).
    pub(crate) fn forget_def(&self, task_id: &str) {
        if let Ok(mut cache) = self.defs.lock() {
            cache.remove(task_id);
        }
    }

    pub(crate) fn status_item(rec: &TaskRecord) -> ApiResult<Item> {
        let data = rec.stored_json().map_err(ApiError::internal)?;
        Ok(Item::new(
            rec.task_id.clone(),
            keys::SK_STATUS,
            data,
            rec.index_entries(),
        ))
    }

    /// After a successful write (the stored record is now `rec` at `version`): wake claimers
    /// and the publisher as needed.
    pub(crate) fn after_write(&self, rec: &TaskRecord, version: u64) {
        if rec
            .runs
            .last()
            .is_some_and(|r| r.state == RunState::Pending)
        {
            self.signal.notify(&rec.task_queue_id);
        }
        if rec.dependents_due.is_some() {
            self.dependents_waiting.notify_one();
        }
        if !rec.outbox.is_empty() {
            // Hints only: where nothing drains them (a Lambda without a publisher loop) they
            // must not pile up; the outbox index sweep delivers whatever is dropped here.
            if let Ok(mut d) = self.dirty.lock() {
                let newer = d.get(&rec.task_id).is_none_or(|(_, v)| *v < version);
                if newer && (d.len() < DIRTY_MAX || d.contains_key(&rec.task_id)) {
                    d.insert(rec.task_id.clone(), (rec.clone(), version));
                }
            }
            self.events_waiting.notify_one();
        }
    }

    /// Writes a status item if its stored version is still `version`, then wakes claimers and
    /// the publisher. The outer error is a failure to build the item; the inner one is the
    /// store's answer (a failed condition means someone else changed the task first).
    pub(crate) async fn save(
        &self,
        rec: &TaskRecord,
        version: u64,
    ) -> ApiResult<Result<(), StoreError>> {
        let op = WriteOp::Put {
            table: keys::TASKS,
            item: Self::status_item(rec)?,
            cond: Cond::Version(version),
        };
        Ok(self.store.write(op).await.map(|v| self.after_write(rec, v)))
    }

    /// Read, apply `f`, write conditionally; retries on concurrent changes. Returns the new
    /// record and `f`'s result. Nothing is written if `f` changed nothing.
    ///
    /// The first read is eventually consistent (half the read units): a write conditioned on
    /// its version only succeeds if it was current. Any other outcome on it (no task, an
    /// error from `f`, nothing to change, a lost condition) is decided again on a strong read,
    /// so nothing is answered from a stale record.
    pub(crate) async fn mutate<T>(
        &self,
        task_id: &str,
        mut f: impl FnMut(&mut TaskRecord) -> ApiResult<T>,
    ) -> ApiResult<(TaskRecord, T)> {
        let mut consistent = false;
        for attempt in 0..MAX_ATTEMPTS {
            let loaded = self.load_with(task_id, consistent).await?;
            let Some((mut rec, version)) = loaded else {
                if !consistent {
                    consistent = true;
                    continue;
                }
                return Err(ApiError::not_found(format!("Task {task_id} not found")));
            };
            let before = rec.clone();
            let result = f(&mut rec);
            if !consistent && (result.is_err() || rec == before) {
                consistent = true;
                continue;
            }
            let out = result?;
            if rec == before {
                return Ok((rec, out));
            }
            // A rerun makes a resolved task unresolved again: its group counts it once more.
            let mut ops = vec![];
            if rec.is_unresolved() && !rec.group_counted {
                rec.group_counted = true;
                ops = self
                    .count_unresolved_ops(&rec.task_group_id, task_id, false)
                    .await?;
            }
            match self.save_with(&rec, version, ops).await? {
                Ok(()) => {
                    return Ok((rec, out));
                }
                Err(e) if e.is_condition_failed() => {
                    if consistent {
                        backoff(attempt).await;
                    }
                    consistent = true;
                }
                Err(e) => return Err(internal(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {task_id} is changing too fast; try again"
        )))
    }

    /// GET /task/<taskId>: the definition (with the current priority). A task past its
    /// `expires` is gone, even before the expiry job deletes it.
    pub async fn task(&self, task_id: &TaskId, now: Ts) -> ApiResult<Value> {
        let def = self.load_def(task_id.as_str()).await?;
        let expired = |d: &Value| d["expires"].as_str().and_then(Ts::parse) <= Some(now);
        let Some(mut def) = def.filter(|d| !expired(d)) else {
            return Err(ApiError::not_found(format!("Task {task_id} not found")));
        };
        if let Some((rec, _)) = self.load(task_id.as_str()).await? {
            def["priority"] = json!(rec.priority.as_str());
        }
        Ok(def)
    }

    /// GET /task/<taskId>/status; a task past its `expires` is gone.
    pub async fn status(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        match self.load(task_id.as_str()).await? {
            Some((rec, _)) if rec.expires > now => Ok(rec),
            _ => Err(ApiError::not_found(format!("Task {task_id} not found"))),
        }
    }

    /// Definitions or statuses of many tasks; unknown ids are skipped. Offset-paged.
    pub async fn many(
        &self,
        task_ids: &[String],
        page: &PageReq,
        statuses: bool,
        now: Ts,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let start = match &page.token {
            Some(t) => decode_token(t)?
                .0
                .parse::<usize>()
                .map_err(|_| ApiError::bad_argument("continuationToken is not valid"))?,
            None => 0,
        };
        let end = (start + page.limit).min(task_ids.len());
        let mut out = Vec::new();
        for id in task_ids.get(start..end).unwrap_or_default() {
            let Ok(tid) = TaskId::parse(id) else { continue };
            if statuses {
                if let Ok(rec) = self.status(&tid, now).await {
                    out.push(json!({ "taskId": id, "status": rec.status_json() }));
                }
            } else if let Ok(def) = self.task(&tid, now).await {
                out.push(json!({ "taskId": id, "task": def }));
            }
        }
        let next = (end < task_ids.len())
            .then(|| encode_token(&(end.to_string(), String::new(), String::new())));
        Ok((out, next))
    }

    /// createTask / defineTask. `body` has been schema-validated with defaults filled.
    /// With `define_only`, the task stays unscheduled until scheduleTask.
    pub async fn create_task(
        &self,
        task_id: &TaskId,
        body: Value,
        define_only: bool,
        now: Ts,
    ) -> ApiResult<TaskRecord> {
        let def = normalize_definition(task_id, body, now, self.cfg.max_task_deadline_days)?;
        let (rec, plan) = self.initial_record(task_id, &def, define_only, now).await?;
        for attempt in 0..MAX_ATTEMPTS {
            // Task group: schedulerId must agree and the group must not be sealed. The first
            // try reads the group eventually consistent: the transaction checks the versions
            // read, and a refusal is only given on a strong read.
            let group_ops = match self.group_ops(&rec, now, attempt > 0).await {
                Err(_) if attempt == 0 => self.group_ops(&rec, now, true).await?,
                ops => ops?,
            };
            let mut fresh = rec.clone();
            fresh.emit_created();
            let expiry = keys::task_expiry_entry(rec.expires, task_id.as_str(), keys::SK_DEF);
            let mut ops = vec![
                WriteOp::Put {
                    table: keys::TASKS,
                    item: Item::new(task_id.as_str(), keys::SK_DEF, def.clone(), vec![expiry]),
                    cond: Cond::NotExists,
                },
                WriteOp::Put {
                    table: keys::TASKS,
                    item: Self::status_item(&fresh)?,
                    cond: Cond::NotExists,
                },
                // Membership, so that listTaskGroup is one strongly consistent query. It
                // cannot exist without the definition (expiry deletes it first), so it is
                // new exactly when the definition is: no read of its current version.
                WriteOp::Put {
                    table: keys::TASK_GROUPS,
                    item: Item::new(
                        rec.task_group_id.as_str(),
                        keys::sk_member(task_id.as_str()),
                        json!({ "expires": rec.expires }),
                        vec![],
                    ),
                    cond: Cond::NotExists,
                },
            ];
            ops.extend(group_ops);
            match self.store.transact(ops).await {
                Ok(()) => {
                    // A created item's first version is 1 (the store port's promise).
                    self.after_write(&fresh, 1);
                    if plan.edges.is_empty() {
                        return Ok(fresh);
                    }
                    self.write_edges(&fresh, &plan, now).await?;
                    // A dependency may have been met meanwhile: show the task as it is now.
                    return self.status(task_id, now).await;
                }
                // The definition exists: an idempotent repeat, or a conflict.
                Err(StoreError::TransactionCancelled { reasons })
                    if reasons.first() == Some(&true) =>
                {
                    if let Some(existing) = self.load_def(task_id.as_str()).await? {
                        let rec = self.repeat_create(task_id, &existing, &def).await?;
                        if plan.edges.is_empty() {
                            return Ok(rec);
                        }
                        // The first attempt may have stopped before its edges were written.
                        self.write_edges(&rec, &plan, now).await?;
                        return self.status(task_id, now).await;
                    }
                }
                // The group changed meanwhile (or the task vanished again): look again.
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(internal(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {task_id} could not be created under contention; try again"
        )))
    }

    /// The same taskId again: equal definitions are idempotent (and re-send the events),
    /// anything else is 409.
    async fn repeat_create(
        &self,
        task_id: &TaskId,
        existing: &Value,
        def: &Value,
    ) -> ApiResult<TaskRecord> {
        if existing != def {
            return Err(ApiError::conflict(format!(
                "Task {task_id} already exists with a different definition"
            )));
        }
        let (rec, ()) = self
            .mutate(task_id.as_str(), |rec| {
                rec.emit_created();
                Ok(())
            })
            .await?;
        Ok(rec)
    }

    async fn initial_record(
        &self,
        task_id: &TaskId,
        def: &Value,
        define_only: bool,
        now: Ts,
    ) -> ApiResult<(TaskRecord, crate::deps::DependencyPlan)> {
        let s = |k: &str| def[k].as_str().unwrap_or_default().to_string();
        let ts = |k: &str| Ts::parse(def[k].as_str().unwrap_or_default()).unwrap_or(now);
        let priority = Priority::parse(def["priority"].as_str().unwrap_or("lowest"))
            .unwrap_or(Priority::Lowest);
        let retries = def["retries"].as_u64().unwrap_or(5) as u32;
        let strings = |k: &str| -> Vec<String> { crate::model::string_list(&def[k]) };
        let mut rec = TaskRecord {
            task_id: task_id.to_string(),
            task_queue_id: s("taskQueueId"),
            scheduler_id: s("schedulerId"),
            project_id: s("projectId"),
            task_group_id: s("taskGroupId"),
            priority,
            deadline: ts("deadline"),
            expires: ts("expires"),
            retries,
            retries_left: retries,
            runs: vec![],
            routes: strings("routes"),
            tags: def["tags"].clone(),
            outbox: vec![],
            unsatisfied: 0,
            dependents_due: None,
            group_counted: true,
            sweep: !self.cfg.events_from_stream,
        };
        let plan = self
            .plan_dependencies(task_id.as_str(), def, rec.deadline, now)
            .await?;
        // defineTask waits for scheduleTask, as a self-dependency does.
        rec.unsatisfied = plan.unsatisfied + u32::from(define_only);
        if rec.unsatisfied == 0 {
            rec.start_first_run(now);
        }
        Ok((rec, plan))
    }

    /// The task-group writes that go into the creating transaction: the group item (created,
    /// its `expires` pushed later, or only checked) and one more unresolved task on its
    /// counter. A group past its `expires` is gone: its id may be taken again, by any
    /// schedulerId.
    async fn group_ops(
        &self,
        rec: &TaskRecord,
        now: Ts,
        consistent: bool,
    ) -> ApiResult<Vec<WriteOp>> {
        let gid = rec.task_group_id.as_str();
        let wanted_expires = rec.expires.plus(self.cfg.group_expiry_extension_ms);
        let group = (self.store).get_as(keys::TASK_GROUPS, gid, keys::SK_GROUP, consistent);
        // Both reads at once: they sit on createTask's critical path.
        let (group, shares) =
            futures_util::future::join(group, self.counter_shares(gid, consistent)).await;
        let group = group.map_err(internal)?;
        let reuse = group
            .as_ref()
            .is_some_and(|g| g.data["expires"].as_str().and_then(Ts::parse) <= Some(now));
        let mut ops = crate::groups::count_ops(&shares?, gid, rec.task_id.as_str(), reuse);
        let fresh = json!({ "taskGroupId": gid, "schedulerId": rec.scheduler_id, "expires": wanted_expires });
        let group = match group {
            None => {
                ops.push(WriteOp::Put {
                    table: keys::TASK_GROUPS,
                    item: crate::groups::group_item(gid, fresh),
                    cond: Cond::NotExists,
                });
                return Ok(ops);
            }
            Some(g) if reuse => {
                ops.push(WriteOp::Put {
                    table: keys::TASK_GROUPS,
                    item: crate::groups::group_item(gid, fresh),
                    cond: Cond::Version(g.version),
                });
                return Ok(ops);
            }
            Some(g) => g,
        };
        let scheduler = group.data["schedulerId"].as_str().unwrap_or_default();
        if scheduler != rec.scheduler_id {
            return Err(ApiError::conflict(format!(
                "Task group {gid} belongs to schedulerId {scheduler}; task {} has schedulerId {}",
                rec.task_id, rec.scheduler_id
            )));
        }
        if group.data.get("sealed").is_some_and(|s| !s.is_null()) {
            // An identical repeat of an existing task is still a conflict once sealed, as upstream.
            return Err(ApiError::conflict(format!(
                "Task group {gid} is sealed; no tasks can be added"
            )));
        }
        let expires = group.data["expires"]
            .as_str()
            .and_then(Ts::parse)
            .unwrap_or_default();
        ops.push(if expires < wanted_expires {
            let mut data = group.data.clone();
            data["expires"] = json!(wanted_expires);
            WriteOp::Put {
                table: keys::TASK_GROUPS,
                item: crate::groups::group_item(gid, data),
                cond: Cond::Version(group.version),
            }
        } else {
            WriteOp::Check {
                table: keys::TASK_GROUPS,
                pk: gid.to_string(),
                sk: keys::SK_GROUP.to_string(),
                cond: Cond::Version(group.version),
            }
        });
        Ok(ops)
    }

    /// scheduleTask.
    pub async fn schedule_task(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        Ok(self.mutate(task_id.as_str(), |r| r.schedule(now)).await?.0)
    }

    /// rerunTask.
    pub async fn rerun_task(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        Ok(self.mutate(task_id.as_str(), |r| r.rerun(now)).await?.0)
    }

    /// cancelTask.
    pub async fn cancel_task(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        Ok(self.mutate(task_id.as_str(), |r| r.cancel(now)).await?.0)
    }

    /// changeTaskPriority.
    pub async fn change_priority(
        &self,
        task_id: &TaskId,
        p: Priority,
        now: Ts,
    ) -> ApiResult<TaskRecord> {
        Ok(self
            .mutate(task_id.as_str(), |r| r.change_priority(p, now))
            .await?
            .0)
    }

    /// reportCompleted / reportFailed / reportException.
    pub async fn resolve(
        &self,
        task_id: &TaskId,
        run_id: u32,
        outcome: ReasonResolved,
        now: Ts,
    ) -> ApiResult<TaskRecord> {
        Ok(self
            .mutate(task_id.as_str(), |r| r.resolve(run_id, outcome, now))
            .await?
            .0)
    }

    async fn definition_for_claim(&self, task_id: &str, rec: &TaskRecord) -> ApiResult<Value> {
        let mut def = self
            .load_def(task_id)
            .await?
            .ok_or_else(|| ApiError::internal(format!("task {task_id} has no definition")))?;
        def["priority"] = json!(rec.priority.as_str());
        Ok(def)
    }

    async fn finish_claim(&self, rec: TaskRecord, run_id: u32, now: Ts) -> ApiResult<Claim> {
        let task = self
            .definition_for_claim(&rec.task_id.clone(), &rec)
            .await?;
        let run = rec.runs.get(run_id as usize).cloned().ok_or_else(|| {
            ApiError::internal(format!(
                "claimed run {run_id} of task {} is missing",
                rec.task_id
            ))
        })?;
        let scopes: Vec<String> = crate::model::string_list(&task["scopes"]);
        let credentials = creds::for_claim(&self.issuer, &rec.task_id, &run, &scopes, now);
        Ok(Claim {
            record: rec,
            run,
            task,
            credentials,
        })
    }

    /// claimTask (deprecated): claims one specific run.
    pub async fn claim_task(
        &self,
        task_id: &TaskId,
        run_id: u32,
        worker_group: &str,
        worker_id: &str,
        now: Ts,
    ) -> ApiResult<Claim> {
        let taken_until = now.plus(self.cfg.claim_timeout_ms);
        let (rec, _) = self
            .mutate(task_id.as_str(), |r| {
                r.claim(run_id, worker_group, worker_id, now, taken_until)
            })
            .await?;
        self.finish_claim(rec, run_id, now).await
    }

    /// reclaimTask: extends the claim; returns the record and fresh credentials.
    pub async fn reclaim_task(&self, task_id: &TaskId, run_id: u32, now: Ts) -> ApiResult<Claim> {
        let taken_until = now.plus(self.cfg.claim_timeout_ms);
        let (rec, ()) = self
            .mutate(task_id.as_str(), |r| r.reclaim(run_id, now, taken_until))
            .await?;
        self.finish_claim(rec, run_id, now).await
    }

    /// One pass over the head of a task queue's pending index: claims up to `count` runs.
    /// `lost` counts claimable candidates that other claimers won meanwhile (work exists, so
    /// a long poll should look again at once rather than wait).
    pub async fn try_claim_work(
        &self,
        q: &TaskQueueId,
        worker_group: &str,
        worker_id: &str,
        count: usize,
        now: Ts,
    ) -> ApiResult<ClaimPass> {
        // A few spare candidates beyond `count` absorb lost races without reading (and
        // decoding) a long stretch of the index on every call.
        let limit = count + 4;
        let page = self
            .store
            .query_index(
                keys::TASKS,
                index::PENDING,
                q.as_str(),
                &SkRange::default(),
                None,
                limit,
            )
            .await
            .map_err(internal)?;
        // Candidates are tried in queue order (priority, then age), so a worker without
        // competition gets strict FIFO. Once a candidate is lost to a concurrent claimer, the
        // rest of the equally-ranked head is rotated by a random amount, so that racing
        // workers spread out instead of all fighting over the next item.
        let mut candidates: std::collections::VecDeque<Item> = page.items.into();
        let mut spread = false;
        let mut lost = 0;
        let taken_until = now.plus(self.cfg.claim_timeout_ms);
        let mut claims = Vec::new();
        while let Some(item) = candidates.pop_front() {
            if claims.len() >= count {
                break;
            }
            let rec: TaskRecord = decode(item.data)?;
            let Some(run) = rec.runs.last().filter(|r| r.state == RunState::Pending) else {
                continue;
            };
            if rec.deadline <= now {
                continue; // the deadline reaper resolves it
            }
            let run_id = run.run_id;
            match self
                .claim_candidate(
                    rec,
                    item.version,
                    run_id,
                    worker_group,
                    worker_id,
                    now,
                    taken_until,
                )
                .await?
            {
                Some(rec) => claims.push(self.finish_claim(rec, run_id, now).await?),
                None if !spread => {
                    lost += 1;
                    spread = true;
                    spread_head(candidates.make_contiguous(), count);
                }
                None => lost += 1,
            }
        }
        Ok(ClaimPass { claims, lost })
    }

    /// Claims a candidate seen in the (eventually consistent) index. `None` if someone else
    /// got it first or it is no longer pending.
    #[allow(clippy::too_many_arguments)]
    async fn claim_candidate(
        &self,
        mut rec: TaskRecord,
        mut version: u64,
        run_id: u32,
        worker_group: &str,
        worker_id: &str,
        now: Ts,
        taken_until: Ts,
    ) -> ApiResult<Option<TaskRecord>> {
        // A lost condition re-reads the item: another claimer's win shows as a run no longer
        // pending (given up at once), while a background write (the publisher removing events,
        // the dependency worker clearing its mark) leaves the run pending, and giving up then
        // would hand the worker a lower-priority task instead.
        for attempt in 0..MAX_ATTEMPTS {
            if attempt >= 3 {
                backoff(attempt).await;
            }
            if rec.runs.len() != run_id as usize + 1
                || rec.runs[run_id as usize].state != RunState::Pending
                || rec.deadline <= now
            {
                return Ok(None);
            }
            let task_id = rec.task_id.clone();
            if rec.claim(run_id, worker_group, worker_id, now, taken_until)?
                != ClaimOutcome::Claimed
            {
                return Ok(None);
            }
            match self.save(&rec, version).await? {
                Ok(()) => {
                    return Ok(Some(rec));
                }
                Err(e) if e.is_condition_failed() => match self.load(&task_id).await? {
                    // Stale index entry or a concurrent change: look again at the real item.
                    Some((fresh, v)) => {
                        rec = fresh;
                        version = v;
                    }
                    None => return Ok(None),
                },
                Err(e) => return Err(internal(e)),
            }
        }
        Ok(None)
    }

    /// claimWork: long-polls until at least one run is claimed or the timeout passes.
    pub async fn claim_work(
        &self,
        q: &TaskQueueId,
        worker_group: &str,
        worker_id: &str,
        count: usize,
        clock: &(dyn Fn() -> Ts + Send + Sync),
    ) -> ApiResult<Vec<Claim>> {
        let until =
            Instant::now() + Duration::from_millis(self.cfg.claim_work_timeout_ms.max(0) as u64);
        loop {
            let token = self.signal.token(q.as_str());
            let ClaimPass { claims, lost } = self
                .try_claim_work(q, worker_group, worker_id, count, clock())
                .await?;
            let left = until.saturating_duration_since(Instant::now());
            if !claims.is_empty() || left.is_zero() {
                return Ok(claims);
            }
            if lost > 0 {
                // Others won this pass but work remains: look again after a short jitter.
                tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 10)).await;
                continue;
            }
            let recheck = Duration::from_millis(self.cfg.claim_work_recheck_ms.max(10) as u64);
            self.signal.wait(q.as_str(), token, left.min(recheck)).await;
        }
    }

    /// pendingTasks: number of pending runs in a task queue.
    pub async fn pending_count(&self, q: &TaskQueueId) -> ApiResult<u64> {
        self.store
            .count_index(keys::TASKS, index::PENDING, q.as_str(), &SkRange::default())
            .await
            .map_err(internal)
    }

    /// taskQueueCounts' claimed half: runs currently claimed from a task queue.
    pub async fn claimed_count(&self, q: &TaskQueueId) -> ApiResult<u64> {
        self.store
            .count_index(keys::TASKS, index::CLAIMED, q.as_str(), &SkRange::default())
            .await
            .map_err(internal)
    }

    /// listPendingTasks / listClaimedTasks.
    pub async fn list_queue(
        &self,
        q: &TaskQueueId,
        claimed: bool,
        page: &PageReq,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let idx = if claimed {
            index::CLAIMED
        } else {
            index::PENDING
        };
        let res = self
            .store
            .query_index(
                keys::TASKS,
                idx,
                q.as_str(),
                &SkRange::default(),
                after.as_ref(),
                page.limit,
            )
            .await
            .map_err(internal)?;
        let mut out = Vec::with_capacity(res.items.len());
        for item in res.items {
            let rec: TaskRecord = decode(item.data)?;
            let Some(run) = rec.runs.last() else { continue };
            let task = self.definition_for_claim(&rec.task_id, &rec).await?;
            let mut entry = Map::new();
            entry.insert("taskId".into(), json!(rec.task_id));
            entry.insert("runId".into(), json!(run.run_id));
            if claimed {
                entry.insert("workerGroup".into(), json!(run.worker_group));
                entry.insert("workerId".into(), json!(run.worker_id));
                entry.insert("claimed".into(), json!(run.started));
            } else {
                entry.insert("inserted".into(), json!(run.scheduled));
            }
            entry.insert("task".into(), task);
            out.push(Value::Object(entry));
        }
        Ok((out, res.next.as_ref().map(encode_token)))
    }

    /// True if a record of this task waits in the publisher hints.
    pub fn is_dirty(&self, task_id: &str) -> bool {
        self.dirty.lock().is_ok_and(|d| d.contains_key(task_id))
    }

    /// Takes the records written with events since the last call, with their versions: the
    /// latest per task.
    pub fn take_dirty(&self) -> Vec<(TaskRecord, u64)> {
        self.dirty
            .lock()
            .map(|mut d| std::mem::take(&mut *d).into_values().collect())
            .unwrap_or_default()
    }

    /// Claim reaper, one task: expires its claim if still due. True if resolved.
    pub async fn reap_claim(
        &self,
        task_id: &str,
        run_id: u32,
        taken_until: Ts,
        now: Ts,
    ) -> ApiResult<bool> {
        Ok(self
            .mutate(task_id, |r| Ok(r.expire_claim(run_id, taken_until, now)))
            .await?
            .1)
    }

    /// Deadline reaper, one task: resolves it if unresolved past its deadline. True if resolved.
    pub async fn reap_deadline(&self, task_id: &str, now: Ts) -> ApiResult<bool> {
        Ok(self
            .mutate(task_id, |r| Ok(r.deadline_exceeded(now)))
            .await?
            .1)
    }

    /// Every entry of a sharded time-ordered index that is due at `now` (up to `batch` per
    /// shard), as the index reports it.
    pub(crate) async fn due(
        &self,
        idx: &'static str,
        now: Ts,
        batch: usize,
    ) -> ApiResult<Vec<Item>> {
        self.due_in(keys::TASKS, idx, now, batch).await
    }

    /// [`Self::due`] for an index of any table.
    pub(crate) async fn due_in(
        &self,
        table: &'static str,
        idx: &'static str,
        now: Ts,
        batch: usize,
    ) -> ApiResult<Vec<Item>> {
        let mut out = Vec::new();
        for shard in 0..SHARDS {
            let range = SkRange {
                upto: Some(keys::due_upto(now)),
                ..Default::default()
            };
            let pk = keys::shard_pk(idx, shard);
            let page = self
                .store
                .query_index(table, idx, &pk, &range, None, batch)
                .await
                .map_err(internal)?;
            out.extend(page.items);
        }
        Ok(out)
    }

    /// One pass of the claim reaper over every shard; returns how many claims expired.
    pub async fn reap_claims_once(&self, now: Ts, batch: usize) -> ApiResult<usize> {
        let mut n = 0;
        for item in self.due(index::CLAIMS, now, batch).await? {
            let rec: TaskRecord = decode(item.data)?;
            let Some(run) = rec.runs.last() else { continue };
            let Some(taken_until) = run.taken_until else {
                continue;
            };
            n += self
                .reap_claim(&rec.task_id, run.run_id, taken_until, now)
                .await? as usize;
        }
        Ok(n)
    }

    /// One pass of the deadline reaper over every shard; returns how many tasks it resolved.
    pub async fn reap_deadlines_once(&self, now: Ts, batch: usize) -> ApiResult<usize> {
        let mut n = 0;
        for item in self.due(index::DEADLINE, now, batch).await? {
            n += self.reap_deadline(&item.pk, now).await? as usize;
        }
        Ok(n)
    }
}

/// Rotates the equally-ranked head of `candidates` (at most `max(count, 8)` items) by a
/// random amount.
fn spread_head(candidates: &mut [Item], count: usize) {
    let Some(rank) = candidates.first().map(|i| i.data["priority"].clone()) else {
        return;
    };
    let same_rank = candidates
        .iter()
        .take_while(|i| i.data["priority"] == rank)
        .count();
    let n = same_rank.min(count.max(8));
    if n > 1 {
        candidates[..n].rotate_left(rand::random::<u32>() as usize % n);
    }
}

/// Short randomised backoff between optimistic-concurrency attempts.
pub(crate) async fn backoff(attempt: usize) {
    let cap = 1u64 << attempt.min(6);
    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % (cap + 1))).await;
}

/// One calendar year after `t`, as upstream's `setFullYear(getFullYear() + 1)` (29 February
/// becomes 1 March).
fn one_year_after(t: Ts) -> Ts {
    use chrono::{Datelike, TimeZone, Utc};
    let Some(d) = Utc.timestamp_millis_opt(t.millis()).single() else {
        return t.plus(365 * DAY);
    };
    let year = d.year() + 1;
    d.with_year(year)
        .or_else(|| d.with_day(1)?.with_month(3)?.with_year(year))
        .map(|n| Ts(n.timestamp_millis()))
        .unwrap_or(t.plus(365 * DAY))
}

/// Applies the hand-checked rules of createTask and returns the definition as stored:
/// dates in millisecond form, taskQueueId and the legacy pair reconciled, taskGroupId and
/// expires defaulted.
pub fn normalize_definition(
    task_id: &TaskId,
    mut body: Value,
    now: Ts,
    max_deadline_days: i64,
) -> ApiResult<Value> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| ApiError::input("task definition must be an object"))?;
    let tq = obj
        .get("taskQueueId")
        .and_then(Value::as_str)
        .map(String::from);
    let prov = obj
        .get("provisionerId")
        .and_then(Value::as_str)
        .map(String::from);
    let wt = obj
        .get("workerType")
        .and_then(Value::as_str)
        .map(String::from);
    let q = match (tq, prov, wt) {
        (Some(tq), p, w) => {
            let q = TaskQueueId::parse(&tq).map_err(|e| ApiError::input(e.message))?;
            if p.as_deref().is_some_and(|p| p != q.provisioner_id())
                || w.as_deref().is_some_and(|w| w != q.worker_type())
            {
                return Err(ApiError::input(format!(
                    "taskQueueId {tq} does not agree with provisionerId/workerType"
                )));
            }
            q
        }
        (None, Some(p), Some(w)) => {
            TaskQueueId::from_parts(&p, &w).map_err(|e| ApiError::input(e.message))?
        }
        _ => {
            return Err(ApiError::input(
                "A task needs a taskQueueId, or both provisionerId and workerType",
            ))
        }
    };
    obj.insert("taskQueueId".into(), json!(q.as_str()));
    obj.insert("provisionerId".into(), json!(q.provisioner_id()));
    obj.insert("workerType".into(), json!(q.worker_type()));
    obj.entry("taskGroupId")
        .or_insert_with(|| json!(task_id.as_str()));

    let date = |obj: &Map<String, Value>, k: &str| -> ApiResult<Option<Ts>> {
        match obj.get(k).and_then(Value::as_str) {
            None => Ok(None),
            Some(s) => Ts::parse(s)
                .map(Some)
                .ok_or_else(|| ApiError::input(format!("{k} is not a valid date-time: {s}"))),
        }
    };
    let created = date(obj, "created")?.ok_or_else(|| ApiError::input("created is required"))?;
    let deadline = date(obj, "deadline")?.ok_or_else(|| ApiError::input("deadline is required"))?;
    let expires = date(obj, "expires")?.unwrap_or(one_year_after(deadline));
    if (created.millis() - now.millis()).abs() > DRIFT_MS {
        return Err(ApiError::input(format!(
            "created {created} must be within 15 minutes of the current time {now}"
        )));
    }
    if deadline < created {
        return Err(ApiError::input(format!(
            "deadline {deadline} must not be before created {created}"
        )));
    }
    if deadline <= now {
        return Err(ApiError::input(format!(
            "deadline {deadline} is in the past"
        )));
    }
    if deadline > now.plus(max_deadline_days * DAY + DRIFT_MS) {
        return Err(ApiError::input(format!(
            "deadline {deadline} is more than {max_deadline_days} days in the future"
        )));
    }
    if expires < deadline {
        return Err(ApiError::input(format!(
            "expires {expires} must not be before deadline {deadline}"
        )));
    }
    obj.insert("created".into(), json!(created));
    obj.insert("deadline".into(), json!(deadline));
    obj.insert("expires".into(), json!(expires));
    if let Some(bad) = obj.get("scopes").and_then(Value::as_array).and_then(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .find(|s| s.ends_with("**"))
    }) {
        return Err(ApiError::input(format!(
            "scope {bad:?} ends with '**', which is not allowed"
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_expiry_is_one_calendar_year_after_the_deadline() {
        let at = |s: &str| Ts::parse(s).unwrap();
        assert_eq!(
            one_year_after(at("2027-03-01T10:00:00.123Z")),
            at("2028-03-01T10:00:00.123Z"),
            "crossing 29 February takes 366 days"
        );
        assert_eq!(
            one_year_after(at("2028-02-29T00:00:00.000Z")),
            at("2029-03-01T00:00:00.000Z"),
            "29 February rolls over to 1 March, as in JavaScript"
        );
    }
}
