//! A store that counts the requests made through it, for benches that must show what one
//! operation costs in reads and writes on any backend (DynamoDB counts its own capacity;
//! this counts requests the same way on SQLite).

use async_trait::async_trait;
use shared::store::{
    Cursor, GetKey, IndexKey, Item, KeyPage, Page, SkRange, Store, StoreError, WriteOp,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Requests so far.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Counts {
    /// Reads: gets and queries (a query is one request, however many items it returns).
    pub reads: u64,
    /// Writes and transactions that succeeded.
    pub writes: u64,
    /// Writes and transactions refused on their condition.
    pub refused: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, o: Counts) -> Counts {
        Counts {
            reads: self.reads.saturating_sub(o.reads),
            writes: self.writes.saturating_sub(o.writes),
            refused: self.refused.saturating_sub(o.refused),
        }
    }
}

/// Wraps a store and counts its requests.
pub struct Counting {
    inner: Arc<dyn Store>,
    reads: AtomicU64,
    writes: AtomicU64,
    refused: AtomicU64,
}

impl Counting {
    /// Counts the requests made to `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Counting {
        Counting {
            inner,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            reads: self.reads.load(Ordering::SeqCst),
            writes: self.writes.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
        }
    }

    fn read(&self) {
        self.reads.fetch_add(1, Ordering::SeqCst);
    }

    fn wrote<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        match &r {
            Ok(_) => &self.writes,
            Err(e) if e.is_condition_failed() => &self.refused,
            Err(_) => return r,
        }
        .fetch_add(1, Ordering::SeqCst);
        r
    }
}

#[async_trait]
impl Store for Counting {
    async fn get(&self, t: &'static str, pk: &str, sk: &str) -> Result<Option<Item>, StoreError> {
        self.read();
        self.inner.get(t, pk, sk).await
    }

    async fn get_eventual(
        &self,
        t: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        self.read();
        self.inner.get_eventual(t, pk, sk).await
    }

    async fn query(
        &self,
        t: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.read();
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
        self.read();
        self.inner.query_eventual(t, pk, range, after, limit).await
    }

    async fn get_many(
        &self,
        t: &'static str,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError> {
        self.read();
        self.inner.get_many(t, keys, consistent).await
    }

    async fn get_each(&self, keys: &[GetKey]) -> Result<Vec<Option<Item>>, StoreError> {
        self.read();
        self.inner.get_each(keys).await
    }

    async fn scan_index_keys(
        &self,
        t: &'static str,
        index: &'static str,
        after: Option<&IndexKey>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.read();
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
        self.read();
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
        self.read();
        self.inner.count_index(t, index, pk, range).await
    }

    async fn write(&self, op: WriteOp) -> Result<u64, StoreError> {
        let r = self.inner.write(op).await;
        self.wrote(r)
    }

    async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        let r = self.inner.transact(ops).await;
        self.wrote(r)
    }
}
