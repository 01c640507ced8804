//! Background work as single passes: each call does one bounded unit and returns what it did.
//! The loops, intervals and schedules live outside (local server timers, EventBridge rules).

use crate::events::{drain_all, EventSink};
use crate::queue::Queue;
use crate::time::Ts;

/// What one pass of every background job did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// Claims expired.
    pub claims_expired: usize,
    /// Tasks resolved by their deadline.
    pub deadlines_exceeded: usize,
    /// Events delivered.
    pub events_delivered: usize,
}

/// Items each job handles per shard and pass.
pub const BATCH: usize = 100;

/// One pass of the claim reaper.
pub async fn claims(queue: &Queue, now: Ts) -> Result<usize, String> {
    queue
        .reap_claims_once(now, BATCH)
        .await
        .map_err(|e| e.to_string())
}

/// One pass of the deadline reaper.
pub async fn deadlines(queue: &Queue, now: Ts) -> Result<usize, String> {
    queue
        .reap_deadlines_once(now, BATCH)
        .await
        .map_err(|e| e.to_string())
}

/// One pass of the outbox publisher.
pub async fn outbox(queue: &Queue, sink: &dyn EventSink) -> Result<usize, String> {
    drain_all(
        queue.store.as_ref(),
        sink,
        &queue.cfg.exchange_prefix,
        BATCH,
    )
    .await
    .map_err(|e| e.to_string())
}
