//! The queue service's state and the read-modify-write every operation is built on.

use super::counter;
use crate::creds::Issuer;
use crate::error::{ApiError, ApiResult};
use crate::hints::{NoHints, WriteObserver};
use crate::page::{encode_token, PageReq};
use crate::records::task::{RunState, TaskRecord, SK_DEF, SK_STATUS, TASKS};
use crate::signal::WorkSignal;
use crate::store::shard::{due_upto, shard_pk, Shards, SHARDS};
use crate::store::{Cond, Data, Item, SkRange, Store, StoreError, WriteOp, MAX_BATCH_GET};
use crate::time::{Budget, Ts, MINUTE};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Tunables of the queue, with upstream's defaults.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// How long a claim lasts (upstream `claimTimeout`, 1200 s).
    pub claim_timeout_ms: i64,
    /// How long claimWork waits for work (20 s).
    pub claim_work_timeout_ms: i64,
    /// How a waiting claimWork re-reads the pending index, which is what finds work that
    /// another process (another function, another server over the same store) created;
    /// signals from this process wake it at once.
    pub claim_work_poll: PollSchedule,
    /// The same while wake-ups from every process reach the waiter ([`Waiter::crosses_processes`]):
    /// the re-reads are then only a fallback for a lost wake-up.
    ///
    /// [`Waiter::crosses_processes`]: crate::signal::Waiter::crosses_processes
    pub claim_work_poll_woken: PollSchedule,
    /// How many claimWork calls may wait at once (none: unlimited). Set where each waiting
    /// call holds a function instance of a limited concurrency; past it, calls that find no
    /// work answer at once. Slots live in the task-groups table ([`wait_slot`]).
    ///
    /// [`wait_slot`]: crate::records::wait_slot
    pub claim_work_slots: Option<u32>,
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
    /// How long a process goes without writing a task queue or worker it keeps seeing
    /// (upstream's `workerInfoUpdateFrequency`, 30 minutes).
    pub worker_info_throttle_ms: i64,
    /// Claimed runs a process holds back for a worker's `recentTasks` before it writes them
    /// together (5: a fifth of a write per claim).
    pub recent_tasks_batch: usize,
    /// Longest a claimed run is held back before it is written (60 s).
    pub recent_tasks_delay_ms: i64,
    /// How long a run waits pending before it is claimed ahead of every run that waited less,
    /// whatever their priorities (30 minutes; 0: never, upstream's strict order). See
    /// [`super::aging`].
    pub priority_aging_ms: i64,
    /// How many members of a task group one cancelTaskGroup or changeTaskGroupPriority call
    /// goes through before it answers and leaves the rest to the `groupChanges` job (2,000:
    /// a call also stops after 10 s, well within the HTTP API's 30 s).
    pub group_call_tasks: u64,
    /// How long a write may take to show in every secondary index, for the jobs that must
    /// find every run written before they began: worker-manager's removals look again this
    /// long after their first look (2 s: DynamoDB's indexes usually follow within a second;
    /// 0 where they are current, as in the embedded store).
    pub index_settle_ms: u64,
    /// How many of a resolved task's dependents the dependency resolver satisfies a second
    /// ([`DEPENDENTS_PER_SEC`]; 0: unpaced).
    pub dependents_per_sec: u32,
    /// True where the process that creates tasks also claims them (the local server):
    /// createTask then keeps the definition it wrote, and the claim reads only the worker's
    /// record. A function that only creates tasks would fill a cache it never reads.
    pub keep_created_defs: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            claim_timeout_ms: 1200 * 1000,
            claim_work_timeout_ms: 20 * 1000,
            claim_work_poll: PollSchedule::default(),
            claim_work_poll_woken: PollSchedule::WOKEN,
            claim_work_slots: None,
            max_task_deadline_days: 5,
            group_expiry_extension_ms: GROUP_EXPIRY_EXTENSION_MS,
            exchange_prefix: crate::routing::DEFAULT_EXCHANGE_PREFIX.to_string(),
            scheduler_exchange_prefix: crate::routing::SCHEDULER_EXCHANGE_PREFIX.to_string(),
            events_from_stream: false,
            worker_info_throttle_ms: 30 * MINUTE,
            recent_tasks_batch: 5,
            recent_tasks_delay_ms: MINUTE,
            priority_aging_ms: PRIORITY_AGING_MS,
            group_call_tasks: 2_000,
            index_settle_ms: 2_000,
            dependents_per_sec: DEPENDENTS_PER_SEC,
            keep_created_defs: false,
        }
    }
}

/// How many dependents of one task are satisfied a second, by default (400). Their edges
/// share the task's partition, and each is marked in a transaction that bills two write units
/// there: 800 of the 1,000 DynamoDB allows a partition each second, the rest left for the
/// chunk in flight and for edges that createTask writes meanwhile. 5,000 dependents take
/// 12.5 s.
pub const DEPENDENTS_PER_SEC: u32 = 400;

/// How long a pending run waits before it ages, by default (30 minutes).
pub const PRIORITY_AGING_MS: i64 = 30 * MINUTE;

/// The intervals between a waiting claimWork's reads of the pending index: `first_ms` after
/// the first empty read, growing by a quarter per empty read up to `max_ms`, each with ±20 %
/// jitter so that workers that started together spread out. An empty read of the index costs
/// 0.5 read units on DynamoDB; the defaults make about 90 reads (45 units) in a 20 s wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollSchedule {
    /// Interval after the first empty read, in milliseconds.
    pub first_ms: u64,
    /// Longest interval, in milliseconds.
    pub max_ms: u64,
}

impl Default for PollSchedule {
    fn default() -> Self {
        PollSchedule {
            first_ms: 100,
            max_ms: 240,
        }
    }
}

impl PollSchedule {
    /// The fallback schedule while cross-process wake-ups work: about 11 reads (6 read units)
    /// in a 20 s wait.
    pub const WOKEN: PollSchedule = PollSchedule {
        first_ms: 1_000,
        max_ms: 2_000,
    };

    /// The interval (without jitter) after `empty_reads` empty reads (1 for the first).
    pub fn base(&self, empty_reads: u32) -> Duration {
        let max = self.max_ms.max(1);
        let mut ms = self.first_ms.clamp(1, max) as f64;
        for _ in 1..empty_reads.min(64) {
            ms = (ms * 1.25).min(max as f64);
        }
        Duration::from_millis(ms.round() as u64)
    }

    /// [`Self::base`] with ±20 % jitter; `unit` is a random number in [0, 1).
    pub fn interval(&self, empty_reads: u32, unit: f64) -> Duration {
        let ms = self.base(empty_reads).as_millis() as f64 * (0.8 + 0.4 * unit.clamp(0.0, 1.0));
        Duration::from_millis(ms.round() as u64)
    }

    /// How many reads a wait of `wait` makes (the first one included), without jitter.
    pub fn reads_in(&self, wait: Duration) -> u32 {
        let mut spent = Duration::ZERO;
        let mut reads = 1;
        while spent + self.base(reads) < wait {
            spent += self.base(reads);
            reads += 1;
        }
        reads
    }
}

/// Default for [`QueueConfig::group_expiry_extension_ms`]: an hour, as upstream.
pub const GROUP_EXPIRY_EXTENSION_MS: i64 = 60 * MINUTE;
/// Optimistic-concurrency attempts before giving up with 409.
pub(crate) const MAX_ATTEMPTS: usize = 25;
/// Store reads or writes a many-item operation keeps in flight at once.
pub(crate) const PARALLEL: usize = 16;

/// Handles `items` with `f`, [`PARALLEL`] at a time, while `budget` lasts (at least one
/// chunk); returns the answers so far, and true if it stopped with items left. A background
/// pass then says more is due, and the next pass or invocation takes them: a pass in flight
/// ends within one chunk of its budget however slow the store is, rather than outlasting its
/// function's timeout.
pub(crate) async fn chunked<'a, T, R, F, Fut>(
    items: &'a [T],
    budget: &Budget,
    f: F,
) -> ApiResult<(Vec<R>, bool)>
where
    F: Fn(&'a T) -> Fut,
    Fut: std::future::Future<Output = ApiResult<R>>,
{
    let mut out = Vec::with_capacity(items.len());
    let mut chunks = items.chunks(PARALLEL).peekable();
    while let Some(chunk) = chunks.next() {
        out.extend(futures_util::future::try_join_all(chunk.iter().map(&f)).await?);
        if chunks.peek().is_some() && !budget.left() {
            return Ok((out, true));
        }
    }
    Ok((out, false))
}

/// One page of a task listing (see [`Queue::fill_task_page`]).
pub(crate) struct TaskPage<'a> {
    /// `{task, status}` of the tasks taken.
    pub tasks: Vec<Value>,
    /// Set when the page filled by bytes before the ids ran out: the last id taken (the next
    /// page starts after it), `None` if not even the first fitted.
    pub full_after: Option<Option<&'a str>>,
}

/// Bytes of definitions (as JSON) a process keeps before its cache starts over: a warm
/// Lambda container serves many tasks, and a count bound let 10,000 definitions of 6 KB
/// grow to about 140 MB. Parsed values take about three times their JSON.
pub const DEF_CACHE_BYTES: usize = 8 << 20;

/// Task definitions by taskId, bounded by [`DEF_CACHE_BYTES`].
#[derive(Default)]
pub(crate) struct DefCache {
    map: HashMap<String, (Value, usize)>,
    bytes: usize,
}

impl DefCache {
    fn get(&self, task_id: &str) -> Option<&Value> {
        self.map.get(task_id).map(|(v, _)| v)
    }

    /// Keeps `def`, counted as `json_len` bytes of JSON (the stored text's length, at hand
    /// where the definition was read, so it need not be serialized again to be measured).
    fn insert(&mut self, task_id: &str, def: Value, json_len: usize) {
        let size = json_len + task_id.len();
        if size > DEF_CACHE_BYTES {
            return;
        }
        self.remove(task_id);
        if self.bytes + size > DEF_CACHE_BYTES {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.map.insert(task_id.to_string(), (def, size));
    }

    fn remove(&mut self, task_id: &str) {
        if let Some((_, size)) = self.map.remove(task_id) {
            self.bytes -= size;
        }
    }
}

/// The queue service.
pub struct Queue {
    /// Storage.
    pub store: Arc<dyn Store>,
    /// Wakes waiting claimWork calls.
    pub signal: Arc<dyn WorkSignal>,
    /// Told of this process's writes (hints for in-process background loops).
    pub observer: Arc<dyn WriteObserver>,
    /// What this process counted: its answers, and the resolutions and claims it wrote.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Issues workers' temporary credentials.
    pub issuer: Issuer,
    /// Tunables.
    pub cfg: QueueConfig,
    /// Task definitions never change after creation, so each process keeps the ones it read.
    defs: Mutex<DefCache>,
    /// The task queues and workers this process recorded, and the runs it holds back.
    pub(crate) seen: Mutex<super::workers::SeenMemo>,
}

impl Queue {
    /// A queue over the given ports, observing nothing.
    pub fn new(
        store: Arc<dyn Store>,
        signal: Arc<dyn WorkSignal>,
        issuer: impl Into<Issuer>,
        cfg: QueueConfig,
    ) -> Self {
        Queue {
            store,
            signal,
            observer: Arc::new(NoHints),
            metrics: Default::default(),
            issuer: issuer.into(),
            cfg,
            defs: Default::default(),
            seen: Default::default(),
        }
    }

    /// The same queue counting into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same queue telling `observer` of its writes.
    pub fn with_observer(mut self, observer: Arc<dyn WriteObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// A task's status record and version, read strongly.
    pub(crate) async fn load(&self, task_id: &str) -> ApiResult<Option<(TaskRecord, u64)>> {
        self.load_with(task_id, true).await
    }

    /// A task's status record, strongly or eventually consistent. An eventual read may be an
    /// older version or miss a task created moments ago: only a write conditioned on the
    /// version read may rest on it.
    pub(crate) async fn load_with(
        &self,
        task_id: &str,
        consistent: bool,
    ) -> ApiResult<Option<(TaskRecord, u64)>> {
        let item = self
            .store
            .get_as(TASKS, task_id, SK_STATUS, consistent)
            .await?;
        match item {
            Some(item) => Ok(Some((item.data.decode()?, item.version))),
            None => Ok(None),
        }
    }

    /// Several tasks' status records at once (strongly consistent), in the order of `ids`.
    pub(crate) async fn load_many(&self, ids: &[&str]) -> ApiResult<Vec<Option<TaskRecord>>> {
        let keys: Vec<(String, String)> = ids
            .iter()
            .map(|id| (id.to_string(), SK_STATUS.to_string()))
            .collect();
        let items = self.store.get_many(TASKS, &keys, true).await?;
        items
            .into_iter()
            .map(|i| match i {
                Some(item) => Ok(Some(item.data.decode()?)),
                None => Ok(None),
            })
            .collect()
    }

    /// A task's definition (cached: definitions never change).
    pub(crate) async fn load_def(&self, task_id: &str) -> ApiResult<Option<Value>> {
        if let Some(def) = self.cached_def(task_id) {
            return Ok(Some(def));
        }
        // Definitions never change, so an eventually consistent read is current whenever it
        // finds one; only a task created moments ago may need the strong read.
        let item = match self.store.get_eventual(TASKS, task_id, SK_DEF).await? {
            Some(i) => Some(i),
            None => self.store.get(TASKS, task_id, SK_DEF).await?,
        };
        Ok(item.map(|i| self.remember_def(task_id, i.data)))
    }

    /// A definition this process has read before, if it still holds it.
    pub(crate) fn cached_def(&self, task_id: &str) -> Option<Value> {
        self.defs.lock().ok().and_then(|c| c.get(task_id).cloned())
    }

    /// The definition stored as `data`, kept for later reads by this process.
    pub(crate) fn remember_def(&self, task_id: &str, data: Data) -> Value {
        let json_len = data.encoded().map_or(0, |b| b.len());
        let def = data.into_value();
        self.keep_def(task_id, def.clone(), json_len);
        def
    }

    /// Keeps definition `def`, `json_len` bytes as stored, for later reads by this process.
    pub(crate) fn keep_def(&self, task_id: &str, def: Value, json_len: usize) {
        if let Ok(mut cache) = self.defs.lock() {
            cache.insert(task_id, def, json_len);
        }
    }

    /// Several tasks' definitions, in the order of `ids`, as [`Queue::load_def`] reads one:
    /// from the cache, else one batched eventually consistent read, else (a task created
    /// moments ago) a batched strong one.
    pub(crate) async fn load_defs(&self, ids: &[&str]) -> ApiResult<Vec<Option<Value>>> {
        let mut out: Vec<Option<Value>> = match self.defs.lock() {
            Ok(cache) => ids.iter().map(|id| cache.get(id).cloned()).collect(),
            Err(_) => vec![None; ids.len()],
        };
        for consistent in [false, true] {
            let missing: Vec<usize> = (0..ids.len()).filter(|i| out[*i].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            let keys: Vec<(String, String)> = missing
                .iter()
                .map(|i| (ids[*i].to_string(), SK_DEF.to_string()))
                .collect();
            let found = self.store.get_many(TASKS, &keys, consistent).await?;
            for (i, item) in missing.into_iter().zip(found) {
                if let Some(item) = item {
                    out[i] = Some(self.remember_def(ids[i], item.data));
                }
            }
        }
        Ok(out)
    }

    /// Drops a definition from the cache (its task expired).
    pub(crate) fn forget_def(&self, task_id: &str) {
        if let Ok(mut cache) = self.defs.lock() {
            cache.remove(task_id);
        }
    }

    /// The definition as a claim shows it (`def` as [`Queue::load_def`] found it): with the
    /// current priority.
    pub(crate) fn shown_definition(rec: &TaskRecord, def: Option<Value>) -> ApiResult<Value> {
        let mut def = def
            .ok_or_else(|| ApiError::internal(format!("task {} has no definition", rec.task_id)))?;
        def["priority"] = json!(rec.priority.as_str());
        Ok(def)
    }

    /// The status item of a record.
    pub(crate) fn status_item(rec: &TaskRecord) -> ApiResult<Item> {
        Ok(Item::new(
            rec.task_id.clone(),
            SK_STATUS,
            crate::records::outbox::stored_data(rec)?,
            rec.index_entries(),
        ))
    }

    /// After a successful write (the stored record is now `rec` at `version`): wake claimers,
    /// count what the write did, and tell the observer.
    pub(crate) fn after_write(&self, rec: &TaskRecord, version: u64) {
        self.count_written(rec);
        if rec
            .runs
            .last()
            .is_some_and(|r| r.state == RunState::Pending)
        {
            let hint = || self.pending_hint(rec, version);
            self.signal.notify(&rec.task_queue_id, &hint);
        }
        self.observer.task_written(rec, version);
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
            table: TASKS,
            item: Self::status_item(rec)?,
            cond: Cond::Version(version),
        };
        Ok(self.store.write(op).await.map(|v| self.after_write(rec, v)))
    }

    /// Writes a status item at `version` together with `ops` (one write if there are none).
    pub(crate) async fn save_with(
        &self,
        rec: &TaskRecord,
        version: u64,
        mut ops: Vec<WriteOp>,
    ) -> ApiResult<Result<(), StoreError>> {
        if ops.is_empty() {
            return self.save(rec, version).await;
        }
        ops.insert(
            0,
            WriteOp::Put {
                table: TASKS,
                item: Self::status_item(rec)?,
                cond: Cond::Version(version),
            },
        );
        // Every write bumps the version by one (the store port's promise).
        Ok(self
            .store
            .transact(ops)
            .await
            .map(|()| self.after_write(rec, version + 1)))
    }

    /// [`Queue::mutate`] for a worker's call at `now`: what time already decided (a passed
    /// claim or deadline, [`TaskRecord::settle`]) is applied first, and stored even when `f`
    /// then refuses (its error is returned after), so the answer and the stored state are
    /// those the reapers would have left.
    pub(crate) async fn mutate_settled<T>(
        &self,
        task_id: &str,
        now: Ts,
        mut f: impl FnMut(&mut TaskRecord) -> ApiResult<T>,
    ) -> ApiResult<(TaskRecord, T)> {
        let mut refused = None;
        let (rec, out) = self
            .mutate(task_id, |r| {
                refused = None;
                let settled = r.settle(now);
                match f(r) {
                    Ok(v) => Ok(Some(v)),
                    Err(e) if settled => {
                        refused = Some(e);
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        match (out, refused) {
            (Some(v), _) => Ok((rec, v)),
            (None, Some(e)) => Err(e),
            (None, None) => Err(ApiError::internal("a settled call lost its answer")),
        }
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
                let shares = counter::shares(self.store.as_ref(), &rec.task_group_id, true).await?;
                ops = counter::count_ops(&shares, &rec.task_group_id, task_id, false);
            }
            match self.save_with(&rec, version, ops).await? {
                Ok(()) => return Ok((rec, out)),
                Err(e) if e.is_condition_failed() => {
                    if consistent {
                        backoff(attempt).await;
                    }
                    consistent = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {task_id} is changing too fast; try again"
        )))
    }

    /// A page of `{task, status}` for the listed tasks, in order, skipping expired ones and
    /// stopping once the page is full by bytes. Read in batches of 200 tasks (statuses
    /// strongly, definitions as [`Queue::load_defs`] reads them), not one task at a time.
    pub(crate) async fn fill_task_page<'a, S: AsRef<str>>(
        &self,
        ids: &'a [S],
        now: Ts,
    ) -> ApiResult<TaskPage<'a>> {
        let mut out = crate::page::Filler::default();
        let mut last: Option<&str> = None;
        // The store reads a few batches at once.
        for chunk in ids.chunks(MAX_BATCH_GET * 2) {
            let chunk_ids: Vec<&str> = chunk.iter().map(AsRef::as_ref).collect();
            let (statuses, defs) =
                tokio::try_join!(self.load_many(&chunk_ids), self.load_defs(&chunk_ids))?;
            for ((id, rec), def) in chunk.iter().zip(statuses).zip(defs) {
                let (Some(rec), Some(mut def)) = (rec, def) else {
                    continue;
                };
                // Expired tasks (deleted or not yet) are skipped.
                if rec.expires <= now {
                    continue;
                }
                def["priority"] = json!(rec.priority.as_str());
                if !out.push(json!({ "task": def, "status": rec.status_json() })) {
                    return Ok(TaskPage {
                        tasks: out.into_items(),
                        full_after: Some(last),
                    });
                }
                last = Some(id.as_ref());
            }
        }
        Ok(TaskPage {
            tasks: out.into_items(),
            full_after: None,
        })
    }

    /// One page of the items of partition `pk` of `table` in `range`, in sort-key order,
    /// from the page's token, and the token after it (only when more follow: one extra item
    /// is read to tell, so a token never leads nowhere).
    pub(crate) async fn query_page(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        page: &PageReq,
    ) -> ApiResult<(Vec<Item>, Option<String>)> {
        let after = page.cursor()?;
        let limit = page.limit.max(1);
        let mut got = self
            .store
            .query(table, pk, range, after.as_ref(), limit + 1)
            .await?
            .items;
        let token = if got.len() > limit {
            got.truncate(limit);
            got.last()
                .map(|i| encode_token(&(i.sk.clone(), i.pk.clone(), i.sk.clone())))
        } else {
            None
        };
        Ok((got, token))
    }

    /// Entries of a sharded time-ordered index of `table` that are due at `now`, up to
    /// `batch` per shard, as the index reports them; `more` if a shard may hold further ones.
    pub(crate) async fn due_in(
        &self,
        table: &'static str,
        idx: &'static str,
        now: Ts,
        batch: usize,
    ) -> ApiResult<Due> {
        self.due_in_shards(table, idx, now, batch, Shards::ALL)
            .await
    }

    /// [`Queue::due_in`] over the shards `shards` only.
    pub(crate) async fn due_in_shards(
        &self,
        table: &'static str,
        idx: &'static str,
        now: Ts,
        batch: usize,
        shards: Shards,
    ) -> ApiResult<Due> {
        let mut due = Due::default();
        let range = SkRange {
            upto: Some(due_upto(now)),
            ..Default::default()
        };
        for shard in (0..SHARDS).filter(|s| shards.contains(*s)) {
            let pk = shard_pk(idx, shard);
            let page = self
                .store
                .query_index(table, idx, &pk, &range, None, batch)
                .await?;
            due.more |= page.items.len() >= batch;
            due.items.extend(page.items);
        }
        Ok(due)
    }
}

/// What a background pass found due: the index entries, and whether more may be due.
#[derive(Debug, Default)]
pub struct Due {
    /// The entries.
    pub items: Vec<Item>,
    /// True if a shard returned a whole batch: a next pass may find more.
    pub more: bool,
}

/// What one background pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Items it handled.
    pub done: usize,
    /// True if more may be due: another pass should follow at once, time permitting.
    pub more: bool,
}

/// Short randomised backoff between optimistic-concurrency attempts.
pub(crate) async fn backoff(attempt: usize) {
    let cap = 1u64 << attempt.min(6);
    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % (cap + 1))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definition_cache_stays_within_its_bytes() {
        let mut c = DefCache::default();
        let def = json!({ "payload": { "blob": "x".repeat(6_000) } });
        let len = def.to_string().len();
        for i in 0..10_000 {
            c.insert(&format!("task{i}"), def.clone(), len);
            assert!(c.bytes <= DEF_CACHE_BYTES);
        }
        assert!(c.get("task9999").is_some());
        let held: usize = c.map.values().map(|(_, s)| s).sum();
        assert_eq!(held, c.bytes);
        c.remove("task9999");
        assert!(c.get("task9999").is_none());
        // Too big to keep at all: not kept, nothing dropped.
        let before = c.map.len();
        c.insert("huge", json!("y"), DEF_CACHE_BYTES + 1);
        assert!(c.get("huge").is_none());
        assert_eq!(c.map.len(), before);
    }

    #[test]
    fn the_poll_schedule_starts_fast_backs_off_and_stays_within_its_read_budget() {
        let p = PollSchedule::default();
        assert_eq!(p.base(1), Duration::from_millis(100));
        assert_eq!(p.base(2), Duration::from_millis(125));
        assert_eq!(p.base(50), Duration::from_millis(240));
        // ±20 % jitter around the base.
        assert_eq!(p.interval(1, 0.0), Duration::from_millis(80));
        assert_eq!(p.interval(1, 0.999_999), Duration::from_millis(120));
        // A 20 s wait stays under 100 reads (50 read units at 0.5 per empty query).
        let reads = p.reads_in(Duration::from_secs(20));
        assert!((80..100).contains(&reads), "{reads} reads in 20 s");
        let woken = PollSchedule::WOKEN.reads_in(Duration::from_secs(20));
        assert!((8..14).contains(&woken), "{woken} reads in 20 s");
        // A degenerate configuration still makes progress.
        let zero = PollSchedule {
            first_ms: 0,
            max_ms: 0,
        };
        assert_eq!(zero.base(3), Duration::from_millis(1));
    }

    #[tokio::test]
    async fn a_pass_stops_within_a_chunk_of_its_budget_and_says_what_is_left() {
        let items: Vec<usize> = (0..40).collect();
        let double = |i: &usize| {
            let i = *i;
            async move { Ok(2 * i) }
        };
        let spent = Budget::of(Duration::ZERO);
        let (done, cut) = chunked(&items, &spent, double).await.expect("chunked");
        // One chunk always goes, so that every pass makes progress.
        assert_eq!(done, (0..PARALLEL).map(|i| 2 * i).collect::<Vec<_>>());
        assert!(cut);
        let ample = Budget::of(Duration::from_secs(60));
        let (done, cut) = chunked(&items, &ample, double).await.expect("chunked");
        assert_eq!(done.len(), 40);
        assert!(!cut);
        // A last chunk that ends after the budget leaves nothing behind: not cut.
        let (done, cut) = chunked(&items[..PARALLEL], &spent, double)
            .await
            .expect("chunked");
        assert_eq!(done.len(), PARALLEL);
        assert!(!cut);
    }
}
