//! The queue on eventually consistent reads that lag: DynamoDB serves them current within a
//! second or so, DynamoDB Local always current, so neither shows what happens when one is
//! stale. Here every eventual read returns the item as it was before its last write (absent
//! if that write created it), the most a reader can lag behind a single writer, and the
//! queue must still end every step as it would on strong reads.

use super::{Queue, QueueConfig};
use crate::creds::IssuerCredentials;
use crate::ids::{TaskId, TaskQueueId};
use crate::records::group::{SK_UNRESOLVED_PREFIX, TASK_GROUPS};
use crate::records::task::{ReasonResolved, RunState, TaskRecord, SK_DEF, SK_STATUS, TASKS};
use crate::routing::Exchange;
use crate::signal::LocalSignal;
use crate::store::sqlite::SqliteStore;
use crate::store::{
    Cond, Cursor, IndexKey, Item, KeyPage, Page, SkRange, Store, StoreError, WriteOp,
};
use crate::time::{Budget, Ts};
use async_trait::async_trait;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

type Key = (&'static str, String, String);

/// SQLite whose eventual reads return each item as it was before its last write.
struct Lagging {
    inner: SqliteStore,
    before: Mutex<HashMap<Key, Option<Item>>>,
    /// Eventual reads answered with an older state than the stored one.
    stale: AtomicUsize,
}

impl Lagging {
    fn key(op: &WriteOp) -> Option<Key> {
        let (t, pk, sk) = op.key();
        (!matches!(op, WriteOp::Check { .. })).then(|| (t, pk.to_string(), sk.to_string()))
    }

    async fn snapshot(&self, ops: &[WriteOp]) -> Vec<(Key, Option<Item>)> {
        let mut out = vec![];
        for key in ops.iter().filter_map(Self::key) {
            let old = self.inner.get(key.0, &key.1, &key.2).await.unwrap();
            out.push((key, old));
        }
        out
    }

    fn remember(&self, snaps: Vec<(Key, Option<Item>)>) {
        self.before.lock().unwrap().extend(snaps);
    }

    /// The lagging state of `item`'s key, if it was written here.
    fn lagged(&self, table: &'static str, pk: &str, sk: &str) -> Option<Option<Item>> {
        let key = (table, pk.to_string(), sk.to_string());
        let old = self.before.lock().unwrap().get(&key).cloned()?;
        self.stale.fetch_add(1, Ordering::Relaxed);
        Some(old)
    }
}

#[async_trait]
impl Store for Lagging {
    async fn get(&self, t: &'static str, pk: &str, sk: &str) -> Result<Option<Item>, StoreError> {
        self.inner.get(t, pk, sk).await
    }

    async fn get_eventual(
        &self,
        t: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        match self.lagged(t, pk, sk) {
            Some(old) => Ok(old),
            None => self.inner.get(t, pk, sk).await,
        }
    }

    async fn query(
        &self,
        t: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner.query(t, pk, range, after, limit).await
    }

    async fn query_eventual(
        &self,
        t: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let mut page = self.inner.query(t, pk, range, after, limit).await?;
        page.items = std::mem::take(&mut page.items)
            .into_iter()
            .filter_map(|i| match self.lagged(t, &i.pk, &i.sk) {
                Some(old) => old,
                None => Some(i),
            })
            .collect();
        Ok(page)
    }

    async fn scan_index_keys(
        &self,
        t: &'static str,
        index: &'static str,
        after: Option<&IndexKey>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.inner.scan_index_keys(t, index, after, limit).await
    }

    async fn query_index(
        &self,
        t: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner
            .query_index(t, index, pk, range, after, limit)
            .await
    }

    async fn count_index(
        &self,
        t: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
    ) -> Result<u64, StoreError> {
        self.inner.count_index(t, index, pk, range).await
    }

    async fn write(&self, op: WriteOp) -> Result<u64, StoreError> {
        let snaps = self.snapshot(std::slice::from_ref(&op)).await;
        let v = self.inner.write(op).await?;
        self.remember(snaps);
        Ok(v)
    }

    async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let snaps = self.snapshot(&ops).await;
        self.inner.transact(ops).await?;
        self.remember(snaps);
        Ok(())
    }
}

/// More time than a test's resolutions need.
fn ample() -> Budget {
    Budget::of(std::time::Duration::from_secs(60))
}

async fn setup() -> (tempfile::TempDir, Arc<Lagging>, Queue) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Lagging {
        inner: SqliteStore::open(&dir.path().join("q.db")).unwrap(),
        before: Default::default(),
        stale: AtomicUsize::new(0),
    });
    let queue = Queue::new(
        store.clone(),
        Arc::new(LocalSignal::default()),
        IssuerCredentials {
            client_id: "static/q".into(),
            access_token: "t".into(),
        },
        QueueConfig::default(),
    );
    (dir, store, queue)
}

fn def(group: &str, now: Ts) -> serde_json::Value {
    let mut body = json!({
        "taskQueueId": "prov/stale",
        "taskGroupId": group,
        "created": now,
        "deadline": now.plus(3_600_000),
        "payload": {},
        "metadata": {
            "name": "stale reads",
            "description": "lagging eventual reads",
            "owner": "tests@example.com",
            "source": "https://example.com/tests"
        }
    });
    crate::schema::validate_input("create-task-request", &mut body).unwrap();
    body
}

/// The status record as the stream carries it after the task's last write.
async fn image(store: &Lagging, id: &TaskId) -> (TaskRecord, u64) {
    let item = store
        .get(TASKS, id.as_str(), SK_STATUS)
        .await
        .unwrap()
        .unwrap();
    (item.data.decode().unwrap(), item.version)
}

/// The group's unresolved count, summed over its shares.
async fn unresolved(store: &Lagging, group: &str) -> u64 {
    let range = SkRange {
        prefix: Some(SK_UNRESOLVED_PREFIX.to_string()),
        ..Default::default()
    };
    let page = store.query(TASK_GROUPS, group, &range, None, 100);
    let items = page.await.unwrap().items;
    items
        .iter()
        .map(|i| i.data["count"].as_u64().unwrap())
        .sum()
}

fn announced(rec: &TaskRecord) -> usize {
    let groups = rec
        .outbox
        .iter()
        .filter(|e| e.exchange == Exchange::TaskGroupResolved.name());
    groups.count()
}

/// Claims the next task and completes it; returns its id and record.
async fn claim_and_complete(queue: &Queue, now: Ts) -> (TaskId, TaskRecord) {
    let tq = TaskQueueId::parse("prov/stale").unwrap();
    let pass = queue.try_claim_work(&tq, "g", "w", 1, now).await.unwrap();
    assert_eq!(pass.claims.len(), 1, "a pending task is claimed");
    let claim = &pass.claims[0];
    assert_eq!(claim.task["payload"], json!({}), "with its definition");
    let id = TaskId::parse(&claim.record.task_id).unwrap();
    // The lagging read shows the run still pending: completing it must not be refused.
    let rec = queue.resolve(&id, 0, ReasonResolved::Completed, now).await;
    let rec = rec.unwrap();
    assert_eq!(rec.runs[0].state, RunState::Completed);
    (id, rec)
}

#[tokio::test]
async fn every_step_ends_as_on_strong_reads_when_eventual_reads_lag() {
    let (_dir, store, queue) = setup().await;
    let now = Ts::now();
    let group = crate::ids::new_slugid();
    for _ in 0..2 {
        let id = TaskId::parse(&crate::ids::new_slugid()).unwrap();
        // The second sees the group item and its count share as they were before the
        // first created them.
        let rec = queue.create_task(&id, def(&group, now), false, now).await;
        assert_eq!(rec.unwrap().runs[0].state, RunState::Pending);
    }
    assert_eq!(
        unresolved(&store, &group).await,
        2,
        "each task counted once"
    );
    assert!(
        store.stale.load(Ordering::Relaxed) > 0,
        "stale reads were served"
    );

    let (first, _) = claim_and_complete(&queue, now).await;
    let resolution = image(&store, &first).await;
    queue
        .resolve_dependents_of(resolution.clone(), now, &ample())
        .await
        .unwrap();
    assert_eq!(unresolved(&store, &group).await, 1);
    // The same record again (a retried stream batch): its mark is gone, nothing is counted.
    queue
        .resolve_dependents_of(resolution, now, &ample())
        .await
        .unwrap();
    assert_eq!(unresolved(&store, &group).await, 1, "not taken off twice");

    let (last, rec) = claim_and_complete(&queue, now).await;
    assert_ne!(first, last);
    assert_eq!(announced(&rec), 0, "the last task is still counted");
    let resolution = image(&store, &last).await;
    queue
        .resolve_dependents_of(resolution, now, &ample())
        .await
        .unwrap();
    assert_eq!(unresolved(&store, &group).await, 0);
    let (rec, _) = queue.load(last.as_str()).await.unwrap().unwrap();
    assert_eq!(
        announced(&rec),
        1,
        "the group resolved once, with its last task"
    );
    assert_eq!(rec.dependents_due, None, "the resolution was handled");
}

#[tokio::test]
async fn reapers_pass_over_a_task_deleted_after_its_index_entry_was_read() {
    // A deadline (or claim) index entry read before the expiry job deleted its task, or from
    // a DynamoDB index not yet caught up with the deletion: the reaper has nothing to do, and
    // must not fail the pass that every other due task is in.
    let (_dir, store, queue) = setup().await;
    let now = Ts::now();
    let id = TaskId::parse(&crate::ids::new_slugid()).unwrap();
    queue
        .create_task(&id, def(&crate::ids::new_slugid(), now), false, now)
        .await
        .unwrap();
    for sk in [SK_STATUS, SK_DEF] {
        let (table, pk, sk) = (TASKS, id.to_string(), sk.to_string());
        let cond = Cond::None;
        store
            .write(WriteOp::Delete {
                table,
                pk,
                sk,
                cond,
            })
            .await
            .unwrap();
    }
    let later = now.plus(7_200_000);
    assert!(!queue.reap_deadline(id.as_str(), later).await.unwrap());
    assert!(!queue.reap_claim(id.as_str(), 0, now, later).await.unwrap());
}
