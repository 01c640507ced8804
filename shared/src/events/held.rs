//! Events held for the sweeper. Where a table's stream delivers a record's events (each write
//! stores only its own, which its stream record carries), the events of a stream record that
//! could not be published are written aside, one item per stream record, keyed by the
//! record's partition key and version, so that they no longer depend on the stream's retries
//! nor on its 24-hour retention.
//!
//! Order per record holds because only the stream writes them, in the stream's own order
//! (one record's changes are handled in order, one batch at a time): the events of a later
//! stream record of a record that has any held wait behind them, held too, and the sweeper
//! publishes a record's held events in version order before removing them.
//!
//! Knowing whether a record has events held needs a read. So that the stream pays it only
//! while something is held, a holder sets the table's marker after writing what it holds,
//! and the stream reads the marker once per batch (strongly consistent). The sweeper clears
//! the marker only after a pass found nothing held, conditioned on the marker's version read
//! before that pass: a hold that began meanwhile changed it.

use super::drain::{checked_events, DrainError, RecentIds, Waiting};
use super::EventSink;
use crate::records::outbox::{OutboxEvent, Outboxed};
use crate::store::shard::{shard_of, SHARDS};
use crate::store::{Cond, Data, Item, SkRange, Store, StoreError, WriteOp};
use crate::time::Ts;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The marker's partition key: no record's (records are keyed by slugids, which have no `~`).
const MARKER_PK: &str = "~held";
/// The marker's sort key.
const MARKER_SK: &str = "marker";

/// The partition of one shard's held events (a key no record has, as [`MARKER_PK`]).
fn held_pk(shard: u32) -> String {
    format!("~held/{shard}")
}

/// Sort key of a record's held events: by record, then by version (zero-padded, so that the
/// key order is the version order).
fn held_sk(pk: &str, version: u64) -> String {
    format!("{pk}/{version:020}")
}

/// The events of one stream record, held.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Held {
    /// The record's partition key.
    pk: String,
    /// The version its stream record showed.
    version: u64,
    /// When publishing them first failed.
    since: Ts,
    /// Its events, in order.
    events: Vec<OutboxEvent>,
}

/// The marker's version if it is set (events may be held in `table`).
async fn marked(store: &dyn Store, table: &'static str) -> Result<Option<u64>, StoreError> {
    let item = store.get(table, MARKER_PK, MARKER_SK).await?;
    Ok(item
        .filter(|i| i.data.get("set").and_then(|v| v.as_bool()) == Some(true))
        .map(|i| i.version))
}

async fn set_marker(
    store: &dyn Store,
    table: &'static str,
    set: bool,
    cond: Cond,
) -> Result<(), StoreError> {
    let item = Item::new(
        MARKER_PK,
        MARKER_SK,
        serde_json::json!({ "set": set }),
        vec![],
    );
    store
        .write(WriteOp::Put { table, item, cond })
        .await
        .map(|_| ())
}

/// Which of the records `pks` of `R` have events held (none without a read while the marker
/// is clear).
pub(crate) async fn holding<'a, R: Outboxed>(
    store: &dyn Store,
    pks: impl IntoIterator<Item = &'a str>,
) -> Result<HashSet<String>, StoreError> {
    if marked(store, R::TABLE).await?.is_none() {
        return Ok(HashSet::new());
    }
    let pks: HashSet<&str> = pks.into_iter().collect();
    let reads = pks.into_iter().map(|pk| async move {
        let range = SkRange {
            prefix: Some(format!("{pk}/")),
            upto: None,
        };
        let page = store
            .query(R::TABLE, &held_pk(shard_of(pk)), &range, None, 1)
            .await?;
        Ok::<_, StoreError>((!page.items.is_empty()).then(|| pk.to_string()))
    });
    let found = futures_util::future::try_join_all(reads).await?;
    Ok(found.into_iter().flatten().collect())
}

/// The events of one stream record: the record's partition key, the version it showed, and
/// the events of that write.
#[derive(Debug, Clone)]
pub(crate) struct Image {
    /// The record's partition key.
    pub pk: String,
    /// The version its stream record showed.
    pub version: u64,
    /// The write's events.
    pub outbox: Vec<OutboxEvent>,
}

#[cfg(test)]
impl Image {
    /// `rec`'s events at `version`.
    pub(crate) fn of<R: Outboxed>(rec: &R, version: u64) -> Image {
        Image {
            pk: rec.pk().to_string(),
            version,
            outbox: rec.outbox().to_vec(),
        }
    }
}

/// Holds the events of stream records of `R` as waiting since `since`, then sets the marker.
/// Holding one again keeps it as it was (a retried batch).
pub(crate) async fn hold<R: Outboxed>(
    store: &dyn Store,
    images: &[Image],
    since: Ts,
) -> Result<(), StoreError> {
    if images.is_empty() {
        return Ok(());
    }
    let puts = images.iter().map(|image| async move {
        let held = Held {
            pk: image.pk.clone(),
            version: image.version,
            since,
            events: image.outbox.clone(),
        };
        let data = Data::encode(&held).map_err(|e| StoreError::Other(e.to_string()))?;
        let item = Item::new(
            held_pk(shard_of(&image.pk)),
            held_sk(&image.pk, image.version),
            data,
            vec![],
        );
        let op = WriteOp::Put {
            table: R::TABLE,
            item,
            cond: Cond::NotExists,
        };
        match store.write(op).await {
            Err(e) if !e.is_condition_failed() => Err(e),
            _ => Ok(()),
        }
    });
    futures_util::future::try_join_all(puts).await?;
    // After what it marks: a sweeper that saw the marker before this found those too.
    set_marker(store, R::TABLE, true, Cond::None).await
}

/// What one pass over the held events of `R` did.
pub struct HeldPass {
    /// Events published.
    pub delivered: usize,
    /// True if a shard may hold more than the pass read.
    pub more: bool,
}

/// Passes over the held events of `R` (up to `batch` stream records per shard): publishes
/// each shard's in order, then removes them. Nothing is read but the marker while it is
/// clear. A pass that delivered all it found is followed by one more, so that the marker is
/// cleared as soon as nothing is held. Once publishing fails, the rest of the pass only notes
/// in `waiting` since when the oldest waits.
pub async fn drain_held<R: Outboxed>(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    batch: usize,
    published: &RecentIds,
    waiting: &Waiting,
) -> Result<HeldPass, DrainError> {
    let mut out = HeldPass {
        delivered: 0,
        more: false,
    };
    for _ in 0..2 {
        let Some(marker) = marked(store, R::TABLE).await? else {
            break;
        };
        let mut found = 0;
        let mut failed = None;
        for shard in 0..SHARDS {
            let page = store
                .query(R::TABLE, &held_pk(shard), &SkRange::default(), None, batch)
                .await?;
            found += page.items.len();
            out.more |= page.next.is_some() || page.items.len() >= batch;
            let mut held = Vec::with_capacity(page.items.len());
            for item in &page.items {
                let h: Held = item
                    .data
                    .decode()
                    .map_err(|e| StoreError::Other(e.to_string()))?;
                held.push(h);
            }
            if failed.is_none() {
                match deliver::<R>(store, sink, prefix, &page.items, &held, published).await {
                    Ok(n) => {
                        out.delivered += n;
                        continue;
                    }
                    Err(DrainError::Sink(e)) => failed = Some(DrainError::Sink(e)),
                    Err(e) => return Err(e),
                }
            }
            if let (Some(since), Ok(mut oldest)) =
                (held.iter().map(|h| h.since).min(), waiting.oldest.lock())
            {
                *oldest = Some(oldest.map_or(since, |t| t.min(since)));
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if found == 0 {
            match set_marker(store, R::TABLE, false, Cond::Version(marker)).await {
                Err(e) if !e.is_condition_failed() => return Err(e.into()),
                _ => {}
            }
            break;
        }
        if out.more {
            break;
        }
    }
    Ok(out)
}

/// Publishes the events of one shard's `held` (read as `items`), in order, then removes them;
/// returns how many went out.
async fn deliver<R: Outboxed>(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    items: &[Item],
    held: &[Held],
    published: &RecentIds,
) -> Result<usize, DrainError> {
    let mut events = vec![];
    for h in held {
        events.extend(checked_events(store, R::TABLE, prefix, &h.pk, &h.events, published).await?);
    }
    if !events.is_empty() {
        sink.publish(&events).await?;
        published.extend(
            held.iter()
                .flat_map(|h| h.events.iter().map(|e| e.id.as_str())),
        );
    }
    let removals = items.iter().map(|item| {
        store.write(WriteOp::Delete {
            table: R::TABLE,
            pk: item.pk.clone(),
            sk: item.sk.clone(),
            cond: Cond::None,
        })
    });
    futures_util::future::try_join_all(removals).await?;
    Ok(events.len())
}

/// The records of `R` with events held (at most `limit`), by partition key: for tests and
/// operators.
pub async fn held_records<R: Outboxed>(
    store: &dyn Store,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut out: Vec<String> = vec![];
    for shard in 0..SHARDS {
        let page = store
            .query(R::TABLE, &held_pk(shard), &SkRange::default(), None, limit)
            .await?;
        for item in page.items {
            if let Some(pk) = item.data.get("pk").and_then(|v| v.as_str()) {
                if !out.iter().any(|p| p == pk) {
                    out.push(pk.to_string());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RecordingSink;
    use crate::records::task::{TaskRecord, TASKS};
    use crate::store::sqlite::SqliteStore;
    use crate::store::{Cursor, IndexKey, KeyPage, Page};
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// SQLite where a stream publisher holds `late`'s events while the sweeper's second pass
    /// reads the last shard, after it read the shard they go to.
    struct HoldsMidPass {
        inner: SqliteStore,
        late: (crate::records::task::TaskRecord, u64),
        last_shard_reads: AtomicUsize,
    }

    #[async_trait]
    impl Store for HoldsMidPass {
        async fn get(
            &self,
            t: &'static str,
            pk: &str,
            sk: &str,
        ) -> Result<Option<Item>, StoreError> {
            self.inner.get(t, pk, sk).await
        }
        async fn query(
            &self,
            t: &'static str,
            pk: &str,
            range: &SkRange,
            after: Option<&Cursor>,
            limit: usize,
        ) -> Result<Page, StoreError> {
            if pk == held_pk(SHARDS - 1)
                && self.last_shard_reads.fetch_add(1, Ordering::SeqCst) == 1
            {
                let late = Image::of(&self.late.0, self.late.1);
                hold::<TaskRecord>(&self.inner, &[late], Ts(5)).await?;
            }
            self.inner.query(t, pk, range, after, limit).await
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
        async fn scan_index_keys(
            &self,
            t: &'static str,
            index: &'static str,
            after: Option<&IndexKey>,
            limit: usize,
        ) -> Result<KeyPage, StoreError> {
            self.inner.scan_index_keys(t, index, after, limit).await
        }
        async fn write(&self, op: WriteOp) -> Result<u64, StoreError> {
            self.inner.write(op).await
        }
        async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
            self.inner.transact(ops).await
        }
    }

    fn task_on_shard(shard: u32) -> crate::records::task::TaskRecord {
        loop {
            let id = crate::ids::new_slugid();
            if shard_of(&id) == shard {
                let mut rec: crate::records::task::TaskRecord =
                    serde_json::from_value(serde_json::json!({
                        "taskId": id, "taskQueueId": "p/w", "schedulerId": "-",
                        "projectId": "none", "taskGroupId": id, "priority": "lowest",
                        "deadline": Ts(100_000), "expires": Ts(1_000_000), "retries": 0,
                        "retriesLeft": 0, "runs": [], "routes": [], "tags": {},
                        "outbox": [], "unsatisfied": 0, "sweep": false,
                    }))
                    .expect("a task record");
                rec.start_first_run(Ts(0));
                rec.emit_created();
                return rec;
            }
        }
    }

    /// A hold that lands while the sweeper's pass finds nothing keeps the marker set: the
    /// pass's clear is conditioned on the marker it read before, so the stream keeps looking,
    /// and the late task's next events wait behind the held ones.
    #[tokio::test]
    async fn a_hold_during_an_empty_pass_keeps_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let early = task_on_shard(SHARDS - 1);
        let late = task_on_shard(0);
        let store = HoldsMidPass {
            inner: SqliteStore::open(&dir.path().join("db")).unwrap(),
            late: (late.clone(), 1),
            last_shard_reads: AtomicUsize::new(0),
        };
        hold::<TaskRecord>(&store.inner, &[Image::of(&early, 1)], Ts(1))
            .await
            .unwrap();
        let sink = RecordingSink::default();
        let (published, waiting) = (RecentIds::default(), Waiting::at(Ts(10)));
        let pass = drain_held::<crate::records::task::TaskRecord>(
            &store, &sink, "x/", 10, &published, &waiting,
        );
        assert_eq!(pass.await.unwrap().delivered, 2, "the early task's events");
        assert_eq!(
            store.last_shard_reads.load(Ordering::SeqCst),
            2,
            "two passes"
        );
        let marker = store.inner.get(TASKS, MARKER_PK, MARKER_SK).await.unwrap();
        assert_eq!(marker.map(|m| m.data["set"].clone()), Some(true.into()));
        let behind =
            holding::<crate::records::task::TaskRecord>(&store.inner, [late.task_id.as_str()]);
        assert!(behind.await.unwrap().contains(&late.task_id));
        // The next pass delivers the late task's events, and the one after clears the marker.
        let pass = drain_held::<crate::records::task::TaskRecord>(
            &store.inner,
            &sink,
            "x/",
            10,
            &published,
            &waiting,
        );
        assert_eq!(pass.await.unwrap().delivered, 2);
        assert!(marked(&store.inner, TASKS).await.unwrap().is_none());
    }
}
