//! A store's change log: the port through which a process that has no DynamoDB stream (the
//! local server over the embedded store) reads its tables' streams itself. Its promises are
//! exactly those of a DynamoDB stream with `NEW_IMAGE` records, read by one consumer per
//! reader name:
//! - every write that changes an item of a streamed table appears once, as the item's new
//!   image, after the write commits (a delete, whose record has no new image, does not);
//! - the changes of one item appear in the order of its writes;
//! - a reader that does not mark what it handled ([`ChangeLog::passed`]) reads it again:
//!   delivery is at least once, so what a reader does must be safe to repeat;
//! - one holder at a time follows a reader ([`ChangeLog::hold`]), as a stream's shard has
//!   one consumer, so that processes sharing a store do not all handle every change.
//!
//! A reader's position is kept in the store, so a killed process's successor goes on from it;
//! what every reader has passed is forgotten.

use super::{Item, StoreError};
use crate::time::Ts;
use async_trait::async_trait;
use std::sync::Arc;
use tokio::sync::Notify;

/// One change: a streamed table's item as a write left it.
#[derive(Debug, Clone)]
pub struct Change {
    /// Where the change stands in the log (increasing, with gaps).
    pub seq: u64,
    /// The item's table.
    pub table: &'static str,
    /// The item's new image.
    pub item: Item,
}

/// A page of the log read from a position.
#[derive(Debug, Clone, Default)]
pub struct ChangePage {
    /// The changes of the tables asked for, in log order.
    pub changes: Vec<Change>,
    /// The position after this page, which the next read starts from (past changes of other
    /// tables too); the position read from when the page is empty.
    pub next: u64,
    /// True if the log may hold more after `next`.
    pub more: bool,
}

/// The change log of a store's streamed tables.
#[async_trait]
pub trait ChangeLog: Send + Sync + 'static {
    /// Where `reader` stands: what it last [marked](ChangeLog::passed), 0 at first.
    async fn position(&self, reader: &str) -> Result<u64, StoreError>;

    /// Up to `limit` changes after position `after`, of `tables` only, in log order.
    async fn changes_after(
        &self,
        after: u64,
        tables: &[&'static str],
        limit: usize,
    ) -> Result<ChangePage, StoreError>;

    /// Marks everything up to `seq` handled by `reader` (a position never moves back); the
    /// log then forgets what every reader has passed.
    async fn passed(&self, reader: &str, seq: u64) -> Result<(), StoreError>;

    /// Takes `reader` for `holder` until `until`, or keeps it, unless another holder has it
    /// past `now` (but for `or_from`, a holder known to be gone); true if `holder` holds it
    /// then. A holder killed holding it keeps others out until `until`, unless they can tell
    /// it is gone; an `until` at or before `now` lets it go at once.
    async fn hold(
        &self,
        reader: &str,
        holder: &str,
        now: Ts,
        until: Ts,
        or_from: Option<&str>,
    ) -> Result<bool, StoreError>;

    /// Who holds `reader`, if anyone ever took it, and until when.
    async fn holder(&self, reader: &str) -> Result<Option<(String, Ts)>, StoreError>;

    /// Notified (every waiter) after a write of this process appended to the log. Only a
    /// hint that shortens a reader's wait: another process's writes show at its next look.
    fn appended(&self) -> Arc<Notify>;
}
