//! Worker metadata: the task queues and the workers the queue has seen (as upstream's
//! `task_queues` and `queue_workers`), recorded as a side effect of claims.
//!
//! | table         | pk               | sk                       | what                          |
//! |---------------|------------------|--------------------------|-------------------------------|
//! | `task-groups` | `task-queues`    | taskQueueId              | a task queue seen             |
//! | `task-groups` | `workers#<tqid>` | `<workerGroup>/<workerId>` | a worker seen on that queue |
//!
//! `worker-expiry` (pk `worker-expiry#<shard>`, sk `<ms>:<pk>|<sk>`) holds both by the time
//! they may go: `expires`, or the end of a worker's quarantine if that is later, so that
//! a quarantined worker stays. `#` never occurs in a taskGroupId and no slugid is
//! `task-queues`, so these partitions never meet a group's. The table has no stream.
//!
//! Provisioners and worker types are not stored: they are read off the task queues.

use crate::ids::TaskQueueId;
use crate::store::shard::{shard_of, shard_pk, time_key};
use crate::store::{Data, IndexEntry, Item};
use crate::time::{Ts, DAY, HOUR};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use super::group::TASK_GROUPS as TABLE;

/// Partition of every task queue item.
pub const PK_TASK_QUEUES: &str = "task-queues";
/// Index of task queue and worker items by when they may be deleted.
pub const WORKER_EXPIRY: &str = "worker-expiry";
/// How many claimed runs a worker's `recentTasks` keeps.
pub const RECENT_TASKS: usize = 20;
/// A task queue seen expires this much later.
pub const TASK_QUEUE_LIFETIME_MS: i64 = 5 * DAY;
/// A worker seen expires this much later.
pub const WORKER_LIFETIME_MS: i64 = DAY;
/// When something seen at `now` with `lifetime` expires: rounded up to the hour, so that the
/// frequent writes of a worker (its claimed runs) leave its `worker-expiry` entry alone and
/// cost that index nothing; only about one write an hour moves it.
pub fn expiry_after(now: Ts, lifetime: i64) -> Ts {
    let t = now.plus(lifetime).millis();
    Ts(t + (HOUR - t.rem_euclid(HOUR)) % HOUR)
}

/// What a worker's `quarantineUntil` reads before it was ever quarantined, as upstream's
/// default: ten years before it was first seen.
const NEVER_QUARANTINED_MS: i64 = 10 * 365 * DAY;

/// Partition of the workers of a task queue.
pub fn pk_workers(task_queue_id: &str) -> String {
    format!("workers#{task_queue_id}")
}

/// Sort key of a worker in its queue's partition.
pub fn sk_worker(worker_group: &str, worker_id: &str) -> String {
    format!("{worker_group}/{worker_id}")
}

fn expiry_entry(pk: &str, sk: &str, at: Ts) -> IndexEntry {
    IndexEntry {
        index: WORKER_EXPIRY,
        pk: shard_pk(WORKER_EXPIRY, shard_of(sk)),
        sk: format!("{}:{pk}|{sk}", time_key(at)),
    }
}

/// A task queue seen by the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskQueueRecord {
    /// taskQueueId.
    pub task_queue_id: String,
    /// When it goes, unless seen again. Never moves backwards.
    pub expires: Ts,
    /// When it was last recorded as seen.
    pub last_date_active: Ts,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

impl TaskQueueRecord {
    /// Decodes a stored item.
    pub fn from_item(item: &Item) -> Option<Self> {
        item.data.decode().ok()
    }

    /// Decodes a stored item if the task queue lives at `now` (reads hide expired ones).
    pub fn live(item: &Item, now: Ts) -> Option<Self> {
        Self::from_item(item).filter(|r| r.expires > now)
    }

    /// The item to store.
    pub fn to_item(&self) -> Item {
        Item::new(
            PK_TASK_QUEUES,
            self.task_queue_id.clone(),
            Data::encode(self).unwrap_or_else(|_| json!({}).into()),
            vec![expiry_entry(
                PK_TASK_QUEUES,
                &self.task_queue_id,
                self.expires,
            )],
        )
    }

    /// Seen at `now`: a new record, or `old` with `expires` pushed out (never back).
    pub fn seen(old: Option<Self>, task_queue_id: &str, expires: Ts, now: Ts) -> Self {
        match old {
            Some(mut r) => {
                r.expires = r.expires.max(expires);
                r.last_date_active = now;
                r
            }
            None => TaskQueueRecord {
                unknown: Default::default(),
                task_queue_id: task_queue_id.to_string(),
                expires,
                last_date_active: now,
            },
        }
    }

    /// The `taskqueue-response` (and list entry) form.
    pub fn to_json(&self) -> Value {
        json!({
            "taskQueueId": self.task_queue_id,
            "expires": self.expires,
            "lastDateActive": self.last_date_active,
            "description": "",
            "stability": "experimental",
        })
    }

    /// The `workertype-response` form.
    pub fn worker_type_json(&self) -> Value {
        let mut v = self.to_json();
        if let (Ok(tq), Some(o)) = (TaskQueueId::parse(&self.task_queue_id), v.as_object_mut()) {
            o.insert("provisionerId".into(), json!(tq.provisioner_id()));
            o.insert("workerType".into(), json!(tq.worker_type()));
        }
        v
    }
}

/// One claimed run in a worker's `recentTasks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRun {
    /// taskId.
    pub task_id: String,
    /// runId.
    pub run_id: u32,
}

/// A worker seen by the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerRecord {
    /// The task queue it was seen on.
    pub task_queue_id: String,
    /// workerGroup.
    pub worker_group: String,
    /// workerId.
    pub worker_id: String,
    /// When it was first seen.
    pub first_claim: Ts,
    /// When it was last recorded as seen.
    pub last_date_active: Ts,
    /// When it goes, unless seen again or quarantined. Never moves backwards.
    pub expires: Ts,
    /// Until when it is quarantined (set once it ever was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_until: Option<Ts>,
    /// Every change of its quarantine: `{clientId, updatedAt, quarantineUntil, quarantineInfo}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantine_details: Vec<Value>,
    /// The last [`RECENT_TASKS`] runs it claimed, oldest first.
    #[serde(default)]
    pub recent_tasks: Vec<TaskRun>,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

/// What a claim reads of a worker's record: whether it is quarantined and when it was last
/// recorded. Decoding only these skips the rest (its `recentTasks` above all), which a claim
/// never uses: the whole record, with its unknown attributes kept, costs a warm claimWork
/// more than its quarantine check.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSighting {
    /// When it was last recorded as seen.
    pub last_date_active: Ts,
    /// Until when it is quarantined (set once it ever was).
    #[serde(default)]
    pub quarantine_until: Option<Ts>,
}

impl WorkerSighting {
    /// Decodes a stored worker item.
    pub fn from_item(item: &Item) -> Option<Self> {
        item.data.decode().ok()
    }

    /// True while quarantined at `now` (as [`WorkerRecord::quarantined`]).
    pub fn quarantined(&self, now: Ts) -> bool {
        self.quarantine_until.is_some_and(|q| q > now)
    }
}

impl WorkerRecord {
    /// Decodes a stored item.
    pub fn from_item(item: &Item) -> Option<Self> {
        item.data.decode().ok()
    }

    /// The item to store.
    pub fn to_item(&self) -> Item {
        let (pk, sk) = (
            pk_workers(&self.task_queue_id),
            sk_worker(&self.worker_group, &self.worker_id),
        );
        let until = self.expires.max(self.quarantine_until.unwrap_or(Ts(0)));
        let entry = expiry_entry(&pk, &sk, until);
        Item::new(
            pk,
            sk,
            Data::encode(self).unwrap_or_else(|_| json!({}).into()),
            vec![entry],
        )
    }

    /// Seen at `now`, having claimed `runs`: a new record, or `old` with `expires` pushed
    /// out (never back) and the runs appended to `recentTasks`.
    pub fn seen(
        old: Option<Self>,
        key: (&str, &str, &str),
        expires: Ts,
        runs: &[TaskRun],
        now: Ts,
    ) -> Self {
        let (task_queue_id, worker_group, worker_id) = key;
        let mut r = old.unwrap_or_else(|| WorkerRecord {
            unknown: Default::default(),
            task_queue_id: task_queue_id.to_string(),
            worker_group: worker_group.to_string(),
            worker_id: worker_id.to_string(),
            first_claim: now,
            last_date_active: now,
            expires,
            quarantine_until: None,
            quarantine_details: vec![],
            recent_tasks: vec![],
        });
        r.expires = r.expires.max(expires);
        r.last_date_active = now;
        r.recent_tasks.extend(runs.iter().cloned());
        let extra = r.recent_tasks.len().saturating_sub(RECENT_TASKS);
        r.recent_tasks.drain(..extra);
        r
    }

    /// True while quarantined at `now`.
    pub fn quarantined(&self, now: Ts) -> bool {
        self.sighting().quarantined(now)
    }

    /// What a claim reads of it.
    pub fn sighting(&self) -> WorkerSighting {
        WorkerSighting {
            last_date_active: self.last_date_active,
            quarantine_until: self.quarantine_until,
        }
    }

    /// True if reads at `now` no longer show it: expired and not quarantined.
    pub fn gone(&self, now: Ts) -> bool {
        self.expires <= now && !self.quarantined(now)
    }

    /// Quarantined until `until` by `client_id` at `now`, with `info` on why; its expiry moves
    /// to at least a day on, so that a worker let out of quarantine does not vanish at once.
    pub fn quarantine(&mut self, until: Ts, info: &str, client_id: &str, now: Ts) {
        self.quarantine_until = Some(until);
        self.expires = self.expires.max(expiry_after(now, WORKER_LIFETIME_MS));
        self.quarantine_details.push(json!({
            "clientId": client_id,
            "updatedAt": now,
            "quarantineUntil": until,
            "quarantineInfo": info,
        }));
    }

    fn quarantine_until_or_default(&self) -> Ts {
        self.quarantine_until
            .unwrap_or(self.first_claim.plus(-NEVER_QUARANTINED_MS))
    }

    /// The `worker-response` form.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "taskQueueId": self.task_queue_id,
            "workerGroup": self.worker_group,
            "workerId": self.worker_id,
            "recentTasks": self.recent_tasks,
            "expires": self.expires,
            "firstClaim": self.first_claim,
            "lastDateActive": self.last_date_active,
            "quarantineUntil": self.quarantine_until_or_default(),
        });
        if let (Ok(tq), Some(o)) = (TaskQueueId::parse(&self.task_queue_id), v.as_object_mut()) {
            o.insert("provisionerId".into(), json!(tq.provisioner_id()));
            o.insert("workerType".into(), json!(tq.worker_type()));
            if !self.quarantine_details.is_empty() {
                o.insert("quarantineDetails".into(), json!(self.quarantine_details));
            }
        }
        v
    }

    /// The `list-workers-response` entry form at `now`: `quarantineUntil` only while
    /// quarantined, `latestTask` once it claimed one.
    pub fn list_json(&self, now: Ts) -> Value {
        let mut v = json!({
            "workerGroup": self.worker_group,
            "workerId": self.worker_id,
            "firstClaim": self.first_claim,
            "lastDateActive": self.last_date_active,
        });
        if let Some(o) = v.as_object_mut() {
            if let Some(last) = self.recent_tasks.last() {
                o.insert("latestTask".into(), json!(last));
            }
            if let Some(q) = self.quarantine_until.filter(|q| *q > now) {
                o.insert("quarantineUntil".into(), json!(q));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (&'static str, &'static str, &'static str) {
        ("prov/wt", "g", "w")
    }

    fn run(n: u32) -> TaskRun {
        TaskRun {
            task_id: format!("t{n}"),
            run_id: 0,
        }
    }

    #[test]
    fn recent_tasks_keep_the_last_twenty_in_claim_order() {
        let mut r = None;
        for n in 0..25 {
            r = Some(WorkerRecord::seen(
                r,
                key(),
                Ts(10),
                &[run(n)],
                Ts(n as i64),
            ));
        }
        let r = r.expect("record");
        assert_eq!(r.recent_tasks.len(), RECENT_TASKS);
        assert_eq!(r.recent_tasks[0], run(5));
        assert_eq!(r.recent_tasks[19], run(24));
        assert_eq!(r.first_claim, Ts(0));
        assert_eq!(r.last_date_active, Ts(24));
    }

    #[test]
    fn expiry_never_moves_back_and_quarantine_keeps_the_worker() {
        let r = WorkerRecord::seen(None, key(), Ts(1_000), &[], Ts(0));
        let mut r = WorkerRecord::seen(Some(r), key(), Ts(500), &[], Ts(1));
        assert_eq!(r.expires, Ts(1_000));
        assert!(r.gone(Ts(1_000)));
        r.quarantine(Ts(10 * DAY), "bad disk", "ops", Ts(2));
        assert!(!r.gone(Ts(2 * DAY)));
        assert!(r.quarantined(Ts(2 * DAY)));
        let e = &r.to_item().indexes[0];
        assert!(e.sk.starts_with(&time_key(Ts(10 * DAY))), "{}", e.sk);
        assert_eq!(
            r.to_json()["quarantineDetails"][0]["quarantineInfo"],
            "bad disk"
        );
        assert!(r.list_json(Ts(2)).get("quarantineUntil").is_some());
        assert!(r.list_json(Ts(11 * DAY)).get("quarantineUntil").is_none());
    }

    #[test]
    fn expiry_is_rounded_up_to_the_hour() {
        assert_eq!(expiry_after(Ts(1), DAY), Ts(DAY + HOUR));
        assert_eq!(expiry_after(Ts(HOUR), DAY), Ts(DAY + HOUR));
        assert_eq!(expiry_after(Ts(HOUR - 1), DAY), Ts(DAY + HOUR));
    }

    #[test]
    fn task_queues_expire_no_earlier_than_they_did() {
        let r = TaskQueueRecord::seen(None, "prov/wt", Ts(1_000), Ts(0));
        let r = TaskQueueRecord::seen(Some(r), "prov/wt", Ts(900), Ts(5));
        assert_eq!((r.expires, r.last_date_active), (Ts(1_000), Ts(5)));
        assert_eq!(r.worker_type_json()["workerType"], "wt");
    }
}
