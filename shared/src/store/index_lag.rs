//! A store whose secondary indexes lag: every index query (and count, and scan) answers as the
//! index stood `lag` ago, and so does every eventually consistent read of an item. DynamoDB's
//! global secondary indexes are updated asynchronously, usually within a second; SQLite and
//! DynamoDB Local update them in the same write, so neither shows a caller what it must
//! survive on AWS: a task created moments ago missing from `pending`, a claim already reaped
//! still listed under `claims`, an item deleted moments ago still found.
//!
//! It keeps, in the process, a copy of every index entry with the item as it was written, and
//! applies each write to that copy `lag` after it committed, in commit order. Writes through
//! it are serialized, so that the order is the store's. For one process over an embedded
//! store (the local server under `TCQ_INDEX_LAG_MS`, the black-box suite); never deployed.

use super::{
    Cursor, IndexEntry, IndexKey, Item, KeyPage, Page, SkRange, Store, StoreError, WriteOp,
};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An item's key: table, partition key, sort key.
type Key = (&'static str, String, String);
/// An index entry's place: table, index, index pk, index sk, item pk, item sk.
type Place = (&'static str, &'static str, String, String, String, String);

/// The indexes as they stood `lag` ago, and the writes not yet applied to them.
#[derive(Default)]
struct Lagged {
    /// Every visible entry, with the item as written.
    entries: BTreeMap<Place, Item>,
    /// The places of each item's visible entries.
    places: HashMap<Key, Vec<Place>>,
    /// Items as visible to eventually consistent reads, where a write is pending.
    before: HashMap<Key, Option<Item>>,
    /// Committed writes, oldest first: when they become visible, and the item after them
    /// (`None`: deleted), its index entries included.
    pending: VecDeque<(Instant, Key, Option<Item>)>,
}

impl Lagged {
    /// Applies every write committed at least `lag` before `now`.
    fn catch_up(&mut self, now: Instant) {
        while self.pending.front().is_some_and(|(due, _, _)| *due <= now) {
            let Some((_, key, item)) = self.pending.pop_front() else {
                break;
            };
            if self.pending.iter().any(|(_, k, _)| *k == key) {
                // Eventually consistent reads now see this write (a later one is pending).
                self.before.insert(key.clone(), item.clone());
            } else {
                self.before.remove(&key);
            }
            self.show(&key, item);
        }
    }

    /// Makes `item` the visible state of `key` in every index.
    fn show(&mut self, key: &Key, item: Option<Item>) {
        for place in self.places.remove(key).unwrap_or_default() {
            self.entries.remove(&place);
        }
        let Some(item) = item else { return };
        let places: Vec<Place> = item
            .indexes
            .iter()
            .map(|e| place(key.0, e, &item.pk, &item.sk))
            .collect();
        for p in &places {
            self.entries.insert(p.clone(), item.clone());
        }
        if !places.is_empty() {
            self.places.insert(key.clone(), places);
        }
    }
}

fn place(table: &'static str, e: &IndexEntry, pk: &str, sk: &str) -> Place {
    (
        table,
        e.index,
        e.pk.clone(),
        e.sk.clone(),
        pk.to_string(),
        sk.to_string(),
    )
}

/// `inner` with indexes (and eventually consistent reads) `lag` behind its writes.
pub struct IndexLag<S> {
    inner: S,
    lag: Duration,
    state: Mutex<Lagged>,
    /// Serializes writes, so that the items read back after each are in commit order.
    writes: tokio::sync::Mutex<()>,
}

impl<S: Store> IndexLag<S> {
    /// Wraps `inner`, whose existing index entries (of `indexes`, as `(table, index)`) are
    /// taken as they stand.
    pub async fn new(
        inner: S,
        lag: Duration,
        indexes: &[(&'static str, &'static str)],
    ) -> Result<Self, StoreError> {
        let mut state = Lagged::default();
        for (table, index) in indexes {
            let mut after = None;
            loop {
                let page = inner
                    .scan_index_keys(table, index, after.as_ref(), 1000)
                    .await?;
                for k in &page.keys {
                    let Some(mut item) = inner.get(table, &k.pk, &k.sk).await? else {
                        continue;
                    };
                    item.indexes = vec![];
                    let p = (
                        *table,
                        *index,
                        k.ipk.clone(),
                        k.isk.clone(),
                        k.pk.clone(),
                        k.sk.clone(),
                    );
                    state.entries.insert(p.clone(), item);
                    let key = (*table, k.pk.clone(), k.sk.clone());
                    state.places.entry(key).or_default().push(p);
                }
                match page.next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
        Ok(IndexLag {
            inner,
            lag,
            state: Mutex::new(state),
            writes: tokio::sync::Mutex::new(()),
        })
    }

    fn lagged<T>(&self, f: impl FnOnce(&mut Lagged) -> T) -> Result<T, StoreError> {
        let mut state = self
            .state
            .lock()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        state.catch_up(Instant::now());
        Ok(f(&mut state))
    }

    /// Runs the writes `ops` (already done by `commit`) into the lagging copy: reads back each
    /// item written, notes what eventually consistent reads still see, and queues the change.
    async fn committed(
        &self,
        ops: &[WriteOp],
        before: Vec<(Key, Option<Item>)>,
    ) -> Result<(), StoreError> {
        let mut after = vec![];
        for op in ops {
            let (table, pk, sk) = op.key();
            let item = match op {
                WriteOp::Check { .. } => continue,
                WriteOp::Delete { .. } => None,
                WriteOp::Put { item, .. } => {
                    let stored = self.inner.get(table, pk, sk).await?;
                    stored.map(|s| Item {
                        indexes: item.indexes.clone(),
                        ..s
                    })
                }
            };
            after.push(((table, pk.to_string(), sk.to_string()), item));
        }
        let due = Instant::now() + self.lag;
        self.lagged(|state| {
            for (key, old) in before {
                state.before.entry(key).or_insert(old);
            }
            for (key, item) in after {
                state.pending.push_back((due, key, item));
            }
        })
    }

    /// The items `ops` touch as they stand before them (for eventually consistent reads).
    async fn before(&self, ops: &[WriteOp]) -> Result<Vec<(Key, Option<Item>)>, StoreError> {
        let mut out = vec![];
        for op in ops {
            if matches!(op, WriteOp::Check { .. }) {
                continue;
            }
            let (table, pk, sk) = op.key();
            let key = (table, pk.to_string(), sk.to_string());
            if self.lagged(|s| s.before.contains_key(&key))? {
                continue;
            }
            let old = self.inner.get(table, pk, sk).await?;
            out.push((key, old));
        }
        Ok(out)
    }
}

fn in_range(isk: &str, range: &SkRange) -> bool {
    range.prefix.as_deref().is_none_or(|p| isk.starts_with(p))
        && range.upto.as_deref().is_none_or(|u| isk <= u)
}

#[async_trait]
impl<S: Store> Store for IndexLag<S> {
    async fn get(&self, t: &'static str, pk: &str, sk: &str) -> Result<Option<Item>, StoreError> {
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
        self.inner.query(t, pk, range, after, limit).await
    }

    async fn get_eventual(
        &self,
        t: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        let key = (t, pk.to_string(), sk.to_string());
        match self.lagged(|s| s.before.get(&key).cloned())? {
            Some(old) => Ok(old),
            None => self.inner.get(t, pk, sk).await,
        }
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
        super::check_cursor(true, pk, range, after)?;
        let from: Place = match after {
            Some((isk, ipk, isk2)) => (
                t,
                index,
                pk.to_string(),
                isk.clone(),
                ipk.clone(),
                isk2.clone(),
            ),
            None => (
                t,
                index,
                pk.to_string(),
                String::new(),
                String::new(),
                String::new(),
            ),
        };
        self.lagged(|s| {
            let mut items = vec![];
            let mut last = None;
            let mut more = false;
            for (p, item) in s.entries.range(from.clone()..) {
                if (p.0, p.1, p.2.as_str()) != (t, index, pk) {
                    break;
                }
                if after.is_some() && *p == from || !in_range(&p.3, range) {
                    continue;
                }
                if items.len() == limit {
                    more = true;
                    break;
                }
                items.push(item.clone());
                last = Some((p.3.clone(), p.4.clone(), p.5.clone()));
            }
            Page {
                items,
                next: if more { last } else { None },
            }
        })
    }

    async fn count_index(
        &self,
        t: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
    ) -> Result<u64, StoreError> {
        self.lagged(|s| {
            s.entries
                .keys()
                .filter(|p| (p.0, p.1, p.2.as_str()) == (t, index, pk) && in_range(&p.3, range))
                .count() as u64
        })
    }

    async fn scan_index_keys(
        &self,
        t: &'static str,
        index: &'static str,
        after: Option<&IndexKey>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.lagged(|s| {
            let mut keys: Vec<IndexKey> = s
                .entries
                .keys()
                .filter(|p| (p.0, p.1) == (t, index))
                .map(|p| IndexKey {
                    ipk: p.2.clone(),
                    isk: p.3.clone(),
                    pk: p.4.clone(),
                    sk: p.5.clone(),
                })
                .filter(|k| after.is_none_or(|a| k > a))
                .collect();
            keys.sort();
            let next = (keys.len() > limit).then(|| keys[limit - 1].clone());
            keys.truncate(limit);
            KeyPage { keys, next }
        })
    }

    async fn write(&self, op: WriteOp) -> Result<u64, StoreError> {
        let _order = self.writes.lock().await;
        let ops = std::slice::from_ref(&op);
        let before = self.before(ops).await?;
        let version = self.inner.write(op.clone()).await?;
        self.committed(ops, before).await?;
        Ok(version)
    }

    async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let _order = self.writes.lock().await;
        let before = self.before(&ops).await?;
        self.inner.transact(ops.clone()).await?;
        self.committed(&ops, before).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use crate::store::Cond;
    use serde_json::json;

    const T: &str = "conformance";

    fn entry(isk: &str) -> IndexEntry {
        IndexEntry {
            index: "by-x",
            pk: "p".into(),
            sk: isk.into(),
        }
    }

    async fn put(store: &dyn Store, pk: &str, x: &str) {
        let item = Item::new(pk, "s", json!({ "x": x }), vec![entry(x)]);
        let op = WriteOp::Put {
            table: T,
            item,
            cond: Cond::None,
        };
        store.write(op).await.unwrap();
    }

    async fn listed(store: &dyn Store) -> Vec<(String, String)> {
        let page = store
            .query_index(T, "by-x", "p", &SkRange::default(), None, 10)
            .await
            .unwrap();
        page.items
            .iter()
            .map(|i| (i.pk.clone(), i.data["x"].as_str().unwrap_or("").to_string()))
            .collect()
    }

    /// An index answers as it stood `lag` ago: a new entry shows late, a moved one shows at
    /// its old place with the old item, a deleted one stays; eventual reads lag alike; the
    /// entries present when it was wrapped are there from the start.
    #[tokio::test]
    async fn indexes_answer_as_they_stood_lag_ago() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SqliteStore::open(&dir.path().join("db")).unwrap();
        put(&inner, "a", "1").await;
        let lag = Duration::from_millis(300);
        let store = IndexLag::new(inner, lag, &[(T, "by-x")]).await.unwrap();
        assert_eq!(listed(&store).await, [("a".into(), "1".into())]);
        put(&store, "b", "2").await;
        put(&store, "a", "3").await;
        assert_eq!(
            listed(&store).await,
            [("a".into(), "1".into())],
            "b not yet, a unmoved"
        );
        let old = store.get_eventual(T, "a", "s").await.unwrap().unwrap();
        assert_eq!(old.data["x"], "1");
        assert_eq!(
            store.get(T, "a", "s").await.unwrap().unwrap().data["x"],
            "3"
        );
        tokio::time::sleep(lag).await;
        assert_eq!(
            listed(&store).await,
            [("b".into(), "2".into()), ("a".into(), "3".into())]
        );
        let del = WriteOp::Delete {
            table: T,
            pk: "b".into(),
            sk: "s".into(),
            cond: Cond::None,
        };
        store.write(del).await.unwrap();
        assert_eq!(listed(&store).await.len(), 2, "b still listed");
        assert!(store.get_eventual(T, "b", "s").await.unwrap().is_some());
        let all = SkRange::default();
        assert_eq!(store.count_index(T, "by-x", "p", &all).await.unwrap(), 2);
        tokio::time::sleep(lag).await;
        assert_eq!(listed(&store).await, [("a".into(), "3".into())]);
        assert!(store.get_eventual(T, "b", "s").await.unwrap().is_none());
        let keys = store.scan_index_keys(T, "by-x", None, 10).await.unwrap();
        assert_eq!(keys.keys.len(), 1);
    }

    /// The store's promises hold with indexes and eventual reads lagging.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keeps_every_promise_of_the_port() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SqliteStore::open(&dir.path().join("db")).unwrap();
        let lag = Duration::from_millis(200);
        let store = IndexLag::new(inner, lag, &[]).await.unwrap();
        crate::store::conformance::run_all(std::sync::Arc::new(store)).await;
    }

    /// Pages follow the lagging index: a cursor from one page starts the next after it.
    #[tokio::test]
    async fn pages_continue_after_their_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SqliteStore::open(&dir.path().join("db")).unwrap();
        let store = IndexLag::new(inner, Duration::ZERO, &[]).await.unwrap();
        for (pk, x) in [("a", "1"), ("b", "2"), ("c", "3")] {
            put(&store, pk, x).await;
        }
        let all = SkRange::default();
        let first = store
            .query_index(T, "by-x", "p", &all, None, 2)
            .await
            .unwrap();
        assert_eq!(first.items.len(), 2);
        let next = first.next.expect("more");
        let rest = store
            .query_index(T, "by-x", "p", &all, Some(&next), 2)
            .await
            .unwrap();
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.items[0].pk, "c");
        assert!(rest.next.is_none());
    }
}
