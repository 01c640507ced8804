//! Wait slots: a claimWork about to long-poll holds one while it waits, so that the
//! claim-work function can tell when its waits fill its reserved concurrency (every waiting
//! call holds one function instance) and answer at once instead of being throttled.
//!
//! | table         | pk                   | sk     | what                                |
//! |---------------|----------------------|--------|-------------------------------------|
//! | `task-groups` | `claim-work-slot#<n>` | `slot` | held until `until` (ms), or deleted |
//!
//! The table has no stream, so slots trigger nothing; `#` never occurs in a taskGroupId,
//! so slot partitions never meet a group's.

use crate::store::{Cond, Item, WriteOp};
use crate::time::Ts;
use serde_json::json;

pub use super::group::TASK_GROUPS as TABLE;

/// Sort key of every slot item.
pub const SK: &str = "slot";

/// Partition key of slot `n`.
pub fn pk(n: u32) -> String {
    format!("claim-work-slot#{n}")
}

/// The item of slot `n`, held until `until`.
pub fn item(n: u32, until: Ts) -> Item {
    Item::new(pk(n), SK, json!({ "until": until.0 }), vec![])
}

/// When a stored slot is free again.
pub fn held_until(item: &Item) -> Ts {
    Ts(item.data["until"].as_i64().unwrap_or(0))
}

/// Takes slot `n` until `until`, if it is free (`None`) or its holder's time ran out
/// (`Some(version)` of the stale item).
pub fn take(n: u32, until: Ts, stale: Option<u64>) -> WriteOp {
    WriteOp::Put {
        table: TABLE,
        item: item(n, until),
        cond: stale.map_or(Cond::NotExists, Cond::Version),
    }
}

/// Gives slot `n` back, if it is still held at `version` (by the caller).
pub fn give_back(n: u32, version: u64) -> WriteOp {
    WriteOp::Delete {
        table: TABLE,
        pk: pk(n),
        sk: SK.to_string(),
        cond: Cond::Version(version),
    }
}
