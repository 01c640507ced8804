//! The storage port. Its promises are exactly DynamoDB's, so that the embedded adapter never
//! offers more than AWS does:
//! - single-item writes, each with an optional condition (`NotExists`, `Exists`, `Version`);
//! - transactions of at most [`MAX_TRANSACTION_ITEMS`] writes on distinct items, all or nothing;
//! - strongly consistent reads of one item and queries within one partition key, and the same
//!   reads **eventually consistent** (half the read units on DynamoDB), which may return an
//!   older version of an item or miss one written moments ago;
//! - sparse secondary indexes that are **eventually consistent**: what an index query returns
//!   is a hint that the caller must confirm with a conditional write on the base item;
//! - items of at most [`MAX_ITEM_BYTES`];
//! - batched reads of up to [`MAX_BATCH_GET`] items, of one table or several (BatchGetItem).
//!
//! Every item carries a version that the store bumps on each write; optimistic concurrency is
//! "read, compute, write with `Cond::Version(read_version)`".

pub mod changes;
pub mod conformance;
pub mod data;
#[cfg(feature = "aws")]
pub mod dynamodb;
pub mod index_lag;
pub mod shard;
pub mod sqlite;

use async_trait::async_trait;
pub use data::Data;
use serde_json::Value;

/// The resource declarations (tables and their indexes) shared with LocalStack and the SAM
/// template.
pub const RESOURCES_JSON: &str = include_str!("../../../infra/resources.json");

/// Every `(table, index)` pair [`RESOURCES_JSON`] declares, the test tables' included.
pub fn declared_indexes() -> Vec<(&'static str, &'static str)> {
    static ALL: std::sync::OnceLock<Vec<(&'static str, &'static str)>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let spec: Value = serde_json::from_str(RESOURCES_JSON).unwrap_or_default();
        let leak = |v: &Value| -> &'static str {
            Box::leak(v.as_str().unwrap_or_default().to_string().into_boxed_str())
        };
        let mut out = vec![];
        for key in ["tables", "test_tables"] {
            for t in spec[key].as_array().into_iter().flatten() {
                for g in t["indexes"].as_array().into_iter().flatten() {
                    out.push((leak(&t["name"]), leak(&g["name"])));
                }
            }
        }
        out
    })
    .clone()
}

/// DynamoDB's transaction limit.
pub const MAX_TRANSACTION_ITEMS: usize = 100;
/// DynamoDB's BatchGetItem limit: keys per request.
pub const MAX_BATCH_GET: usize = 100;
/// DynamoDB's item size limit (400 KB).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The longest string a caller names that becomes part of a key (an artifact or object name,
/// a clientId, a roleId, a clientId prefix): DynamoDB's sort keys and S3's object keys hold at
/// most 1,024 bytes, the key's other parts included. Longer is refused as bad input, on every
/// backend alike (DynamoDB would refuse the read or write itself, a 500).
pub const MAX_KEY_PART_BYTES: usize = 900;

/// One entry of a sparse secondary index, derived from the item by the domain's key module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// Index name.
    pub index: &'static str,
    /// Index partition key.
    pub pk: String,
    /// Index sort key (ordered as bytes).
    pub sk: String,
}

/// A stored item.
#[derive(Debug, Clone)]
pub struct Item {
    /// Partition key.
    pub pk: String,
    /// Sort key.
    pub sk: String,
    /// Version assigned by the store (1 on first write, +1 on every write). Ignored on input.
    pub version: u64,
    /// The item's attributes.
    pub data: Data,
    /// The index entries this item appears under.
    pub indexes: Vec<IndexEntry>,
}

impl Item {
    /// An item to be written.
    pub fn new(
        pk: impl Into<String>,
        sk: impl Into<String>,
        data: impl Into<Data>,
        indexes: Vec<IndexEntry>,
    ) -> Self {
        Item {
            pk: pk.into(),
            sk: sk.into(),
            version: 0,
            data: data.into(),
            indexes,
        }
    }
}

/// A write condition on the existing item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// Unconditional.
    None,
    /// The item must not exist.
    NotExists,
    /// The item must exist.
    Exists,
    /// The item must exist with exactly this version.
    Version(u64),
}

/// One write, alone or inside a transaction.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Create or replace an item.
    Put {
        /// Table name.
        table: &'static str,
        /// The new item.
        item: Item,
        /// Condition on the existing item.
        cond: Cond,
    },
    /// Delete an item (a missing item is not an error unless the condition says so).
    Delete {
        /// Table name.
        table: &'static str,
        /// Partition key.
        pk: String,
        /// Sort key.
        sk: String,
        /// Condition on the existing item.
        cond: Cond,
    },
    /// Only check a condition (DynamoDB's `ConditionCheck`; transactions only).
    Check {
        /// Table name.
        table: &'static str,
        /// Partition key.
        pk: String,
        /// Sort key.
        sk: String,
        /// The condition to check.
        cond: Cond,
    },
}

impl WriteOp {
    /// Table, partition key and sort key of the item this op touches.
    pub fn key(&self) -> (&'static str, &str, &str) {
        match self {
            WriteOp::Put { table, item, .. } => (table, &item.pk, &item.sk),
            WriteOp::Delete { table, pk, sk, .. } | WriteOp::Check { table, pk, sk, .. } => {
                (table, pk, sk)
            }
        }
    }
    /// The op's condition.
    pub fn cond(&self) -> Cond {
        match self {
            WriteOp::Put { cond, .. }
            | WriteOp::Delete { cond, .. }
            | WriteOp::Check { cond, .. } => *cond,
        }
    }
}

/// Storage failures, with predicates in the style of the AWS SDK's error kinds.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A single write's condition failed.
    #[error("conditional check failed")]
    ConditionFailed,
    /// A transaction was cancelled; `reasons[i]` is true where op `i` failed its condition.
    #[error("transaction cancelled")]
    TransactionCancelled {
        /// Which ops failed their conditions.
        reasons: Vec<bool>,
    },
    /// The item is larger than [`MAX_ITEM_BYTES`].
    #[error("item of {0} bytes exceeds the 400 KB item limit")]
    ItemTooLarge(usize),
    /// A page's start that no page of the query could have ended at ([`check_cursor`]).
    #[error("the continuation point does not belong to this query")]
    BadCursor,
    /// The request breaks a rule of the API (too many items, same item twice, ...).
    #[error("invalid store request: {0}")]
    Validation(String),
    /// The backend is overloaded; retry with backoff.
    #[error("throttled")]
    Throttled,
    /// Anything else.
    #[error("store failure: {0}")]
    Other(String),
}

impl StoreError {
    /// True for a failed condition, alone or inside a transaction.
    pub fn is_condition_failed(&self) -> bool {
        matches!(
            self,
            StoreError::ConditionFailed | StoreError::TransactionCancelled { .. }
        )
    }

    /// True if the same request may succeed later: throttling, or a failure of the service
    /// or the connection (not a broken rule or an oversized item, which stay broken).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Throttled | StoreError::Other(_))
    }
}

/// Sort-key bounds for a query: `after < sk <= upto`, both optional, plus a prefix.
#[derive(Debug, Clone, Default)]
pub struct SkRange {
    /// Only sort keys starting with this.
    pub prefix: Option<String>,
    /// Only sort keys at most this.
    pub upto: Option<String>,
}

/// Where a page starts: strictly after this (index sk, item pk, item sk).
pub type Cursor = (String, String, String);

/// Refuses a cursor that no page of partition `pk` (of an index when `index`) in `range`
/// could have ended at: a key part empty or longer than DynamoDB allows (1,024 bytes for a
/// sort key, 2,048 for a partition key), a base-table cursor of another partition, or a sort
/// key outside the range. Cursors come back from clients as continuation tokens, which they
/// may make up or send with another query (listClients with another prefix); DynamoDB
/// refuses such a start key (a 500 before this), and every adapter checks alike.
pub fn check_cursor(
    index: bool,
    pk: &str,
    range: &SkRange,
    after: Option<&Cursor>,
) -> Result<(), StoreError> {
    let Some((isk, item_pk, item_sk)) = after else {
        return Ok(());
    };
    let fits = |s: &str, max: usize| !s.is_empty() && s.len() <= max;
    let key = if index { isk } else { item_sk };
    let ok = fits(item_pk, 2048)
        && fits(item_sk, 1024)
        && fits(key, 1024)
        && (index || item_pk == pk)
        && range
            .prefix
            .as_ref()
            .is_none_or(|p| key.starts_with(p.as_str()))
        && range.upto.as_ref().is_none_or(|u| key <= u);
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadCursor)
    }
}

/// One page of results.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The items, in sort-key order.
    pub items: Vec<Item>,
    /// Present when more results may follow.
    pub next: Option<Cursor>,
}

/// An entry of a sparse index: its partition and sort key there, and its item's keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexKey {
    /// The index partition key.
    pub ipk: String,
    /// The index sort key.
    pub isk: String,
    /// The item's partition key.
    pub pk: String,
    /// The item's sort key.
    pub sk: String,
}

/// One page of a scan of an index's keys.
#[derive(Debug, Clone, Default)]
pub struct KeyPage {
    /// The entries, in no promised order.
    pub keys: Vec<IndexKey>,
    /// Present when more may follow: the scan goes on strictly after it.
    pub next: Option<IndexKey>,
}

/// The storage port.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Strongly consistent read of one item.
    async fn get(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError>;

    /// Items of one partition, ascending by sort key, strongly consistent.
    async fn query(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// Eventually consistent read of one item: may return an older version, or nothing for
    /// an item written moments ago. Callers confirm what they act on with a conditional write
    /// (on the version read) or read again with [`Store::get`]. An adapter that has only
    /// strong reads may serve it with one.
    async fn get_eventual(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        self.get(table, pk, sk).await
    }

    /// [`Store::query`], eventually consistent (the same caveats as [`Store::get_eventual`]).
    async fn query_eventual(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.query(table, pk, range, after, limit).await
    }

    /// [`Store::get`] when `consistent`, else [`Store::get_eventual`].
    async fn get_as(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<Item>, StoreError> {
        if consistent {
            self.get(table, pk, sk).await
        } else {
            self.get_eventual(table, pk, sk).await
        }
    }

    /// [`Store::query`] when `consistent`, else [`Store::query_eventual`].
    async fn query_as(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        limit: usize,
        consistent: bool,
    ) -> Result<Page, StoreError> {
        if consistent {
            self.query(table, pk, range, None, limit).await
        } else {
            self.query_eventual(table, pk, range, None, limit).await
        }
    }

    /// Several items of one table by key, in the order of `keys` (`None` where there is no
    /// item), strongly consistent when `consistent`. Any number of keys: adapters read them
    /// [`MAX_BATCH_GET`] at a time where the backend batches (DynamoDB's BatchGetItem, whose
    /// unprocessed keys are asked for again), else one by one.
    async fn get_many(
        &self,
        table: &'static str,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for (pk, sk) in keys {
            out.push(self.get_as(table, pk, sk, consistent).await?);
        }
        Ok(out)
    }

    /// Items of one or more tables by key, in the order of `keys` (`None` where there is no
    /// item): at most [`MAX_BATCH_GET`] distinct keys, in one request where the backend
    /// batches (DynamoDB's BatchGetItem, whose unprocessed keys are asked for again), else one
    /// by one. BatchGetItem sets consistency per table, so a table's keys are all read
    /// strongly when any of them asks for it: a key is read at least as strongly as asked.
    async fn get_each(&self, keys: &[GetKey]) -> Result<Vec<Option<Item>>, StoreError> {
        check_get_each(keys)?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.get_as(k.table, &k.pk, &k.sk, k.consistent).await?);
        }
        Ok(out)
    }

    /// Items under one partition of a sparse index, ascending by index sort key.
    /// Eventually consistent: results may be stale or missing recent writes.
    async fn query_index(
        &self,
        table: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// Number of entries under one index partition (DynamoDB: a `Select=COUNT` query).
    async fn count_index(
        &self,
        table: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
    ) -> Result<u64, StoreError>;

    /// Every entry of a sparse index, all partitions, keys only (DynamoDB: a `Scan` of the
    /// index): at most `limit` per page, in no promised order, eventually consistent. Its
    /// cost grows with the index's size, not with its number of partitions.
    async fn scan_index_keys(
        &self,
        table: &'static str,
        index: &'static str,
        after: Option<&IndexKey>,
        limit: usize,
    ) -> Result<KeyPage, StoreError>;

    /// One conditional write. Returns the item's new version (0 after a delete).
    async fn write(&self, op: WriteOp) -> Result<u64, StoreError>;

    /// All-or-nothing writes on at most [`MAX_TRANSACTION_ITEMS`] distinct items.
    async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError>;
}

/// One key of a [`Store::get_each`] read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GetKey {
    /// Table name.
    pub table: &'static str,
    /// Partition key.
    pub pk: String,
    /// Sort key.
    pub sk: String,
    /// Read strongly consistent.
    pub consistent: bool,
}

/// The rules of a [`Store::get_each`] read, as BatchGetItem enforces them: 1 to
/// [`MAX_BATCH_GET`] keys, none named twice.
pub fn check_get_each(keys: &[GetKey]) -> Result<(), StoreError> {
    if keys.is_empty() || keys.len() > MAX_BATCH_GET {
        return Err(StoreError::Validation(format!(
            "a batched read names 1..{MAX_BATCH_GET} keys, got {}",
            keys.len()
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    if keys.iter().any(|k| !seen.insert((k.table, &k.pk, &k.sk))) {
        return Err(StoreError::Validation(
            "a batched read may not name the same item twice".into(),
        ));
    }
    Ok(())
}

/// Checks the rules every adapter enforces before writing.
pub fn check_transaction(ops: &[WriteOp]) -> Result<(), StoreError> {
    if ops.is_empty() || ops.len() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::Validation(format!(
            "a transaction holds 1..{MAX_TRANSACTION_ITEMS} items, got {}",
            ops.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for op in ops {
        if !seen.insert(op.key()) {
            return Err(StoreError::Validation(
                "a transaction may not touch the same item twice".into(),
            ));
        }
    }
    Ok(())
}

/// Serialises an item's data, enforcing the item size limit (keys and indexes included).
pub fn encode_item(item: &Item) -> Result<std::borrow::Cow<'_, [u8]>, StoreError> {
    let bytes = item
        .data
        .encoded()
        .map_err(|e| StoreError::Other(e.to_string()))?;
    let size = bytes.len()
        + item.pk.len()
        + item.sk.len()
        + item
            .indexes
            .iter()
            .map(|i| i.pk.len() + i.sk.len() + 16)
            .sum::<usize>();
    if size > MAX_ITEM_BYTES {
        return Err(StoreError::ItemTooLarge(size));
    }
    Ok(bytes)
}
