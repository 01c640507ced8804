//! Claims: claimWork's long poll over the pending index, claimTask and reclaimTask, each
//! handing the worker temporary credentials for the run.

use super::core::{backoff, Queue, MAX_ATTEMPTS};
use super::workers::{worker_get_key, Flush, WorkerKey, WorkerRead};
use crate::creds;
use crate::error::{ApiError, ApiResult};
use crate::ids::{TaskId, TaskQueueId};
use crate::records::task::{index, ClaimOutcome, Run, RunState, TaskRecord, SK_DEF, TASKS};
use crate::records::wait_slot;
use crate::records::worker::TaskRun;
use crate::signal::Hint;
use crate::store::{GetKey, Item, SkRange, StoreError};
use crate::time::Ts;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

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

/// Pages of the pending index one claim pass reads at most while their entries are stale.
const STALE_PAGES: usize = 4;

/// Why a candidate run was not claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missed {
    /// Another claimer (or a change) took it during this call.
    Lost,
    /// It had moved on before this call began: the index entry or hint that offered it
    /// was stale.
    Stale,
    /// The worker is quarantined: it claims nothing.
    Quarantined,
}

impl Missed {
    /// Why run `run_id` of `rec`, no longer claimable, was missed by a call at `now`: stale
    /// if it was claimed or resolved before `now`.
    fn of(rec: &TaskRecord, run_id: u32, now: Ts) -> Missed {
        let run = rec.runs.get(run_id as usize);
        let moved = run.and_then(|r| r.started.or(r.resolved));
        match moved {
            Some(at) if at < now => Missed::Stale,
            None if rec.deadline <= now => Missed::Stale,
            _ => Missed::Lost,
        }
    }
}

/// What one claimWork call knows of its worker's record: nothing yet, or the record as read
/// once, with the first candidate's definition (one request for both), else before the call
/// waits. The quarantine is judged when it is read.
#[derive(Default)]
struct Gate {
    /// `None` until read; then whether the worker was quarantined when read (the call
    /// claims nothing), and what was read (`None`: never seen), which spares the worker's
    /// write a read.
    read: Option<(bool, Option<WorkerRead>)>,
}

impl Gate {
    fn set(&mut self, quarantined: bool, read: Option<WorkerRead>) {
        self.read = Some((quarantined, read));
    }

    fn is_read(&self) -> bool {
        self.read.is_some()
    }

    fn quarantined(&self) -> bool {
        self.read.as_ref().is_some_and(|(q, _)| *q)
    }
}

/// What one claim pass did.
pub struct ClaimPass {
    /// The runs claimed.
    pub claims: Vec<Claim>,
    /// Claimable candidates lost to concurrent claimers.
    pub lost: usize,
}

impl Claim {
    /// The claimed run, for the worker's `recentTasks`.
    pub fn task_run(&self) -> TaskRun {
        TaskRun {
            task_id: self.record.task_id.clone(),
            run_id: self.run.run_id,
        }
    }

    /// The claim-work/claim-task response item.
    pub fn into_json(self) -> Value {
        let run = self.run;
        crate::json::object([
            ("status", self.record.status_json()),
            ("runId", run.run_id.into()),
            ("workerGroup", run.worker_group.into()),
            ("workerId", run.worker_id.into()),
            ("takenUntil", json!(run.taken_until)),
            ("task", self.task),
            ("credentials", self.credentials.to_json()),
        ])
    }
}

impl Queue {
    /// A claim's answer. The definition is read beside the claim's write rather than after
    /// it: definitions never change, and a store round trip less is most of a pickup's time
    /// once the wake-up arrived. A claim that fails wastes that one read.
    async fn finish_claim(
        &self,
        rec: TaskRecord,
        run_id: u32,
        def: Option<Value>,
        now: Ts,
    ) -> ApiResult<Claim> {
        let task = Self::shown_definition(&rec, def)?;
        let run = rec.runs.get(run_id as usize).cloned().ok_or_else(|| {
            ApiError::internal(format!(
                "claimed run {run_id} of task {} is missing",
                rec.task_id
            ))
        })?;
        let scopes: Vec<String> = crate::json::string_list(&task["scopes"]);
        let issuer = self.issuer.at(now).await;
        let credentials = creds::for_claim(&issuer, &rec.task_id, &run, &scopes, now);
        Ok(Claim {
            record: rec,
            run,
            task,
            credentials,
        })
    }

    /// claimTask (deprecated): claims one specific run of a task of `tq` (the caller read
    /// the task to authorise the claim; the claim itself is conditioned on the stored record).
    pub async fn claim_task(
        &self,
        task_id: &TaskId,
        run_id: u32,
        tq: &str,
        worker_group: &str,
        worker_id: &str,
        now: Ts,
    ) -> ApiResult<Claim> {
        let key = (tq, worker_group, worker_id);
        let (quarantined, read) = self.quarantined(key, now).await?;
        if quarantined {
            self.record_seen(tq, None, &[], None, now, false).await;
            return Err(ApiError::conflict(format!(
                "Worker {worker_group}/{worker_id} is quarantined: it claims nothing until \
                 its quarantine ends"
            )));
        }
        let taken_until = now.plus(self.cfg.claim_timeout_ms);
        let (claimed, def) = tokio::join!(
            self.mutate(task_id.as_str(), |r| {
                r.claim(run_id, worker_group, worker_id, now, taken_until)
            }),
            self.load_def(task_id.as_str())
        );
        let (rec, _) = claimed?;
        let claim = self.finish_claim(rec, run_id, def?, now).await?;
        let worker = Some((worker_group, worker_id));
        self.record_seen(tq, worker, &[claim.task_run()], Some(read), now, true)
            .await;
        Ok(claim)
    }

    /// reclaimTask: extends the claim; returns the record and fresh credentials.
    pub async fn reclaim_task(&self, task_id: &TaskId, run_id: u32, now: Ts) -> ApiResult<Claim> {
        let taken_until = now.plus(self.cfg.claim_timeout_ms);
        let (reclaimed, def) = tokio::join!(
            self.mutate_settled(task_id.as_str(), now, |r| {
                r.reclaim(run_id, now, taken_until)
            }),
            self.load_def(task_id.as_str())
        );
        let (rec, ()) = reclaimed?;
        let claim = self.finish_claim(rec, run_id, def?, now).await?;
        let (tq, run) = (&claim.record.task_queue_id, &claim.run);
        let worker = run.worker_group.as_deref().zip(run.worker_id.as_deref());
        self.record_seen(tq, worker, &[], None, now, false).await;
        Ok(claim)
    }

    /// One pass over the head of a task queue's pending index: claims up to `count` runs,
    /// none if the worker is quarantined. `lost` counts claimable candidates that other
    /// claimers won meanwhile (work exists, so a long poll should look again at once rather
    /// than wait).
    pub async fn try_claim_work(
        &self,
        q: &TaskQueueId,
        worker_group: &str,
        worker_id: &str,
        count: usize,
        now: Ts,
    ) -> ApiResult<ClaimPass> {
        let key = (q.as_str(), worker_group, worker_id);
        self.claim_pass(q, key, count, now, &mut Gate::default())
            .await
    }

    /// [`Queue::try_claim_work`] within a claimWork call that knows `gate`.
    async fn claim_pass(
        &self,
        q: &TaskQueueId,
        key: WorkerKey<'_>,
        count: usize,
        now: Ts,
        gate: &mut Gate,
    ) -> ApiResult<ClaimPass> {
        // A few spare candidates beyond `count` absorb lost races without reading (and
        // decoding) a long stretch of the index on every call.
        let limit = count + 4;
        let mut after = None;
        let mut spread = false;
        let mut lost = 0;
        let mut claims = Vec::new();
        // An index that lags its items (a GSI) may head the queue with entries of runs
        // already claimed; a page of nothing but those leads on to the next, a few at most.
        for _ in 0..STALE_PAGES {
            let page = self
                .store
                .query_index(
                    TASKS,
                    index::PENDING,
                    q.as_str(),
                    &SkRange::default(),
                    after.as_ref(),
                    limit,
                )
                .await?;
            // Candidates are tried in queue order (priority, then age), so a worker without
            // competition gets strict FIFO. Once a candidate is lost to a concurrent claimer,
            // the rest of the equally-ranked head is rotated by a random amount, so that
            // racing workers spread out instead of all fighting over the next item.
            let mut candidates: std::collections::VecDeque<Item> = page.items.into();
            let mut stale = 0;
            while let Some(item) = candidates.pop_front() {
                if claims.len() >= count {
                    break;
                }
                let rec: TaskRecord = item.data.decode()?;
                let Some(run_id) = claimable(&rec, now) else {
                    continue;
                };
                match self
                    .claim_seen(rec, item.version, run_id, key, now, gate)
                    .await?
                {
                    Ok(claim) => claims.push(claim),
                    Err(Missed::Quarantined) => return Ok(ClaimPass { claims, lost }),
                    // An entry that lags behind its item: no race to spread out from, and
                    // nothing to look again for at once.
                    Err(Missed::Stale) => stale += 1,
                    Err(Missed::Lost) if !spread => {
                        lost += 1;
                        spread = true;
                        spread_head(candidates.make_contiguous(), count);
                    }
                    Err(Missed::Lost) => lost += 1,
                }
            }
            match page.next {
                Some(next) if claims.len() < count && stale > 0 => after = Some(next),
                _ => break,
            }
        }
        Ok(ClaimPass { claims, lost })
    }

    /// Claims run `run_id` of a record as seen in the index or a wake-up's hint (at
    /// `version`). The call's first candidate reads the worker's record and its definition
    /// in one request before the claim's write; later ones read their definition beside it.
    /// `None` if someone else got it first or it is no longer pending.
    async fn claim_seen(
        &self,
        rec: TaskRecord,
        version: u64,
        run_id: u32,
        key: WorkerKey<'_>,
        now: Ts,
        gate: &mut Gate,
    ) -> ApiResult<Result<Claim, Missed>> {
        let taken_until = now.plus(self.cfg.claim_timeout_ms);
        let task_id = rec.task_id.clone();
        let mut read_def = None;
        if !gate.is_read() {
            let (read, def) = self.first_read(key, &task_id).await?;
            let quarantined = read.as_ref().is_some_and(|r| r.sighting.quarantined(now));
            gate.set(quarantined, read);
            if quarantined {
                return Ok(Err(Missed::Quarantined));
            }
            read_def = def;
        }
        let (_, worker_group, worker_id) = key;
        let claim = self.claim_candidate(
            rec,
            version,
            run_id,
            worker_group,
            worker_id,
            now,
            taken_until,
        );
        let (claimed, def) = match read_def {
            Some(def) => (claim.await, Ok(Some(def))),
            None => tokio::join!(claim, self.load_def(&task_id)),
        };
        match claimed? {
            Ok(rec) => Ok(Ok(self.finish_claim(rec, run_id, def?, now).await?)),
            Err(missed) => Ok(Err(missed)),
        }
    }

    /// The first read of a claimWork call that has a candidate: the worker's record
    /// (strongly: a quarantine set a moment ago holds) and, in the same request, the
    /// candidate's definition (eventually consistent: definitions never change). The
    /// definition is `None` when not found (a task created moments ago: the claim reads it
    /// strongly) and comes from the cache when this process holds it.
    async fn first_read(
        &self,
        key: WorkerKey<'_>,
        task_id: &str,
    ) -> ApiResult<(Option<WorkerRead>, Option<Value>)> {
        if let Some(def) = self.cached_def(task_id) {
            return Ok((self.read_sighting(key, true).await?, Some(def)));
        }
        let worker = worker_get_key(key, true);
        let def = GetKey {
            table: TASKS,
            pk: task_id.to_string(),
            sk: SK_DEF.to_string(),
            consistent: false,
        };
        let mut got = self.store.get_each(&[worker, def]).await?.into_iter();
        let read = got.next().flatten().and_then(WorkerRead::of);
        let def = got
            .next()
            .flatten()
            .map(|i| self.remember_def(task_id, i.data));
        Ok((read, def))
    }

    /// Claims the run a wake-up carried, without reading the index; `None` when it carried
    /// none or its run is no longer claimable.
    async fn claim_hinted(
        &self,
        hint: Option<Hint>,
        key: WorkerKey<'_>,
        now: Ts,
        gate: &mut Gate,
    ) -> ApiResult<Option<Claim>> {
        let body = hint.as_deref().and_then(|h| self.hint_body(h));
        let Some((rec, version)) = body.and_then(decode_hint) else {
            return Ok(None);
        };
        let Some(run_id) = claimable(&rec, now) else {
            return Ok(None);
        };
        Ok(self
            .claim_seen(rec, version, run_id, key, now, gate)
            .await?
            .ok())
    }

    /// A wake-up's hint for a run made pending: the status item's data as just written and
    /// the version it was written at, behind a MAC under the queue's own credentials. The
    /// claimant writes the record it carries back to the table, so a message that anyone
    /// with access to the broker could publish must not be taken on trust.
    pub(crate) fn pending_hint(&self, rec: &TaskRecord, version: u64) -> Option<Hint> {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            v: u64,
            d: &'a TaskRecord,
        }
        let body = serde_json::to_vec(&Out { v: version, d: rec }).ok()?;
        if body.len() > MAX_HINT_BYTES {
            return None;
        }
        use hmac::Mac;
        let mut hint = self.hint_mac(&body).finalize().into_bytes().to_vec();
        hint.extend_from_slice(&body);
        Some(Hint::from(hint))
    }

    /// The body of a hint this deployment signed; `None` for any other.
    fn hint_body<'a>(&self, hint: &'a [u8]) -> Option<&'a [u8]> {
        use hmac::Mac;
        let (mac, body) = hint.split_at_checked(HINT_MAC_BYTES)?;
        self.hint_mac(body).verify_slice(mac).ok()?;
        Some(body)
    }

    fn hint_mac(&self, body: &[u8]) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac;
        let mut m = crate::mac::keyed(self.issuer.token.cached().as_bytes(), b"claim-work hint\n");
        m.update(body);
        m
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
    ) -> ApiResult<Result<TaskRecord, Missed>> {
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
                return Ok(Err(Missed::of(&rec, run_id, now)));
            }
            let task_id = rec.task_id.clone();
            if rec.claim(run_id, worker_group, worker_id, now, taken_until)?
                != ClaimOutcome::Claimed
            {
                return Ok(Err(Missed::Lost));
            }
            match self.save(&rec, version).await? {
                Ok(()) => {
                    return Ok(Ok(rec));
                }
                Err(e) if e.is_condition_failed() => match self.load(&task_id).await? {
                    // Stale index entry or a concurrent change: look again at the real item.
                    Some((fresh, v)) => {
                        rec = fresh;
                        version = v;
                    }
                    None => return Ok(Err(Missed::Stale)),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Err(Missed::Lost))
    }

    /// claimWork: long-polls until at least one run is claimed or the timeout passes. With
    /// [`QueueConfig::claim_work_slots`] set, a call that finds no work and no free wait slot
    /// answers at once (empty) instead of waiting.
    ///
    /// [`QueueConfig::claim_work_slots`]: super::QueueConfig::claim_work_slots
    pub async fn claim_work(
        &self,
        q: &TaskQueueId,
        worker_group: &str,
        worker_id: &str,
        count: usize,
        clock: &(dyn Fn() -> Ts + Send + Sync),
    ) -> ApiResult<Vec<Claim>> {
        let key = (q.as_str(), worker_group, worker_id);
        let worker = Some((worker_group, worker_id));
        let wait = Duration::from_millis(self.cfg.claim_work_timeout_ms.max(0) as u64);
        let until = Instant::now() + wait;
        let mut slot = None;
        let mut gate = Gate::default();
        // What earlier claims left to record goes out first, so that no claim's answer waits
        // for a metadata write, and before the worker's record is read: the read then sees
        // that write, and the write of the runs this call holds can start from it.
        self.flush_seen(clock(), Flush::Due).await;
        let out = self
            .wait_for_work(q, key, count, clock, until, &mut slot, &mut gate)
            .await;
        if let Some((n, version)) = slot {
            // A slot left behind (an error here, a killed process) frees itself at `until`.
            if let Err(e) = self.store.write(wait_slot::give_back(n, version)).await {
                tracing::warn!(error = %e, slot = n, "claimWork could not give its wait slot back");
            }
        }
        let read = match gate.read {
            None => None,
            Some((true, read)) => {
                // Seen, but given nothing, and only after the whole wait: a quarantined
                // worker must not spin.
                self.record_seen(q.as_str(), worker, &[], Some(read), clock(), false)
                    .await;
                tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
                return Ok(vec![]);
            }
            Some((false, read)) => Some(read),
        };
        if let Ok(claims) = &out {
            let runs: Vec<TaskRun> = claims.iter().map(Claim::task_run).collect();
            let defer = !runs.is_empty();
            self.record_seen(q.as_str(), worker, &runs, read, clock(), defer)
                .await;
        }
        out
    }

    /// claimWork's passes and waits until `until`. Nothing is claimed once `gate` shows the
    /// worker quarantined; before it first waits, the call reads the worker's record if no
    /// candidate made it do so.
    #[allow(clippy::too_many_arguments)]
    async fn wait_for_work(
        &self,
        q: &TaskQueueId,
        key: WorkerKey<'_>,
        count: usize,
        clock: &(dyn Fn() -> Ts + Send + Sync),
        until: Instant,
        slot: &mut Option<(u32, u64)>,
        gate: &mut Gate,
    ) -> ApiResult<Vec<Claim>> {
        let mut empty_reads = 0;
        // Registered before the first read: a run made pending meanwhile wakes this call.
        let mut waiter = self.signal.waiter(q.as_str());
        loop {
            // The run a wake-up carried first: when it is still pending, one conditional
            // write claims it, without a read of the index.
            let mut claims = Vec::new();
            if let Some(claim) = self
                .claim_hinted(waiter.take_hint(), key, clock(), gate)
                .await?
            {
                claims.push(claim);
                if count == 1 {
                    return Ok(claims);
                }
            }
            let ClaimPass { claims: read, lost } = self
                .claim_pass(q, key, count - claims.len(), clock(), gate)
                .await?;
            claims.extend(read);
            waiter.note_read();
            let left = until.saturating_duration_since(Instant::now());
            if !claims.is_empty() || left.is_zero() || gate.quarantined() {
                // A wake-up that came for a run this read claimed is used up, not handed on.
                waiter.used_up(|hint| {
                    self.hint_body(hint)
                        .and_then(hint_task_id)
                        .is_some_and(|t| claims.iter().any(|c| c.record.task_id == t))
                });
                return Ok(claims);
            }
            if lost > 0 {
                // Others won this pass but work remains: look again after a short jitter.
                tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 10)).await;
                continue;
            }
            if !gate.is_read() {
                // Read once before waiting, so that a wake-up's claim needs no second read.
                let (quarantined, read) = self.quarantined(key, clock()).await?;
                gate.set(quarantined, read);
                if quarantined {
                    return Ok(vec![]);
                }
            }
            if empty_reads == 0 {
                if let Some(slots) = self.cfg.claim_work_slots {
                    let now = clock();
                    let held_until = now.plus(self.cfg.claim_work_timeout_ms + SLOT_MARGIN_MS);
                    match self.take_wait_slot(slots, now, held_until).await {
                        Ok(Some(s)) => *slot = Some(s),
                        Ok(None) => return Ok(claims),
                        // Unlimited rather than refused while the table cannot say.
                        Err(e) => tracing::warn!(error = %e, "claimWork waits without a slot"),
                    }
                }
            }
            // Work created by another process shows only in the index (or through a
            // wake-up that crosses processes), so it is re-read on a schedule; a signal cuts
            // the wait short. A scheduled re-read that another waiter of this queue here
            // has just made is skipped: the waiters of one queue share one schedule's reads.
            loop {
                empty_reads += 1;
                let schedule = if waiter.crosses_processes() {
                    &self.cfg.claim_work_poll_woken
                } else {
                    &self.cfg.claim_work_poll
                };
                let left = until.saturating_duration_since(Instant::now());
                let next = schedule.interval(empty_reads, rand::random::<f64>());
                let woken = waiter.wait(left.min(next)).await;
                if woken || !waiter.other_read_within(schedule.base(empty_reads)) {
                    break;
                }
                if Instant::now() >= until {
                    // The wait's last read, too, is one another waiter has just made.
                    return Ok(vec![]);
                }
            }
        }
    }

    /// Takes one of `slots` wait slots until `until`: probes every slot of a small set, else
    /// [`SLOT_PROBES`] random ones. `None` when all the probed slots are held, which happens
    /// more often the fuller the slots are.
    async fn take_wait_slot(
        &self,
        slots: u32,
        now: Ts,
        until: Ts,
    ) -> Result<Option<(u32, u64)>, StoreError> {
        let slots = slots.max(1);
        let start = rand::random::<u32>() % slots;
        let small = slots <= 2 * SLOT_PROBES;
        let probes = if small { slots } else { SLOT_PROBES };
        for i in 0..probes {
            let n = if small {
                (start + i) % slots
            } else {
                rand::random::<u32>() % slots
            };
            let stale = match self.store.write(wait_slot::take(n, until, None)).await {
                Ok(v) => return Ok(Some((n, v))),
                Err(e) if e.is_condition_failed() => {
                    match self
                        .store
                        .get(wait_slot::TABLE, &wait_slot::pk(n), wait_slot::SK)
                        .await?
                    {
                        Some(item) if wait_slot::held_until(&item) <= now => Some(item.version),
                        Some(_) => continue,
                        None => None, // given back meanwhile
                    }
                }
                Err(e) => return Err(e),
            };
            match self.store.write(wait_slot::take(n, until, stale)).await {
                Ok(v) => return Ok(Some((n, v))),
                Err(e) if e.is_condition_failed() => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// The run of `rec` a claim would take at `now`: its last, if pending and before the
/// deadline (past it, the deadline reaper resolves it).
fn claimable(rec: &TaskRecord, now: Ts) -> Option<u32> {
    let run = rec.runs.last().filter(|r| r.state == RunState::Pending)?;
    (rec.deadline > now).then_some(run.run_id)
}

/// The largest hint a wake-up carries; a larger status item wakes without one (its waiter
/// reads the index).
const MAX_HINT_BYTES: usize = 32 * 1024;
/// A hint's MAC (HMAC-SHA256), ahead of its body.
const HINT_MAC_BYTES: usize = 32;

/// The taskId of the run a hint carries.
fn hint_task_id(hint: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Task {
        #[serde(rename = "taskId")]
        task_id: String,
    }
    #[derive(serde::Deserialize)]
    struct In {
        d: Task,
    }
    crate::json::from_bytes::<In>(hint)
        .ok()
        .map(|i| i.d.task_id)
}

/// The record and version a hint carries; `None` for one this build cannot read.
fn decode_hint(hint: &[u8]) -> Option<(TaskRecord, u64)> {
    #[derive(serde::Deserialize)]
    struct In {
        v: u64,
        d: TaskRecord,
    }
    let In { v, d } = crate::json::from_bytes(hint).ok()?;
    Some((d, v))
}

/// Random wait slots a claimWork probes (when there are more than twice as many).
const SLOT_PROBES: u32 = 3;
/// How long past its wait a slot stays held if its holder never gives it back.
const SLOT_MARGIN_MS: i64 = 10_000;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::IssuerCredentials;
    use crate::signal::LocalSignal;
    use crate::store::sqlite::SqliteStore;
    use std::sync::Arc;

    fn queue(dir: &tempfile::TempDir, token: &str) -> Queue {
        Queue::new(
            Arc::new(SqliteStore::open(&dir.path().join("q.db")).expect("SQLite")),
            Arc::new(LocalSignal::default()),
            IssuerCredentials {
                client_id: "static/q".into(),
                access_token: token.into(),
            },
            super::super::QueueConfig::default(),
        )
    }

    /// With the pending index a second behind (as a GSI may be), a worker claiming one task
    /// after another still gets them oldest first: the entry of the run it just claimed is
    /// stale, not a race lost, so nothing is spread out and the long poll does not spin.
    #[tokio::test]
    async fn stale_entries_of_claimed_runs_keep_the_order_and_are_not_races() {
        use crate::store::index_lag::IndexLag;
        let dir = tempfile::tempdir().expect("temp dir");
        let inner = SqliteStore::open(&dir.path().join("q.db")).expect("SQLite");
        let lag = std::time::Duration::from_millis(400);
        let store = IndexLag::new(inner, lag, &crate::store::declared_indexes())
            .await
            .expect("lagging store");
        let q = Queue::new(
            Arc::new(store),
            Arc::new(LocalSignal::default()),
            IssuerCredentials {
                client_id: "static/q".into(),
                access_token: "t".into(),
            },
            super::super::QueueConfig::default(),
        );
        let tq = TaskQueueId::parse("p/w").expect("task queue");
        let mut ids = vec![];
        for i in 0..6 {
            let now = Ts::now();
            let mut body = json!({"taskQueueId": "p/w", "created": now,
                "deadline": now.plus(3_600_000), "payload": {}, "metadata": {"name": "n",
                "description": "d", "owner": "o@example.com", "source": "https://example.com/"}});
            crate::schema::validate_input("create-task-request", &mut body).expect("valid");
            let id = TaskId::parse(&crate::ids::new_slugid()).expect("id");
            q.create_task(&id, body, false, now.plus(i))
                .await
                .expect("createTask");
            ids.push(id.as_str().to_string());
        }
        tokio::time::sleep(lag).await;
        // Each pass a millisecond or more after the last claim, as separate calls are: a claim
        // made in the same millisecond cannot be told from a race (`Missed::of`).
        let mut last = Ts(0);
        for id in &ids {
            let now = Ts::now().max(last.plus(1));
            last = now;
            let pass = q
                .try_claim_work(&tq, "g", "w", 1, now)
                .await
                .expect("claim");
            assert_eq!(pass.claims.len(), 1);
            assert_eq!(pass.claims[0].record.task_id, *id, "oldest first");
            assert_eq!(pass.lost, 0, "stale entries are no lost races");
        }
    }

    /// A hint is taken only as this deployment signed it: a changed byte, or one signed
    /// under other credentials (anyone else who can publish to the broker), is ignored and
    /// the waiter reads the index.
    #[test]
    fn only_hints_this_deployment_signed_are_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (q, other) = (queue(&dir, "secret"), queue(&dir, "another"));
        let t = "2026-01-02T03:04:05.000Z";
        let rec: TaskRecord = serde_json::from_value(json!({"taskId": "t", "taskQueueId": "p/w",
            "schedulerId": "s", "projectId": "none", "taskGroupId": "g", "priority": "lowest",
            "deadline": t, "expires": t, "retries": 5, "retriesLeft": 5, "runs": [{"runId": 0,
            "state": "pending", "reasonCreated": "scheduled", "scheduled": t}], "routes": [],
            "tags": {}}))
        .expect("a record");
        let hint = q.pending_hint(&rec, 7).expect("a hint");
        let (read, version) = q.hint_body(&hint).and_then(decode_hint).expect("read back");
        assert_eq!((read.task_id.as_str(), version), ("t", 7));
        assert_eq!(
            q.hint_body(&hint).and_then(hint_task_id).as_deref(),
            Some("t")
        );
        assert!(other.hint_body(&hint).is_none(), "another key");
        let mut changed = hint.to_vec();
        if let Some(b) = changed.last_mut() {
            *b ^= 1;
        }
        assert!(q.hint_body(&changed).is_none(), "a changed byte");
        assert!(q.hint_body(b"short").is_none());
    }
}
