//! The DynamoDB adapter of the storage port.
//!
//! Each item is stored as `pk`, `sk`, `v` (version), `d` (the data: its JSON, deflated, as a
//! binary attribute, or as a string when the whole item fits one write unit that way) and,
//! per index entry, `<index>_pk` / `<index>_sk`; each port index is a GSI over those two
//! attributes, so a put that omits them removes the item from the index (sparse GSIs).
//! Deflating matters for cost: DynamoDB bills every write by the whole item's size in 1 KB
//! steps (and an ALL-projection index by the same again), and a status item's JSON, with the
//! events waiting in its outbox repeating the status, shrinks to about a third. Below one
//! unit it would only cost CPU. Either form is read, whichever wrote it.
//! Every request asks for its consumed capacity, which [`DynamoStore::usage`] adds up, per
//! table and index as well.
//! Item requests go through [`wire::Wire`], which speaks DynamoDB's JSON protocol itself; the
//! SDK's client creates the tables.

use super::*;
use aws_sdk_dynamodb::Client;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub mod sigv4;
pub mod wire;

use wire::{Attrs, Av, Condition, Consumed, Key, WireError};

/// BatchGetItem requests in flight at once for one `get_many`.
const BATCH_GETS_AT_ONCE: usize = 4;

/// Capacity units consumed so far, in thousandths of a unit.
#[derive(Debug, Default)]
pub struct Usage {
    /// Read capacity units × 1000.
    pub read_milli: AtomicU64,
    /// Write capacity units × 1000.
    pub write_milli: AtomicU64,
    /// Requests sent.
    pub requests: AtomicU64,
    /// Of those, reads (GetItem, Query, BatchGetItem). DynamoDB bills at least 0.5 units for
    /// each eventually consistent one, even when it finds nothing; DynamoDB Local (under
    /// LocalStack) reports 0 for an empty Query.
    pub read_requests: AtomicU64,
    /// Write units × 1000 by where they were spent: the table's name without the prefix, or
    /// `<table>/<index>` for a secondary index.
    pub writes_by_target: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

/// The data attribute `d` of a stream record's image, as stored: deflated JSON (binary), or
/// JSON text (items written before compression, or by hand).
pub enum ImageData<'a> {
    /// Deflated JSON bytes (a `B` attribute, already decoded from base64).
    Deflated(&'a [u8]),
    /// JSON text (an `S` attribute).
    Json(&'a str),
}

/// DynamoDB-backed [`Store`].
#[derive(Clone)]
pub struct DynamoStore {
    wire: Arc<wire::Wire>,
    prefix: String,
    usage: Arc<Usage>,
}

fn other<E: std::fmt::Debug>(e: E) -> StoreError {
    StoreError::Other(format!("{e:?}"))
}

fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

thread_local! {
    // A deflate stream's state is hundreds of KB that a new one allocates and zeroes: at a
    // few items per request that was a tenth of a warm function's CPU, so each thread keeps
    // one of each and resets it per item. The backend is zlib-rs, whose reset clears only its
    // 64 KB hash heads; miniz_oxide's zeroed all of its 310 KB, 17 % of a warm claimWork's
    // instructions (`scripts/function-instructions.sh`).
    static DEFLATER: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(LEVEL, false));
    static INFLATER: std::cell::RefCell<flate2::Decompress> =
        std::cell::RefCell::new(flate2::Decompress::new(false));
}

/// How hard items are deflated: zlib's level 2 (`deflate_fast`). A 1.5 KB status item with an
/// event waiting comes out 489 bytes against the default level's 470, and the cost bench's
/// write units are the same to the hundredth; level 1 (fixed codes only) packs looser.
const LEVEL: flate2::Compression = flate2::Compression::new(2);

/// Raw deflate of an item's JSON (see the module's header for why).
fn deflate(json: &[u8]) -> Result<Vec<u8>, StoreError> {
    DEFLATER.with_borrow_mut(|z| {
        z.reset();
        let mut out = Vec::with_capacity(json.len() / 2 + 64);
        loop {
            let read = z.total_in() as usize;
            let status = z
                .compress_vec(&json[read..], &mut out, flate2::FlushCompress::Finish)
                .map_err(other)?;
            if status == flate2::Status::StreamEnd {
                return Ok(out);
            }
            out.reserve(out.capacity().max(64));
        }
    })
}

/// The data attribute `d` of an item whose other attributes are `rest`: the JSON as text when
/// the whole item still fits one write unit that way (deflating it could not bill less, and
/// costs a warm function a twentieth of its CPU), else deflated.
fn data_attr(rest: &Attrs, json: std::borrow::Cow<'_, [u8]>) -> Result<Av, StoreError> {
    let others: usize = rest.iter().map(|(k, v)| k.len() + attr_size(v)).sum();
    if others + "d".len() + json.len() <= RAW_ITEM_BYTES {
        // JSON is UTF-8; anything else is kept deflated, as bytes.
        let text = match json {
            std::borrow::Cow::Owned(bytes) => String::from_utf8(bytes).map_err(|e| e.into_bytes()),
            std::borrow::Cow::Borrowed(bytes) => std::str::from_utf8(bytes)
                .map(String::from)
                .map_err(|_| bytes.to_vec()),
        };
        return match text {
            Ok(text) => Ok(Av::S(text)),
            Err(bytes) => Ok(Av::B(deflate(&bytes)?)),
        };
    }
    Ok(Av::B(deflate(&json)?))
}

/// The largest item stored with its data as text: one write unit covers 1,024 bytes, less a
/// margin for numbers, whose billed size [`attr_size`] only estimates.
const RAW_ITEM_BYTES: usize = 1000;

/// The JSON of deflated item data; an error when it is cut short or inflates past four
/// items' worth.
fn inflate(bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let limit = MAX_ITEM_BYTES * 4;
    INFLATER.with_borrow_mut(|z| {
        z.reset(false);
        let mut out = Vec::with_capacity(bytes.len() * 3 + 64);
        loop {
            let (read, written) = (z.total_in() as usize, out.len());
            let status = z
                .decompress_vec(&bytes[read..], &mut out, flate2::FlushDecompress::None)
                .map_err(other)?;
            if out.len() > limit {
                return Err(StoreError::Other(format!(
                    "item data inflates past {limit} bytes"
                )));
            }
            if status == flate2::Status::StreamEnd {
                return Ok(out);
            }
            let spare = out.len() < out.capacity();
            if spare && z.total_in() as usize == read && out.len() == written {
                return Err(StoreError::Other("deflated item data ends early".into()));
            }
            if !spare {
                out.reserve(out.capacity());
            }
        }
    })
}

fn is_throttle(code: Option<&str>) -> bool {
    code.is_some_and(|c| wire::THROTTLING_CODES.contains(&c))
}

/// Maps a request's failure: throttling, failed conditions and validation get their own kinds.
fn wire_err(e: WireError) -> StoreError {
    match e {
        WireError::Service { code, message, .. } => match code.as_str() {
            c if is_throttle(Some(c)) => StoreError::Throttled,
            "ConditionalCheckFailedException" => StoreError::ConditionFailed,
            "ValidationException" => StoreError::Validation(message),
            _ => StoreError::Other(format!("DynamoDB {code}: {message}")),
        },
        WireError::Transport(msg) => StoreError::Other(format!("DynamoDB unreachable: {msg}")),
    }
}

/// A condition as DynamoDB expression parts.
fn condition(cond: Cond) -> Condition {
    let expr = |e: &'static str| Condition {
        condition_expression: Some(e),
        ..Condition::default()
    };
    match cond {
        Cond::None => Condition::default(),
        Cond::NotExists => expr("attribute_not_exists(pk)"),
        Cond::Exists => expr("attribute_exists(pk)"),
        Cond::Version(v) => Condition {
            condition_expression: Some("#v = :expected"),
            expression_attribute_names: vec![("#v", "v")],
            expression_attribute_values: vec![(":expected", Av::N(v.to_string()))],
        },
    }
}

/// An item's key as DynamoDB names it.
fn key_attrs(pk: &str, sk: &str) -> Attrs {
    Attrs::from([("pk".into(), s(pk)), ("sk".into(), s(sk))])
}

/// The text of attribute `k`, if it is a string.
fn text(m: &Attrs, k: &str) -> Option<String> {
    m.get(k).and_then(Av::as_s).map(String::from)
}

impl DynamoStore {
    /// One BatchGetItem of at most [`MAX_BATCH_GET`] distinct keys in all, `todo` holding
    /// each table's (by its full name), asking again (backing off) for the keys DynamoDB
    /// leaves for later (throughput, 16 MB). The items found, each with its table's name.
    async fn batch_get(
        &self,
        mut todo: Vec<(String, wire::KeysAndAttributes)>,
    ) -> Result<Vec<(String, Item)>, StoreError> {
        // Keys left for later are asked for again as strongly as at first, whether or not
        // the answer repeats how.
        let strong: Vec<(String, bool)> = todo
            .iter()
            .map(|(n, k)| (n.clone(), k.consistent_read))
            .collect();
        let mut found = Vec::new();
        let mut attempt = 0u32;
        while !todo.is_empty() {
            let req = wire::BatchGet {
                request_items: todo.iter().map(|(n, k)| (n.as_str(), k)).collect(),
                return_consumed_capacity: (),
            };
            let out: wire::BatchGetOut = self
                .wire
                .call("BatchGetItem", &req)
                .await
                .map_err(wire_err)?;
            // One request; its units come one entry per table.
            self.count(None, false);
            for cc in &out.consumed_capacity {
                self.count_units(Some(cc), false);
            }
            for (name, items) in out.responses {
                for m in items {
                    found.push((name.clone(), Self::decode(m)?));
                }
            }
            todo = out
                .unprocessed_keys
                .into_iter()
                .filter(|(_, k)| !k.keys.is_empty())
                .map(|(n, mut k)| {
                    k.consistent_read = strong.iter().any(|(t, c)| *t == n && *c);
                    (n, k)
                })
                .collect();
            if !todo.is_empty() {
                attempt += 1;
                if attempt > 8 {
                    return Err(StoreError::Throttled);
                }
                let ms = (25u64 << attempt.min(6)).min(1_000);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
        Ok(found)
    }

    /// A store over DynamoDB as `cfg` configures it (region, endpoint, credentials, retries);
    /// physical table names are `<prefix><table>`.
    pub fn new(cfg: &aws_config::SdkConfig, prefix: impl Into<String>) -> Result<Self, String> {
        Ok(DynamoStore {
            wire: Arc::new(wire::Wire::new(cfg)?),
            prefix: prefix.into(),
            usage: Arc::new(Usage::default()),
        })
    }

    /// Capacity consumed through this store so far.
    pub fn usage(&self) -> Arc<Usage> {
        self.usage.clone()
    }

    fn table(&self, t: &str) -> String {
        format!("{}{t}", self.prefix)
    }

    /// Counts one request and its units.
    fn count(&self, cc: Option<&Consumed>, write: bool) {
        self.usage.requests.fetch_add(1, Ordering::Relaxed);
        if !write {
            self.usage.read_requests.fetch_add(1, Ordering::Relaxed);
        }
        self.count_units(cc, write);
    }

    /// Counts units only (a transaction reports one entry per table it wrote).
    fn count_units(&self, cc: Option<&Consumed>, write: bool) {
        if let (true, Some(c)) = (write, cc) {
            self.count_targets(c);
        }
        if let Some(units) = cc.and_then(|c| c.capacity_units) {
            let slot = if write {
                &self.usage.write_milli
            } else {
                &self.usage.read_milli
            };
            slot.fetch_add((units * 1000.0).round() as u64, Ordering::Relaxed);
        }
    }

    /// Counts a transaction's write units: per table and index, what DynamoDB reported, or
    /// `floor` where that is more. AWS reports a transaction's units exactly, two per KB of
    /// each item; DynamoDB Local (LocalStack) rounds the items of one table together, so that
    /// three small edges come back as 2 units rather than 6.
    fn count_transaction(
        &self,
        reported: &[Consumed],
        floor: &std::collections::BTreeMap<String, f64>,
    ) {
        let mut units: std::collections::BTreeMap<String, f64> = floor.clone();
        for (k, u) in reported.iter().flat_map(|c| self.targets(c)) {
            let e = units.entry(k).or_default();
            *e = e.max(u);
        }
        let milli = |u: f64| (u * 1000.0).round() as u64;
        self.usage
            .write_milli
            .fetch_add(units.values().map(|u| milli(*u)).sum(), Ordering::Relaxed);
        if let Ok(mut m) = self.usage.writes_by_target.lock() {
            for (k, u) in units {
                *m.entry(k).or_default() += milli(u);
            }
        }
    }

    /// A write's units per table and index (present when asked for `INDEXES`), named as in
    /// [`Usage::writes_by_target`].
    fn targets(&self, c: &Consumed) -> Vec<(String, f64)> {
        let table = c.table_name.as_deref().unwrap_or("");
        let table = table.strip_prefix(self.prefix.as_str()).unwrap_or(table);
        let mut parts = vec![];
        if let Some(u) = c.table.as_ref().and_then(|t| t.capacity_units) {
            parts.push((table.to_string(), u));
        }
        for (index, cap) in c.global_secondary_indexes.iter().flatten() {
            if let Some(u) = cap.capacity_units {
                parts.push((format!("{table}/{index}"), u));
            }
        }
        parts
    }

    /// Adds a write's units per table and index.
    fn count_targets(&self, c: &Consumed) {
        let parts = self.targets(c);
        if let Ok(mut m) = self.usage.writes_by_target.lock() {
            for (k, u) in parts {
                *m.entry(k).or_default() += (u * 1000.0).round() as u64;
            }
        }
    }

    fn encode(&self, item: &Item, version: u64) -> Result<Attrs, StoreError> {
        let json = encode_item(item)?;
        let mut m = Attrs::with_capacity(4 + 2 * item.indexes.len());
        m.insert("pk".into(), s(&item.pk));
        m.insert("sk".into(), s(&item.sk));
        m.insert("v".into(), Av::N(version.to_string()));
        for e in &item.indexes {
            m.insert(format!("{}_pk", e.index), s(&e.pk));
            m.insert(format!("{}_sk", e.index), s(&e.sk));
        }
        let d = data_attr(&m, json)?;
        m.insert("d".into(), d);
        Ok(m)
    }

    fn decode(mut m: Attrs) -> Result<Item, StoreError> {
        let mut take = |k: &str| match m.remove(k) {
            Some(Av::S(text)) => Ok(text),
            _ => Err(StoreError::Other(format!("item lacks {k}"))),
        };
        let (pk, sk) = (take("pk")?, take("sk")?);
        let version = m
            .get("v")
            .and_then(Av::as_n)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let data = match m.remove("d") {
            Some(Av::B(b)) => Data::from_bytes(inflate(&b)?),
            Some(Av::S(text)) => Data::from_bytes(text.into_bytes()),
            _ => return Err(StoreError::Other("item lacks d".into())),
        };
        Ok(Item {
            pk,
            sk,
            version,
            data,
            indexes: vec![],
        })
    }

    /// The item of a stream record's image (`NewImage`): its key, its version `v` and its
    /// data `d`, or `None` if the data cannot be read.
    pub fn item_from_image(pk: &str, sk: &str, version: u64, data: ImageData<'_>) -> Option<Item> {
        let data = match data {
            ImageData::Deflated(bytes) => Data::from_bytes(inflate(bytes).ok()?),
            ImageData::Json(text) => Data::from_bytes(text.as_bytes().to_vec()),
        };
        Some(Item {
            pk: pk.to_string(),
            sk: sk.to_string(),
            version,
            data,
            indexes: vec![],
        })
    }

    /// One GetItem of the whole item, or of its version only.
    async fn get_attrs(
        &self,
        table: &str,
        pk: &str,
        sk: &str,
        consistent: bool,
        version_only: bool,
    ) -> Result<Option<Attrs>, StoreError> {
        let name = self.table(table);
        let req = wire::GetItem {
            table_name: &name,
            key: Key::new(pk, sk),
            consistent_read: consistent,
            projection_expression: version_only.then_some("#v"),
            expression_attribute_names: if version_only {
                vec![("#v", "v")]
            } else {
                vec![]
            },
            return_consumed_capacity: (),
        };
        let out: wire::ItemOut = self.wire.call("GetItem", &req).await.map_err(wire_err)?;
        self.count(out.consumed_capacity.as_ref(), false);
        Ok(out.item)
    }

    async fn current_version(
        &self,
        table: &str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<u64>, StoreError> {
        let item = self.get_attrs(table, pk, sk, true, true).await?;
        Ok(item.map(|m| {
            m.get("v")
                .and_then(Av::as_n)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        }))
    }

    async fn get_item(
        &self,
        table: &str,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<Item>, StoreError> {
        let item = self.get_attrs(table, pk, sk, consistent, false).await?;
        item.map(Self::decode).transpose()
    }

    /// DynamoDB puts replace blindly, so a put that must bump the version but has no version
    /// condition first learns the current version, then writes conditionally on it.
    async fn resolve_put_cond(
        &self,
        table: &str,
        item: &Item,
        cond: Cond,
    ) -> Result<(Cond, u64), StoreError> {
        match cond {
            Cond::Version(v) => Ok((cond, v + 1)),
            Cond::NotExists => Ok((cond, 1)),
            Cond::None | Cond::Exists => {
                match self.current_version(table, &item.pk, &item.sk).await? {
                    Some(v) => Ok((Cond::Version(v), v + 1)),
                    None if cond == Cond::Exists => Err(StoreError::ConditionFailed),
                    None => Ok((Cond::NotExists, 1)),
                }
            }
        }
    }

    /// The sort-key part of a key condition, and the values it names (`hi` holds the upper
    /// bound of a prefix with a limit, which the values borrow).
    fn sk_condition<'a>(
        range: &'a SkRange,
        hi: &'a mut String,
        values: &mut Vec<(&'static str, wire::S<'a>)>,
    ) -> Option<&'static str> {
        match (&range.prefix, &range.upto) {
            (None, None) => None,
            (Some(p), None) => {
                values.push((":p", wire::S(p)));
                Some("#pk = :pk AND begins_with(#sk, :p)")
            }
            (None, Some(u)) => {
                values.push((":u", wire::S(u)));
                Some("#pk = :pk AND #sk <= :u")
            }
            (Some(p), Some(u)) => {
                *hi = std::cmp::min(u.clone(), format!("{p}\u{10FFFF}"));
                values.push((":p", wire::S(p)));
                values.push((":u", wire::S(hi)));
                Some("#pk = :pk AND #sk BETWEEN :p AND :u")
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn query_inner(
        &self,
        table: &'static str,
        index: Option<&str>,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
        count_only: bool,
        consistent: bool,
    ) -> Result<(Page, u64), StoreError> {
        super::check_cursor(index.is_some(), pk, range, after)?;
        let (pk_attr, sk_attr) = match index {
            Some(i) => (format!("{i}_pk"), format!("{i}_sk")),
            None => ("pk".to_string(), "sk".to_string()),
        };
        let keys_only = !count_only && index.is_some_and(|i| is_keys_only(table, i));
        let mut hi = String::new();
        let mut values = vec![(":pk", wire::S(pk))];
        let sk_cond = Self::sk_condition(range, &mut hi, &mut values);
        let mut names = vec![("#pk", pk_attr.as_str())];
        if sk_cond.is_some() {
            names.push(("#sk", sk_attr.as_str()));
        }
        let name = self.table(table);
        let mut start = after.map(|(isk, ipk_item, isk_item)| {
            let mut k = Attrs::new();
            k.insert("pk".into(), s(ipk_item));
            k.insert("sk".into(), s(isk_item));
            if index.is_some() {
                k.insert(pk_attr.clone(), s(pk));
                k.insert(sk_attr.clone(), s(isk));
            }
            k
        });
        let mut items = Vec::new();
        let mut cursors = Vec::new();
        let mut total = 0u64;
        loop {
            let req = wire::Query {
                table_name: &name,
                index_name: index,
                key_condition_expression: Some(sk_cond.unwrap_or("#pk = :pk")),
                expression_attribute_names: names.clone(),
                expression_attribute_values: values.clone(),
                exclusive_start_key: start.take(),
                limit: (!count_only).then(|| (limit + 1 - cursors.len()).min(1000) as u32),
                select: count_only.then_some("COUNT"),
                consistent_read: index.is_none().then_some(consistent),
                ..wire::Query::default()
            };
            let out: wire::PageOut = self.wire.call("Query", &req).await.map_err(wire_err)?;
            self.count(out.consumed_capacity.as_ref(), false);
            total += out.count;
            for m in out.items {
                let isk = text(&m, &sk_attr).unwrap_or_default();
                let (pk, sk) = match (text(&m, "pk"), text(&m, "sk")) {
                    (Some(pk), Some(sk)) => (pk, sk),
                    _ => return Err(StoreError::Other("item lacks pk/sk".into())),
                };
                cursors.push((isk, pk, sk));
                if !keys_only {
                    items.push(Self::decode(m)?);
                }
            }
            match out.last_evaluated_key {
                Some(k) if count_only || cursors.len() <= limit => start = Some(k),
                _ => break,
            }
        }
        let next = if cursors.len() > limit {
            cursors.truncate(limit);
            items.truncate(limit);
            cursors.last().cloned()
        } else {
            None
        };
        if keys_only {
            // The index holds keys only: the items themselves are read from the table,
            // strongly consistent, in index order (one deleted meanwhile is left out).
            let keys: Vec<(String, String)> = cursors
                .iter()
                .map(|(_, pk, sk)| (pk.clone(), sk.clone()))
                .collect();
            items = self
                .get_many(table, &keys, true)
                .await?
                .into_iter()
                .flatten()
                .collect();
        }
        Ok((Page { items, next }, total))
    }

    /// Builds the transaction item for one op (puts learn their version first if needed).
    async fn transact_item<'a>(
        &self,
        op: &'a WriteOp,
        name: &'a str,
    ) -> Result<wire::TransactItem<'a>, StoreError> {
        let (table, pk, sk) = op.key();
        let (cond, put_version) = match op {
            WriteOp::Put { item, cond, .. } => {
                let (c, v) = self.resolve_put_cond(table, item, *cond).await?;
                (c, Some(v))
            }
            _ => (op.cond(), None),
        };
        let mut condition = condition(cond);
        // Each item of a transaction needs a condition: one that always holds.
        condition
            .condition_expression
            .get_or_insert("attribute_exists(pk) OR attribute_not_exists(pk)");
        let keyed = |condition| wire::KeyWrite {
            table_name: name,
            key: Key::new(pk, sk),
            condition,
            return_consumed_capacity: None,
        };
        Ok(match op {
            WriteOp::Put { item, .. } => wire::TransactItem::Put(wire::TransactPut {
                table_name: name,
                item: self.encode(item, put_version.unwrap_or(1))?,
                condition,
            }),
            WriteOp::Delete { .. } => wire::TransactItem::Delete(keyed(condition)),
            WriteOp::Check { .. } => wire::TransactItem::ConditionCheck(keyed(condition)),
        })
    }
}

/// The write units a transaction costs at least, per table and index (`<table>/<index>`), from
/// what it sends: two per KB of each item put, two for each deletion, two per secondary-index
/// entry of each item created. Updates' index changes and condition checks are left at what
/// DynamoDB reports (their old entries and sizes are not known here).
fn transaction_floor(
    ops: &[WriteOp],
    items: &[wire::TransactItem<'_>],
) -> std::collections::BTreeMap<String, f64> {
    let mut floor = std::collections::BTreeMap::<String, f64>::new();
    for (op, built) in ops.iter().zip(items) {
        let table = op.key().0;
        match (op, built) {
            (WriteOp::Put { item, cond, .. }, wire::TransactItem::Put(put)) => {
                let size: usize = put.item.iter().map(|(k, v)| k.len() + attr_size(v)).sum();
                *floor.entry(table.to_string()).or_default() += 2.0 * size.div_ceil(1024) as f64;
                // A new item: each of its index entries is a new entry of at least one unit.
                if *cond == Cond::NotExists {
                    for e in &item.indexes {
                        *floor.entry(format!("{table}/{}", e.index)).or_default() += 2.0;
                    }
                }
            }
            (WriteOp::Delete { .. }, _) => *floor.entry(table.to_string()).or_default() += 2.0,
            _ => {}
        }
    }
    floor
}

/// An attribute value's size as DynamoDB bills it (strings and binaries by their bytes; a
/// number about one byte per two digits).
fn attr_size(v: &Av) -> usize {
    match v {
        Av::S(s) => s.len(),
        Av::B(b) => b.len(),
        Av::N(n) => n.len() / 2 + 1,
        Av::Other => 1,
    }
}

#[async_trait]
impl Store for DynamoStore {
    async fn get(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        self.get_item(table, pk, sk, true).await
    }

    async fn get_eventual(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Item>, StoreError> {
        self.get_item(table, pk, sk, false).await
    }

    async fn get_many(
        &self,
        table: &'static str,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError> {
        let name = self.table(table);
        // BatchGetItem refuses a request that names one key twice.
        let mut seen = std::collections::HashSet::with_capacity(keys.len());
        let unique: Vec<&(String, String)> = keys.iter().filter(|k| seen.insert(*k)).collect();
        let mut found: HashMap<(String, String), Item> = HashMap::with_capacity(keys.len());
        // A few requests in flight at once.
        for group in unique.chunks(MAX_BATCH_GET * BATCH_GETS_AT_ONCE) {
            let read =
                futures_util::future::try_join_all(group.chunks(MAX_BATCH_GET).map(|chunk| {
                    let ask = wire::KeysAndAttributes {
                        keys: chunk.iter().map(|(pk, sk)| key_attrs(pk, sk)).collect(),
                        consistent_read: consistent,
                    };
                    self.batch_get(vec![(name.clone(), ask)])
                }))
                .await?;
            for (_, item) in read.into_iter().flatten() {
                found.insert((item.pk.clone(), item.sk.clone()), item);
            }
        }
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }

    async fn get_each(&self, keys: &[GetKey]) -> Result<Vec<Option<Item>>, StoreError> {
        check_get_each(keys)?;
        let names: Vec<String> = keys.iter().map(|k| self.table(k.table)).collect();
        let mut asks: Vec<(String, wire::KeysAndAttributes)> = Vec::new();
        for (k, name) in keys.iter().zip(&names) {
            let at = match asks.iter().position(|(n, _)| n == name) {
                Some(at) => at,
                None => {
                    asks.push((name.clone(), wire::KeysAndAttributes::default()));
                    asks.len() - 1
                }
            };
            let ask = &mut asks[at].1;
            ask.keys.push(key_attrs(&k.pk, &k.sk));
            // Set per table: the strongest any of its keys asks for.
            ask.consistent_read |= k.consistent;
        }
        let mut found = self.batch_get(asks).await?;
        Ok(keys
            .iter()
            .zip(&names)
            .map(|(k, name)| {
                let at = found
                    .iter()
                    .position(|(n, i)| n == name && i.pk == k.pk && i.sk == k.sk)?;
                Some(found.swap_remove(at).1)
            })
            .collect())
    }

    async fn query_eventual(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        Ok(self
            .query_inner(table, None, pk, range, after, limit, false, false)
            .await?
            .0)
    }

    async fn query(
        &self,
        table: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        Ok(self
            .query_inner(table, None, pk, range, after, limit, false, true)
            .await?
            .0)
    }

    async fn query_index(
        &self,
        table: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        Ok(self
            .query_inner(table, Some(index), pk, range, after, limit, false, false)
            .await?
            .0)
    }

    async fn scan_index_keys(
        &self,
        table: &'static str,
        index: &'static str,
        after: Option<&IndexKey>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        let (ipk, isk) = (format!("{index}_pk"), format!("{index}_sk"));
        let name = self.table(table);
        let mut start = after.map(|k| {
            let mut a = Attrs::new();
            a.insert("pk".into(), s(&k.pk));
            a.insert("sk".into(), s(&k.sk));
            a.insert(ipk.clone(), s(&k.ipk));
            a.insert(isk.clone(), s(&k.isk));
            a
        });
        let key_of = |m: &Attrs| match (text(m, &ipk), text(m, &isk), text(m, "pk"), text(m, "sk"))
        {
            (Some(ipk), Some(isk), Some(pk), Some(sk)) => Ok(IndexKey { ipk, isk, pk, sk }),
            _ => Err(StoreError::Other("index entry lacks its keys".into())),
        };
        loop {
            let req = wire::Query {
                table_name: &name,
                index_name: Some(index),
                projection_expression: Some("pk, sk, #ipk, #isk"),
                expression_attribute_names: vec![("#ipk", ipk.as_str()), ("#isk", isk.as_str())],
                exclusive_start_key: start.take(),
                limit: Some(limit.clamp(1, 1000) as u32),
                ..wire::Query::default()
            };
            let out: wire::PageOut = self.wire.call("Scan", &req).await.map_err(wire_err)?;
            self.count(out.consumed_capacity.as_ref(), false);
            let keys = out
                .items
                .iter()
                .map(key_of)
                .collect::<Result<Vec<_>, _>>()?;
            let next = out.last_evaluated_key.as_ref().map(key_of).transpose()?;
            // A page may come back empty before the scan ends (DynamoDB stops at 1 MB read).
            match next {
                Some(_) if keys.is_empty() => start = out.last_evaluated_key,
                next => return Ok(KeyPage { keys, next }),
            }
        }
    }

    async fn count_index(
        &self,
        table: &'static str,
        index: &'static str,
        pk: &str,
        range: &SkRange,
    ) -> Result<u64, StoreError> {
        Ok(self
            .query_inner(table, Some(index), pk, range, None, 0, true, false)
            .await?
            .1)
    }

    async fn write(&self, op: WriteOp) -> Result<u64, StoreError> {
        match &op {
            WriteOp::Check { .. } => Err(StoreError::Validation(
                "a condition check only exists inside a transaction".into(),
            )),
            WriteOp::Put { table, item, cond } => {
                let (cond, version) = self.resolve_put_cond(table, item, *cond).await?;
                let (name, attrs) = (self.table(table), self.encode(item, version)?);
                let req = wire::PutItem {
                    table_name: &name,
                    item: &attrs,
                    condition: condition(cond),
                    return_consumed_capacity: (),
                };
                let out: wire::ItemOut = self.wire.call("PutItem", &req).await.map_err(wire_err)?;
                self.count(out.consumed_capacity.as_ref(), true);
                Ok(version)
            }
            WriteOp::Delete {
                table,
                pk,
                sk,
                cond,
            } => {
                let name = self.table(table);
                let req = wire::KeyWrite {
                    table_name: &name,
                    key: Key::new(pk, sk),
                    condition: condition(*cond),
                    return_consumed_capacity: Some("INDEXES"),
                };
                let out: wire::ItemOut =
                    self.wire.call("DeleteItem", &req).await.map_err(wire_err)?;
                self.count(out.consumed_capacity.as_ref(), true);
                Ok(0)
            }
        }
    }

    async fn transact(&self, ops: Vec<WriteOp>) -> Result<(), StoreError> {
        check_transaction(&ops)?;
        let names: Vec<String> = ops.iter().map(|op| self.table(op.key().0)).collect();
        let mut items = Vec::with_capacity(ops.len());
        for (op, name) in ops.iter().zip(&names) {
            match self.transact_item(op, name).await {
                Ok(i) => items.push(i),
                // A put whose Exists condition failed while learning its version.
                Err(StoreError::ConditionFailed) => {
                    let reasons = ops.iter().map(|o| std::ptr::eq(o, op)).collect();
                    return Err(StoreError::TransactionCancelled { reasons });
                }
                Err(e) => return Err(e),
            }
        }
        let floor = transaction_floor(&ops, &items);
        let req = wire::TransactWrite {
            transact_items: items,
            return_consumed_capacity: (),
        };
        let code_is = |r: &wire::Reason, c: &str| r.code.as_deref() == Some(c);
        // TransactionConflict (a concurrent transaction on the same item) is not retried by
        // the standard retry; it is retried here with backoff, as AWS advises.
        let mut attempt = 0u32;
        let res = loop {
            let res: Result<wire::TransactOut, _> =
                self.wire.call("TransactWriteItems", &req).await;
            let conflict = match &res {
                Err(WireError::Service { code, reasons, .. })
                    if code == "TransactionCanceledException" =>
                {
                    reasons.iter().any(|r| code_is(r, "TransactionConflict"))
                        && !reasons.iter().any(|r| code_is(r, "ConditionalCheckFailed"))
                }
                _ => false,
            };
            if conflict && attempt < 6 {
                attempt += 1;
                let ms = (10u64 << attempt).min(500);
                tokio::time::sleep(std::time::Duration::from_millis(
                    rand::random::<u64>() % ms + 1,
                ))
                .await;
                continue;
            }
            break res;
        };
        match res {
            Ok(out) => {
                self.usage.requests.fetch_add(1, Ordering::Relaxed);
                self.count_transaction(&out.consumed_capacity, &floor);
                Ok(())
            }
            Err(WireError::Service { code, reasons, .. })
                if code == "TransactionCanceledException" =>
            {
                let failed: Vec<bool> = reasons
                    .iter()
                    .map(|r| code_is(r, "ConditionalCheckFailed"))
                    .collect();
                if failed.iter().any(|&r| r) {
                    return Err(StoreError::TransactionCancelled { reasons: failed });
                }
                if reasons
                    .iter()
                    .any(|r| is_throttle(r.code.as_deref()) || code_is(r, "TransactionConflict"))
                {
                    return Err(StoreError::Throttled);
                }
                Err(StoreError::Other(format!(
                    "transaction cancelled: {:?}",
                    reasons
                        .iter()
                        .map(|r| r.code.as_deref())
                        .collect::<Vec<_>>()
                )))
            }
            Err(e) => Err(wire_err(e)),
        }
    }
}

pub use super::RESOURCES_JSON;

/// `(table, index)` pairs declared with `"projection": "KEYS_ONLY"` in [`RESOURCES_JSON`]:
/// their queries read the items from the table.
fn is_keys_only(table: &str, index: &str) -> bool {
    static KEYS_ONLY: std::sync::OnceLock<std::collections::HashSet<(String, String)>> =
        std::sync::OnceLock::new();
    KEYS_ONLY
        .get_or_init(|| {
            let spec: serde_json::Value = serde_json::from_str(RESOURCES_JSON).unwrap_or_default();
            let mut set = std::collections::HashSet::new();
            for key in ["tables", "test_tables"] {
                for t in spec[key].as_array().into_iter().flatten() {
                    for g in t["indexes"].as_array().into_iter().flatten() {
                        if g["projection"] == "KEYS_ONLY" {
                            set.insert((
                                t["name"].as_str().unwrap_or_default().to_string(),
                                g["name"].as_str().unwrap_or_default().to_string(),
                            ));
                        }
                    }
                }
            }
            set
        })
        .contains(&(table.to_string(), index.to_string()))
}

/// Builds the SDK configuration from the standard AWS environment (`AWS_REGION`,
/// `AWS_ENDPOINT_URL*`, credentials). A missing region is named at once, not at first use.
pub async fn sdk_config() -> Result<aws_config::SdkConfig, String> {
    let cfg = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    if cfg.region().is_none() {
        return Err("AWS_REGION (or AWS_DEFAULT_REGION) is not set".into());
    }
    Ok(cfg)
}

/// The SDK's DynamoDB client, which creates the tables; set `AWS_ENDPOINT_URL` (or
/// `AWS_ENDPOINT_URL_DYNAMODB`) for LocalStack. Each attempt is bounded by [`ATTEMPT_TIMEOUT`].
pub fn client(cfg: &aws_config::SdkConfig) -> Client {
    use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
    let conf = aws_sdk_dynamodb::config::Builder::from(cfg)
        .timeout_config(
            cfg.timeout_config()
                .map(TimeoutConfig::to_builder)
                .unwrap_or_default()
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .build(),
        )
        .build();
    Client::from_conf(conf)
}

/// How long one DynamoDB request may take before it is given up (and retried, as any
/// transient failure is), unless the configuration sets an attempt timeout of its own.
pub const ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Creates the tables of `infra/resources.json` under `prefix` (and the test tables), without
/// streams: servers that publish their own events (the local server, test servers) need none,
/// and every stream costs LocalStack a Kinesis stream.
pub async fn create_tables(
    client: &Client,
    prefix: &str,
    with_test_tables: bool,
) -> Result<(), StoreError> {
    create_tables_with(client, prefix, with_test_tables, false).await
}

/// [`create_tables`] with the streams that `infra/resources.json` declares, as deployed: the
/// tasks table's stream triggers the publisher function.
pub async fn create_tables_with_streams(
    client: &Client,
    prefix: &str,
    with_test_tables: bool,
) -> Result<(), StoreError> {
    create_tables_with(client, prefix, with_test_tables, true).await
}

/// Creates every table of `infra/resources.json` (plus the test tables if `with_test_tables`)
/// under `prefix`, with their GSIs, and waits until they are active. Existing tables are kept.
async fn create_tables_with(
    client: &Client,
    prefix: &str,
    with_test_tables: bool,
    streams: bool,
) -> Result<(), StoreError> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
        Projection, ProjectionType, ScalarAttributeType,
    };
    let spec: serde_json::Value = serde_json::from_str(RESOURCES_JSON).map_err(other)?;
    let mut tables: Vec<serde_json::Value> = spec["tables"].as_array().cloned().unwrap_or_default();
    if with_test_tables {
        tables.extend(spec["test_tables"].as_array().cloned().unwrap_or_default());
    }
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(other)
    };
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(other)
    };
    for t in tables {
        let name = format!("{prefix}{}", t["name"].as_str().unwrap_or_default());
        let mut attrs = vec![attr("pk")?, attr("sk")?];
        let mut gsis = Vec::new();
        for g in t["indexes"].as_array().cloned().unwrap_or_default() {
            let (n, pk, sk) = (
                g["name"].as_str().unwrap_or_default(),
                g["pk"].as_str().unwrap_or_default(),
                g["sk"].as_str().unwrap_or_default(),
            );
            attrs.push(attr(pk)?);
            attrs.push(attr(sk)?);
            gsis.push(
                GlobalSecondaryIndex::builder()
                    .index_name(n)
                    .key_schema(key(pk, KeyType::Hash)?)
                    .key_schema(key(sk, KeyType::Range)?)
                    .projection(
                        Projection::builder()
                            .projection_type(ProjectionType::from(
                                g["projection"].as_str().unwrap_or("ALL"),
                            ))
                            .build(),
                    )
                    .build()
                    .map_err(other)?,
            );
        }
        // The tasks table's stream feeds the publisher function (NEW_IMAGE: the outbox).
        let stream = match t["stream"].as_str().filter(|_| streams) {
            Some(view) => Some(
                aws_sdk_dynamodb::types::StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::from(view))
                    .build()
                    .map_err(other)?,
            ),
            None => None,
        };
        let res = client
            .create_table()
            .table_name(&name)
            .set_attribute_definitions(Some(attrs))
            .key_schema(key("pk", KeyType::Hash)?)
            .key_schema(key("sk", KeyType::Range)?)
            .set_global_secondary_indexes((!gsis.is_empty()).then_some(gsis))
            .set_stream_specification(stream)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match res {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) => {}
            Err(e) => return Err(other(e)),
        }
        wait_active(client, &name).await?;
    }
    Ok(())
}

/// Waits (up to a minute) until a table and its indexes are active.
async fn wait_active(client: &Client, name: &str) -> Result<(), StoreError> {
    use aws_sdk_dynamodb::types::{IndexStatus, TableStatus};
    for _ in 0..600 {
        let d = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(other)?;
        let Some(t) = d.table() else { continue };
        let indexes_ready = t
            .global_secondary_indexes()
            .iter()
            .all(|g| g.index_status() == Some(&IndexStatus::Active));
        if t.table_status() == Some(&TableStatus::Active) && indexes_ready {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(StoreError::Other(format!(
        "table {name} did not become active"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each item of a transaction is billed on its own (DynamoDB Local rounds them together).
    #[test]
    fn a_transaction_costs_at_least_two_units_per_kb_of_each_item_and_per_new_index_entry() {
        let put = |pk: &str, body: usize, cond: Cond| {
            let entry = IndexEntry {
                index: "task-expiry",
                pk: "e".into(),
                sk: pk.into(),
            };
            let item = Item::new(pk, "def", serde_json::json!({}), vec![entry]);
            let mut attrs = Attrs::from([
                ("pk".into(), s(pk)),
                ("sk".into(), s("def")),
                ("d".into(), Av::B(vec![7u8; body])),
            ]);
            attrs.insert("task-expiry_pk".into(), s("e"));
            let built = wire::TransactItem::Put(wire::TransactPut {
                table_name: "p-tasks",
                item: attrs,
                condition: Condition::default(),
            });
            let op = WriteOp::Put {
                table: "tasks",
                item,
                cond,
            };
            (op, built)
        };
        let delete = WriteOp::Delete {
            table: "task-groups",
            pk: "g".into(),
            sk: "m".into(),
            cond: Cond::None,
        };
        let delete_built = wire::TransactItem::Delete(wire::KeyWrite {
            table_name: "p-task-groups",
            key: Key::new("g", "m"),
            condition: Condition::default(),
            return_consumed_capacity: None,
        });
        // Three small new items, one of 3,000 bytes replacing another, a deletion.
        let mut pairs: Vec<(WriteOp, wire::TransactItem)> = ["a", "b", "c"]
            .iter()
            .map(|pk| put(pk, 100, Cond::NotExists))
            .collect();
        pairs.push(put("d", 3000, Cond::Version(4)));
        pairs.push((delete, delete_built));
        let (ops, items): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let floor = transaction_floor(&ops, &items);
        assert_eq!(floor.get("tasks"), Some(&(3.0 * 2.0 + 2.0 * 3.0)));
        // The replaced item's entries may be unchanged: only the new items' count.
        assert_eq!(floor.get("tasks/task-expiry"), Some(&6.0));
        assert_eq!(floor.get("task-groups"), Some(&2.0));
        assert_eq!(floor.len(), 3);
    }

    /// The state kept per thread deflates each item as a fresh encoder would (the stored
    /// format is unchanged) and inflates it back, one item after another.
    #[test]
    fn deflating_with_the_kept_state_matches_a_fresh_encoder_and_round_trips() {
        use std::io::Write as _;
        let mut noise = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..300_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push(x as u8);
        }
        let items: [&[u8]; 4] = [
            b"",
            br#"{"taskId":"a","runs":[]}"#,
            &[b'x'; 100_000],
            &noise,
        ];
        for _ in 0..2 {
            for item in items {
                let mut fresh = flate2::write::DeflateEncoder::new(Vec::new(), LEVEL);
                fresh.write_all(item).unwrap();
                let deflated = deflate(item).unwrap();
                assert_eq!(deflated, fresh.finish().unwrap(), "{} bytes", item.len());
                assert_eq!(inflate(&deflated).unwrap(), item);
            }
        }
        let whole = deflate(&noise).unwrap();
        let cut = inflate(&whole[..whole.len() / 2]);
        assert!(cut.is_err(), "cut short");
        let bomb = deflate(&vec![b'x'; MAX_ITEM_BYTES * 5]).unwrap();
        assert!(inflate(&bomb).is_err(), "past the limit");
        assert_eq!(inflate(&deflate(b"after").unwrap()).unwrap(), b"after");
    }

    /// Item data deflated by another encoder (zlib's, here; builds before 2026-12-07 used
    /// miniz_oxide) inflates: the stored format is raw deflate, whichever encoder wrote it.
    #[test]
    fn data_deflated_by_another_encoder_inflates() {
        let json = br#"{"taskId":"fN1SbArXTPSVFNUvaOlinQ","runs":[{"runId":0,"state":"running","reasonCreated":"scheduled","workerGroup":"us-east-1","workerId":"i-0123456789abcdef0"}],"outbox":[{"exchange":"task-running","routingKey":"primary.fN1SbArXTPSVFNUvaOlinQ.0.us-east-1.i-0123456789abcdef0"}]}"#;
        // Python's `zlib.compressobj(6, zlib.DEFLATED, -15)`: one dynamic Huffman block.
        let hex = "6d8f490bc2400c85ff4bced3d2badb9b088a08557141100fd376baa0ce9459d452fadfcdf4503cf49447de4bbea4064dd56393400069e81fa385bc9ef6c7cb2a3cbfe9ee59f0031090862b086eb51536e911509a6a8633d8e105cf6c885125f8128b66769b8a739698276a021f211f4caea530253a463998d58edf392dbe703c7f301c8d27d3d99c4671c2520f9a3b01617424be2d9f7de39cf2cc82edd5ce1f1d53a8b6ac42af94c58bcacaed7fc8f5dcee02b71fdafc00";
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(inflate(&bytes).unwrap(), json);
    }

    /// The endpoint is the SDK's rules' answer for the configured region, or the configured
    /// URL (LocalStack).
    #[test]
    fn requests_go_to_the_regions_endpoint_or_the_configured_url() {
        let cfg = |region: &'static str, url: Option<&str>| {
            let mut b = aws_config::SdkConfig::builder()
                .region(aws_config::Region::from_static(region))
                .behavior_version(aws_config::BehaviorVersion::latest());
            b.set_endpoint_url(url.map(String::from));
            b.build()
        };
        let url = |c| wire::Wire::new(&c).expect("client").url();
        assert_eq!(
            url(cfg("eu-west-1", None)),
            "https://dynamodb.eu-west-1.amazonaws.com/"
        );
        assert_eq!(
            url(cfg("cn-north-1", None)),
            "https://dynamodb.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(
            url(cfg("us-east-1", Some("http://127.0.0.1:4566"))),
            "http://127.0.0.1:4566/"
        );
        let no_region = aws_config::SdkConfig::builder().build();
        assert!(wire::Wire::new(&no_region).is_err());
    }
}
