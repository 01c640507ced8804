//! Background work as single passes: each call does one bounded unit and returns what it did.
//! The loops, intervals and schedules live outside (local server timers, EventBridge rules).

use crate::events::{drain_all, EventSink};
use crate::queue::Queue;
use crate::time::Ts;

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

/// Delivers the events of the tasks this process just wrote (the fast path; the full pass
/// below remains the safety net for anything else).
pub async fn outbox_recent(queue: &Queue, sink: &dyn EventSink) -> Result<usize, String> {
    let mut n = 0;
    for id in queue.take_dirty() {
        match crate::events::drain_task(queue.store.as_ref(), sink, &queue.cfg.exchange_prefix, &id)
            .await
        {
            Ok(crate::events::DrainOutcome::Delivered(k)) => n += k,
            Ok(crate::events::DrainOutcome::Empty) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(n)
}

/// One pass of the outbox publisher over every shard of the outbox index.
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
