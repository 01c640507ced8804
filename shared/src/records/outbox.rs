//! The outbox: events written into the item of the record they concern, in the same
//! conditional write as the change they announce, and removed once published.

use crate::store::{Data, IndexEntry};
use crate::time::Ts;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// A message body as JSON text. It is built once, when its event is, and stored and read
/// back without being parsed: only publication parses it (to check its schema). A `Value`
/// here cost every write and read of an outbox a tree of nodes built, copied and dropped.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// The body `body` serializes to. Our bodies always serialize; one that did not would be
    /// a bug: it is logged, and its stand-in (`null`) fails every message schema, so that
    /// publication keeps it aside as a dead letter.
    pub fn of<T: Serialize + ?Sized>(body: &T) -> Payload {
        match serde_json::value::to_raw_value(body) {
            Ok(raw) => Payload(raw),
            Err(e) => {
                tracing::error!(error = %e, "BUG: an event body does not serialize");
                Payload(RawValue::NULL.to_owned())
            }
        }
    }

    /// The body as a `Value`.
    pub fn parse(&self) -> serde_json::Result<Value> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

/// An event waiting in a record's outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxEvent {
    /// Unique id, so that delivery can remove exactly what it published.
    pub id: String,
    /// Short exchange name, e.g. `task-pending`; the publisher adds the prefix.
    pub exchange: String,
    /// Primary routing key.
    pub routing_key: String,
    /// CC routing keys (`route.<r>`).
    pub cc: Vec<String>,
    /// The message body.
    pub payload: Payload,
    /// The run the event is about, for an event added since its record was read (never
    /// stored: counting a write's resolutions reads it without parsing the body).
    #[serde(skip)]
    pub run_id: Option<u32>,
    /// True for an event added since its record was read (never stored): the next write of a
    /// record whose events the stream delivers keeps only these (see
    /// [`crate::records::task::TaskRecord::sweep`]).
    #[serde(skip)]
    pub fresh: bool,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

/// A record that keeps the events of its own changes in an outbox inside its item, so that
/// each event is written in the same conditional write as the change it announces: a task's
/// status item (queue events) or a task graph's item (scheduler events).
pub trait Outboxed:
    Clone + Serialize + serde::de::DeserializeOwned + Send + Sync + 'static
{
    /// The table its items live in.
    const TABLE: &'static str;
    /// The sort key of its items (their partition key is [`Outboxed::pk`]).
    const SK: &'static str;
    /// Its partition key.
    fn pk(&self) -> &str;
    /// The events waiting to be published.
    fn outbox(&self) -> &[OutboxEvent];
    /// The same, to remove what was published.
    fn outbox_mut(&mut self) -> &mut Vec<OutboxEvent>;
    /// The index entries of its item as it stands (the outbox entry while events wait).
    fn index_entries(&self) -> Vec<IndexEntry>;
    /// True if a table stream delivers this record's events: each write stores only its own,
    /// which its stream record carries, and publishers remove nothing (see
    /// [`crate::records::task::TaskRecord::sweep`]).
    fn stream_delivered(&self) -> bool {
        false
    }
    /// Makes the record's events wait in its outbox until a publisher removes them, findable
    /// by the outbox sweeper; `since` is when delivering them first failed.
    fn hold_for_sweep(&mut self, _since: Ts) {}
    /// Since when the events it holds for the sweeper have waited, if a stream publisher
    /// held them.
    fn held_since(&self) -> Option<Ts> {
        None
    }
    /// Forgets [`Outboxed::held_since`] (its outbox emptied).
    fn clear_held(&mut self) {}
}

/// The data of an outboxed record's item: the record, except that where the stream delivers
/// the events, its outbox holds only those this write adds (each earlier write's own are in
/// its stream record).
pub fn stored_data<R: Outboxed>(rec: &R) -> serde_json::Result<Data> {
    if !rec.stream_delivered() || rec.outbox().iter().all(|e| e.fresh) {
        return Data::encode(rec);
    }
    let mut fresh = rec.clone();
    fresh.outbox_mut().retain(|e| e.fresh);
    Data::encode(&fresh)
}

/// What a stream publisher reads of an outboxed record's image: its events, and whether the
/// stream delivers them; every other attribute is skipped, not built. Task statuses and task
/// graphs name both alike (`records::outbox::tests`).
#[derive(Debug, Deserialize)]
pub struct Outbound {
    /// The events the image carries.
    #[serde(default)]
    pub outbox: Vec<OutboxEvent>,
    /// As the record's `sweep`: false where the stream delivers its events.
    #[serde(default = "sweep_by_default")]
    pub sweep: bool,
}

/// Records written before their `sweep` flag existed always had their outbox entry.
pub(crate) fn sweep_by_default() -> bool {
    true
}

/// Index name of the records holding undelivered events (on every table with outboxes).
pub const OUTBOX_INDEX: &str = "outbox";

/// The outbox entry of a record with undelivered events, keyed by its partition key.
pub fn outbox_entry(pk: &str) -> IndexEntry {
    use crate::store::shard::{shard_of, shard_pk};
    IndexEntry {
        index: OUTBOX_INDEX,
        pk: shard_pk(OUTBOX_INDEX, shard_of(pk)),
        sk: pk.to_string(),
    }
}
