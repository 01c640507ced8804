//! Worker metadata: recording the task queues and workers that claims show, and reading them
//! back (upstream's "Worker Metadata" endpoints).
//!
//! Recording is throttled per process, as upstream's: a task queue or a worker is written
//! when this process has not written it for [`QueueConfig::worker_info_throttle_ms`]
//! (30 minutes), or never. The runs a worker claims in between wait in the process and go
//! out together, once [`QueueConfig::recent_tasks_batch`] of them are waiting or the oldest
//! has waited [`QueueConfig::recent_tasks_delay_ms`]. A sighting that makes a record due (a
//! first one, or one past the throttle) writes it before the claim answers, as upstream's
//! claims await theirs, so a script can read or quarantine a worker as soon as it claimed. A
//! batch of held runs a claim that hands out work makes due is written by
//! [`Queue::flush_seen`] instead — on the local server at its next background tick or the start
//! of its next claimWork, in a Lambda function after the handler and before the answer (a
//! frozen or recycled container would never write it). So `recentTasks` may lag, and a process
//! that dies loses the runs it held below a batch (metadata only; no task or claim depends on
//! it). A failed recording is logged and never fails the claim that caused it.
//!
//! [`QueueConfig::worker_info_throttle_ms`]: super::QueueConfig::worker_info_throttle_ms
//! [`QueueConfig::recent_tasks_batch`]: super::QueueConfig::recent_tasks_batch
//! [`QueueConfig::recent_tasks_delay_ms`]: super::QueueConfig::recent_tasks_delay_ms

use super::core::{backoff, chunked, Queue, PARALLEL};
use crate::error::{ApiError, ApiResult};
use crate::ids::TaskQueueId;
use crate::page::{decode_token, page_by_key, PageReq, MAX_PAGE};
use crate::records::worker::{
    expiry_after, pk_workers, sk_worker, TaskQueueRecord, TaskRun, WorkerRecord, WorkerSighting,
    PK_TASK_QUEUES, TABLE, TASK_QUEUE_LIFETIME_MS, WORKER_EXPIRY, WORKER_LIFETIME_MS,
};
use crate::store::{Cond, GetKey, Item, SkRange, WriteOp};
use crate::time::{Budget, Ts};
use futures_util::future::join_all;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Attempts of a read-modify-write of a metadata item before it gives up.
const ATTEMPTS: usize = 8;
/// A task queue recorded this recently (and living long enough) needs no write.
const FRESH_MS: i64 = 1_000;
/// Workers a process remembers before it forgets the ones with nothing waiting.
const MEMO_WORKERS: usize = 10_000;

/// What this process recorded, and the claimed runs it holds back.
#[derive(Default)]
pub(crate) struct SeenMemo {
    queues: HashMap<String, Ts>,
    workers: HashMap<MemoKey, WorkerMemo>,
}

/// What [`Queue::flush_seen`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Everything due: new or stale task queues and workers, full batches, aged runs.
    Due,
    /// Everything held (at shutdown).
    All,
}

#[derive(Default)]
struct WorkerMemo {
    /// When this process last wrote (or read a fresh) item; `None`: not known.
    written: Option<Ts>,
    waiting: Vec<TaskRun>,
    waiting_since: Ts,
    /// The item as a claim that held runs here last read it: the write of those runs starts
    /// from it, conditioned on its version, instead of reading it again (a changed item
    /// fails the condition and is read).
    read: Option<Item>,
}

/// A worker's record as a claim read it: what the claim needs of it, and the item, which the
/// write of the runs it claims can start from (see [`Queue::record_seen`]).
pub struct WorkerRead {
    /// Whether it is quarantined, and when it was last recorded.
    pub sighting: WorkerSighting,
    item: Item,
}

impl WorkerRead {
    /// What a claim reads of a worker's stored item; `None` if it holds no worker record.
    pub(crate) fn of(item: Item) -> Option<WorkerRead> {
        let sighting = WorkerSighting::from_item(&item)?;
        Some(WorkerRead { sighting, item })
    }
}

/// Where a worker's record is stored, as a key of a batched read.
pub(crate) fn worker_get_key(key: WorkerKey<'_>, strong: bool) -> GetKey {
    GetKey {
        table: TABLE,
        pk: pk_workers(key.0),
        sk: sk_worker(key.1, key.2),
        consistent: strong,
    }
}

/// A worker: `(taskQueueId, workerGroup, workerId)`.
pub type WorkerKey<'a> = (&'a str, &'a str, &'a str);

/// A worker's key as the memo owns it.
type MemoKey = (String, String, String);

fn memo_key((tq, wg, wid): WorkerKey) -> MemoKey {
    (tq.to_string(), wg.to_string(), wid.to_string())
}

impl Queue {
    /// A worker's record (strongly read or not) and its version; `None` if never seen.
    pub async fn read_worker(
        &self,
        key: WorkerKey<'_>,
        strong: bool,
    ) -> ApiResult<Option<(WorkerRecord, u64)>> {
        let item = self.worker_item(key, strong).await?;
        Ok(item.and_then(|i| WorkerRecord::from_item(&i).map(|r| (r, i.version))))
    }

    /// A worker's stored item (strongly read or not).
    async fn worker_item(&self, key: WorkerKey<'_>, strong: bool) -> ApiResult<Option<Item>> {
        let k = worker_get_key(key, strong);
        Ok(self
            .store
            .get_as(k.table, &k.pk, &k.sk, k.consistent)
            .await?)
    }

    /// What a claim reads of a worker's record (strongly read or not); `None` if never seen.
    pub(crate) async fn read_sighting(
        &self,
        key: WorkerKey<'_>,
        strong: bool,
    ) -> ApiResult<Option<WorkerRead>> {
        Ok(self
            .worker_item(key, strong)
            .await?
            .and_then(WorkerRead::of))
    }

    /// A task queue's record, if seen and not expired at `now`.
    pub async fn task_queue(
        &self,
        task_queue_id: &str,
        now: Ts,
    ) -> ApiResult<Option<TaskQueueRecord>> {
        let item = self.store.get(TABLE, PK_TASK_QUEUES, task_queue_id).await?;
        Ok(item.and_then(|i| TaskQueueRecord::live(&i, now)))
    }

    /// Records that `worker` (if any) was seen on `task_queue_id` at `now`, having claimed
    /// `runs` (see the module's notes). `read`: what the caller just read of the worker's
    /// record, which spares a read. A record this sighting makes due (never written by this
    /// process, or not for the throttle's time) is written before this returns, as upstream's
    /// claims await theirs. `defer`: the runs held for `recentTasks` are not written now even
    /// when their batch is due; [`Queue::flush_seen`] writes them (a claim that hands out
    /// work answers first).
    pub async fn record_seen(
        &self,
        task_queue_id: &str,
        worker: Option<(&str, &str)>,
        runs: &[TaskRun],
        read: Option<Option<WorkerRead>>,
        now: Ts,
        defer: bool,
    ) {
        let throttle = self.cfg.worker_info_throttle_ms;
        let queue_due = {
            let memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            memo.queues
                .get(task_queue_id)
                .is_none_or(|t| now.millis() - t.millis() >= throttle)
        };
        // The task queue and the worker at once: a first sighting's two records cost one
        // round trip of writes, not two.
        let queue = async {
            if queue_due {
                self.write_task_queue_seen(task_queue_id, now).await;
            }
        };
        let worker = async {
            let Some((wg, wid)) = worker else { return };
            self.record_worker_seen((task_queue_id, wg, wid), runs, read, now, defer)
                .await;
        };
        tokio::join!(queue, worker);
    }

    /// [`Queue::record_seen`] for the worker `key`.
    async fn record_worker_seen(
        &self,
        key: WorkerKey<'_>,
        runs: &[TaskRun],
        read: Option<Option<WorkerRead>>,
        now: Ts,
        defer: bool,
    ) {
        let throttle = self.cfg.worker_info_throttle_ms;
        let mkey = memo_key(key);
        // A process that has not written this worker learns from the record whether a write
        // is due, so that many processes sharing the workers do not each write them.
        let read = match read {
            Some(r) => r,
            None if self.memo_written(&mkey).is_none() => {
                self.read_sighting(key, false).await.ok().flatten()
            }
            None => None,
        };
        let (stale, due) = {
            let mut memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if memo.workers.len() >= MEMO_WORKERS {
                memo.workers.retain(|_, m| !m.waiting.is_empty());
            }
            let m = memo.workers.entry(mkey.clone()).or_default();
            if m.written.is_none() {
                m.written = read
                    .as_ref()
                    .map(|r| r.sighting.last_date_active)
                    .filter(|t| now.millis() - t.millis() < throttle);
            }
            if m.waiting.is_empty() {
                m.waiting_since = now;
            }
            m.waiting.extend(runs.iter().cloned());
            if let (false, Some(r)) = (m.waiting.is_empty(), read) {
                m.read = Some(r.item);
            }
            (self.worker_stale(m, now), self.worker_write_due(m, now))
        };
        if stale || due && !defer {
            self.write_worker_seen(key, &mkey, now).await;
        }
    }

    /// Writes a task queue as seen at `now` (expiring five days on), and remembers it.
    async fn write_task_queue_seen(&self, task_queue_id: &str, now: Ts) {
        let expires = expiry_after(now, TASK_QUEUE_LIFETIME_MS);
        match self.task_queue_seen(task_queue_id, expires, now).await {
            Ok(()) => {
                let mut memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                memo.queues.insert(task_queue_id.to_string(), now);
            }
            Err(e) => tracing::warn!(error = %e, task_queue_id, "could not record a task queue"),
        }
    }

    fn memo_written(&self, mkey: &MemoKey) -> Option<Ts> {
        let memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        memo.workers.get(mkey).and_then(|m| m.written)
    }

    /// True if this process has not written the worker, or not for the throttle's time.
    fn worker_stale(&self, m: &WorkerMemo, now: Ts) -> bool {
        m.written
            .is_none_or(|t| now.millis() - t.millis() >= self.cfg.worker_info_throttle_ms)
    }

    /// True if the worker is [stale](Self::worker_stale) or the runs held for it make a
    /// `recentTasks` batch.
    fn worker_write_due(&self, m: &WorkerMemo, now: Ts) -> bool {
        let waited = now.millis() - m.waiting_since.millis();
        self.worker_stale(m, now)
            || m.waiting.len() >= self.cfg.recent_tasks_batch.max(1)
            || (!m.waiting.is_empty() && waited >= self.cfg.recent_tasks_delay_ms)
    }

    /// Writes what this process holds and `what` selects (see [`Flush`]).
    pub async fn flush_seen(&self, now: Ts, what: Flush) {
        let workers: Vec<MemoKey> = {
            let memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            memo.workers
                .iter()
                .filter(|(_, m)| match what {
                    // Only runs held for a batch: a stale worker is written when it is seen,
                    // so a worker that stopped claiming is not kept alive.
                    Flush::Due => !m.waiting.is_empty() && self.worker_write_due(m, now),
                    Flush::All => !m.waiting.is_empty() || m.written.is_none(),
                })
                .map(|(k, _)| k.clone())
                .collect()
        };
        for chunk in workers.chunks(PARALLEL) {
            join_all(chunk.iter().map(|mkey| {
                let (tq, wg, wid) = mkey;
                self.write_worker_seen((tq, wg, wid), mkey, now)
            }))
            .await;
        }
    }

    /// Writes a worker as seen at `now` with the runs the memo holds; on failure they stay
    /// held for the next try.
    async fn write_worker_seen(&self, key: WorkerKey<'_>, mkey: &MemoKey, now: Ts) {
        let (runs, read) = {
            let mut memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            memo.workers
                .get_mut(mkey)
                .map(|m| (std::mem::take(&mut m.waiting), m.read.take()))
                .unwrap_or_default()
        };
        let expires = expiry_after(now, WORKER_LIFETIME_MS);
        let out = self
            .update_worker(key, true, read, |old| {
                Some(WorkerRecord::seen(old, key, expires, &runs, now))
            })
            .await;
        let mut memo = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let m = memo.workers.entry(mkey.clone()).or_default();
        match out {
            Ok(_) => m.written = Some(now),
            Err(e) => {
                tracing::warn!(error = %e, worker = ?mkey, "could not record a worker");
                let mut back = runs;
                back.append(&mut m.waiting);
                m.waiting = back;
            }
        }
    }

    /// Read-modify-write of one metadata item, retried on a concurrent change: `change` gets
    /// the stored item (if any) and returns the one to put, or `None` to leave it (the result
    /// is then `None`). `what` names it in the 409 when it keeps changing. `read`: the item
    /// as recently read, which the first attempt starts from instead of reading it.
    async fn read_modify_write(
        &self,
        (pk, sk): (&str, &str),
        what: &str,
        mut read: Option<Item>,
        mut change: impl FnMut(Option<&Item>) -> Option<Item>,
    ) -> ApiResult<Option<Item>> {
        for attempt in 0..ATTEMPTS {
            let old = match read.take() {
                Some(item) => Some(item),
                None => self.store.get(TABLE, pk, sk).await?,
            };
            let cond = old
                .as_ref()
                .map_or(Cond::NotExists, |i| Cond::Version(i.version));
            let Some(new) = change(old.as_ref()) else {
                return Ok(None);
            };
            let op = WriteOp::Put {
                table: TABLE,
                item: new.clone(),
                cond,
            };
            match self.store.write(op).await {
                Ok(_) => return Ok(Some(new)),
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "the {what} changed too often to be updated"
        )))
    }

    /// Read-modify-write of a worker's record: `change` gets the current record (if any) and
    /// returns the new one, or `None` to leave it (the result is then `None`). `create`:
    /// whether a missing worker may be created; `read`: its item as recently read, if any.
    async fn update_worker(
        &self,
        key: WorkerKey<'_>,
        create: bool,
        read: Option<Item>,
        mut change: impl FnMut(Option<WorkerRecord>) -> Option<WorkerRecord>,
    ) -> ApiResult<Option<WorkerRecord>> {
        let (pk, sk) = (pk_workers(key.0), sk_worker(key.1, key.2));
        // The record last put, kept rather than decoded back from its item.
        let mut put = None;
        let item = self
            .read_modify_write((&pk, &sk), "worker", read, |old| {
                if old.is_none() && !create {
                    return None;
                }
                let new = change(old.and_then(WorkerRecord::from_item))?;
                let item = new.to_item();
                put = Some(new);
                Some(item)
            })
            .await?;
        Ok(item.and(put))
    }

    /// Records a task queue as seen at `now`, expiring no earlier than `expires`.
    async fn task_queue_seen(&self, task_queue_id: &str, expires: Ts, now: Ts) -> ApiResult<()> {
        let key = (PK_TASK_QUEUES, task_queue_id);
        self.read_modify_write(key, "task queue", None, |item| {
            let old = item.and_then(TaskQueueRecord::from_item);
            // Many workers of a queue recording it at once: the first write does for all.
            if old.as_ref().is_some_and(|o| {
                o.expires >= expires && now.millis() - o.last_date_active.millis() < FRESH_MS
            }) {
                return None;
            }
            Some(TaskQueueRecord::seen(old, task_queue_id, expires, now).to_item())
        })
        .await?;
        Ok(())
    }

    /// True if the worker is quarantined at `now`, with what was read to decide, which
    /// [`Queue::record_seen`] can reuse. The read is strongly consistent (1 read unit rather
    /// than 0.5): an eventually consistent one can miss a quarantine written moments ago and
    /// hand the worker a task (seen with 1 s of index lag, `TCQ_INDEX_LAG_MS`).
    pub async fn quarantined(
        &self,
        key: WorkerKey<'_>,
        now: Ts,
    ) -> ApiResult<(bool, Option<WorkerRead>)> {
        let read = self.read_sighting(key, true).await?;
        let q = read.as_ref().is_some_and(|r| r.sighting.quarantined(now));
        Ok((q, read))
    }

    /// Every task queue in a partition range that lives at `now`.
    pub(crate) async fn live_task_queues(
        &self,
        range: &SkRange,
        now: Ts,
    ) -> ApiResult<Vec<TaskQueueRecord>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .store
                .query(TABLE, PK_TASK_QUEUES, range, after.as_ref(), MAX_PAGE)
                .await?;
            out.extend(
                page.items
                    .iter()
                    .filter_map(|i| TaskQueueRecord::live(i, now)),
            );
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(out),
            }
        }
    }

    /// listTaskQueues, or listWorkerTypes with `provisioner`: the task queues that live at
    /// `now`, one page.
    pub async fn list_task_queues(
        &self,
        provisioner: Option<&str>,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(Vec<TaskQueueRecord>, Option<String>)> {
        let range = SkRange {
            prefix: provisioner.map(|p| format!("{p}/")),
            upto: None,
        };
        let (items, token) = self.query_page(TABLE, PK_TASK_QUEUES, &range, page).await?;
        let queues = items
            .iter()
            .filter_map(|i| TaskQueueRecord::live(i, now))
            .collect();
        Ok((queues, token))
    }

    /// Provisioners, as upstream derives them from the task queues that live at `now`: the
    /// latest `expires` and `lastDateActive` of each one's queues. `only`: just that one.
    pub async fn provisioners(
        &self,
        only: Option<&str>,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let range = SkRange {
            prefix: only.map(|p| format!("{p}/")),
            upto: None,
        };
        let after = match &page.token {
            Some(t) => Some(decode_token(t)?.0),
            None => None,
        };
        let mut by_id: BTreeMap<String, (Ts, Ts)> = BTreeMap::new();
        for q in self.live_task_queues(&range, now).await? {
            let Ok(tq) = TaskQueueId::parse(&q.task_queue_id) else {
                continue;
            };
            let e = by_id
                .entry(tq.provisioner_id().to_string())
                .or_insert((q.expires, q.last_date_active));
            e.0 = e.0.max(q.expires);
            e.1 = e.1.max(q.last_date_active);
        }
        let items: Vec<(String, Value)> = by_id
            .into_iter()
            .filter(|(id, _)| after.as_ref().is_none_or(|a| id > a))
            .map(|(id, (expires, active))| {
                let v = serde_json::json!({
                    "provisionerId": id,
                    "expires": expires,
                    "lastDateActive": active,
                    "description": "",
                    "stability": "experimental",
                });
                (id, v)
            })
            .collect();
        Ok(page_by_key(items, page.limit.max(1), false, PK_TASK_QUEUES))
    }

    /// listWorkers: one page of a task queue's workers that reads show at `now` (quarantined
    /// ones even past `expires`), only the quarantined (`Some(true)`) or the others
    /// (`Some(false)`) if asked.
    pub async fn list_workers(
        &self,
        task_queue_id: &str,
        quarantined: Option<bool>,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let pk = pk_workers(task_queue_id);
        let (items, token) = self
            .query_page(TABLE, &pk, &SkRange::default(), page)
            .await?;
        let workers = items
            .iter()
            .filter_map(WorkerRecord::from_item)
            .filter(|w| !w.gone(now) && quarantined.is_none_or(|q| w.quarantined(now) == q))
            .map(|w| w.list_json(now))
            .collect();
        Ok((workers, token))
    }

    /// getWorker: the worker, unless gone at `now` or its task queue is.
    pub async fn get_worker(&self, key: WorkerKey<'_>, now: Ts) -> ApiResult<WorkerRecord> {
        let (worker, queue) =
            tokio::try_join!(self.read_worker(key, true), self.task_queue(key.0, now))?;
        match (worker, queue) {
            (Some((w, _)), Some(_)) if !w.gone(now) => Ok(w),
            _ => Err(worker_not_found(key)),
        }
    }

    /// quarantineWorker: quarantines a known worker until `until` (a time past lifts it).
    pub async fn quarantine_worker(
        &self,
        key: WorkerKey<'_>,
        until: Ts,
        info: &str,
        client_id: &str,
        now: Ts,
    ) -> ApiResult<WorkerRecord> {
        let out = self
            .update_worker(key, false, None, |old| {
                let mut w = old?;
                w.quarantine(until, info, client_id, now);
                Some(w)
            })
            .await?;
        out.ok_or_else(|| worker_not_found(key))
    }

    /// declareWorker: records the worker and its task queue as seen, expiring no earlier
    /// than `expires`.
    pub async fn declare_worker(
        &self,
        key: WorkerKey<'_>,
        expires: Ts,
        now: Ts,
    ) -> ApiResult<WorkerRecord> {
        self.task_queue_seen(key.0, expires, now).await?;
        let out = self
            .update_worker(key, true, None, |old| {
                Some(WorkerRecord::seen(old, key, expires, &[], now))
            })
            .await?;
        out.ok_or_else(|| worker_not_found(key))
    }

    /// Deletes the task queues and workers due at `now` (up to `batch` per index shard, while
    /// `budget` lasts): each only if it is still due when read, and unchanged since.
    pub(crate) async fn expire_worker_info(
        &self,
        now: Ts,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<(usize, bool)> {
        let due = self.due_in(TABLE, WORKER_EXPIRY, now, batch).await?;
        let (deleted, cut) = chunked(&due.items, budget, |e| self.expire_metadata(e, now)).await?;
        Ok((deleted.into_iter().filter(|d| *d).count(), due.more || cut))
    }

    async fn expire_metadata(&self, entry: &Item, now: Ts) -> ApiResult<bool> {
        let Some(item) = self.store.get(TABLE, &entry.pk, &entry.sk).await? else {
            return Ok(false);
        };
        let due = if item.pk == PK_TASK_QUEUES {
            TaskQueueRecord::from_item(&item).is_some_and(|r| r.expires <= now)
        } else {
            WorkerRecord::from_item(&item).is_some_and(|w| w.gone(now))
        };
        if !due {
            return Ok(false);
        }
        self.delete_if_unchanged(TABLE, &item).await
    }
}

fn worker_not_found((tq, wg, wid): WorkerKey) -> ApiError {
    ApiError::not_found(format!("Worker {wg}/{wid} of task queue {tq} not found"))
}
