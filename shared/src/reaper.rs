//! Background work as single passes: each call does one bounded unit and returns what it did.
//! The loops, intervals and schedules live outside (local server timers, EventBridge rules).

use crate::events::{drain_all, EventSink};
use crate::keys;
use crate::model::TaskRecord;
use crate::queue::Queue;
use crate::scheduler::{GraphRecord, Scheduler};
use crate::store::Item;
use crate::time::Ts;
use std::sync::atomic::Ordering;

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

/// One pass of the dependency worker: satisfies the dependents of tasks that resolved.
/// Runs locally on a timer (and whenever a resolution is written); in AWS, the same pass
/// suits a scheduled function or one triggered by the table's stream.
pub async fn dependencies(queue: &Queue, now: Ts) -> Result<usize, String> {
    queue
        .resolve_dependents_once(now, BATCH)
        .await
        .map_err(|e| e.to_string())
}

/// The dependency worker for a batch of changed items (the tasks table's stream in AWS):
/// every status image that carries a resolution mark gets its dependents looked at now,
/// rather than at the next scheduled pass. Repeats are harmless: the mark is cleared by a
/// write conditioned on the image's version, and a lost one finds the mark gone.
pub async fn dependencies_of(queue: &Queue, images: Vec<Item>, now: Ts) -> Result<usize, String> {
    // The newest image of each marked task; the record in it saves the read (a write
    // conditioned on its version confirms it, or the task is read again).
    let mut newest: std::collections::BTreeMap<String, Item> = Default::default();
    for image in images {
        if image.sk != keys::SK_STATUS
            || image.data.get("dependentsDue").is_none_or(|d| d.is_null())
        {
            continue;
        }
        match newest.get(&image.pk) {
            Some(seen) if seen.version >= image.version => {}
            _ => {
                newest.insert(image.pk.clone(), image);
            }
        }
    }
    let mut marked = newest.into_values().map(|i| {
        let rec = serde_json::from_value::<TaskRecord>(i.data).ok();
        (i.pk, rec.map(|r| (r, i.version)))
    });
    let mut n = 0;
    let mut failed = None;
    loop {
        let chunk: Vec<_> = marked.by_ref().take(16).collect();
        if chunk.is_empty() {
            break;
        }
        let ids: Vec<String> = chunk.iter().map(|(id, _)| id.clone()).collect();
        let done = futures_util::future::join_all(chunk.into_iter().map(|(id, rec)| async move {
            match rec {
                Some(loaded) => queue.resolve_dependents_of(loaded, now).await,
                None => queue.resolve_dependents(&id, now).await,
            }
        }))
        .await;
        for (id, result) in ids.iter().zip(done) {
            match result {
                Ok(satisfied) => n += satisfied,
                Err(e) => {
                    // Where the stream is the only trigger (no `resolved` entry), leave the
                    // task to the scheduled pass before the batch is retried.
                    queue
                        .hold_resolution(id)
                        .await
                        .map_err(|h| format!("{e}; holding it failed too: {h}"))?;
                    failed = Some(e.to_string());
                }
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// One pass of the expiry job: deletes expired tasks, dependency edges and task groups.
pub async fn expiry(queue: &Queue, now: Ts) -> Result<usize, String> {
    queue
        .expire_once(now, BATCH)
        .await
        .map_err(|e| e.to_string())
}

/// Delivers the events of the tasks this process just wrote (the fast path; the full pass
/// below remains the safety net for anything else), and of the task graphs if this process
/// wrote any.
pub async fn outbox_recent(queue: &Queue, sink: &dyn EventSink) -> Result<usize, String> {
    let written = queue.take_dirty();
    let mut n = match crate::events::drain_written(
        queue.store.as_ref(),
        sink,
        &queue.cfg.exchange_prefix,
        written,
        &queue.published,
    )
    .await
    {
        Ok(crate::events::DrainOutcome::Delivered(n)) => n,
        Ok(crate::events::DrainOutcome::Empty) => 0,
        Err(e) => return Err(e.to_string()),
    };
    if queue.graph_events.swap(false, Ordering::SeqCst) {
        n += graph_outboxes(queue, sink).await.inspect_err(|_| {
            // Look again next time.
            queue.graph_events.store(true, Ordering::SeqCst);
        })?;
    }
    Ok(n)
}

async fn graph_outboxes(queue: &Queue, sink: &dyn EventSink) -> Result<usize, String> {
    Scheduler::drain_graph_events(queue, sink)
        .await
        .map_err(|e| e.to_string())
}

/// One pass of the outbox publisher over every shard of the outbox index, the tasks' and
/// the task graphs'.
pub async fn outbox(queue: &Queue, sink: &dyn EventSink) -> Result<usize, String> {
    let tasks = drain_all::<TaskRecord>(
        queue.store.as_ref(),
        sink,
        &queue.cfg.exchange_prefix,
        BATCH,
        // The fast path above holds these (with their events) and will deliver them; draining
        // them here too would publish their events twice.
        &|task_id| queue.is_dirty(task_id),
        &queue.published,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(tasks + graph_outboxes(queue, sink).await?)
}

/// Delivers the outboxes in a batch of changed items (the tables' streams in AWS): task
/// status images with the queue's prefix, task graph images with the scheduler's.
pub async fn outbox_stream(
    queue: &Queue,
    sink: &dyn EventSink,
    images: Vec<Item>,
) -> Result<usize, String> {
    let (graphs, tasks): (Vec<Item>, Vec<Item>) = images
        .into_iter()
        .partition(|i| i.sk == keys::SK_TASK_GRAPH);
    let mut n = 0;
    for outcome in [
        crate::events::drain_stream::<TaskRecord>(
            queue.store.as_ref(),
            sink,
            &queue.cfg.exchange_prefix,
            tasks,
            &queue.published,
        )
        .await,
        crate::events::drain_stream::<GraphRecord>(
            queue.store.as_ref(),
            sink,
            &queue.cfg.scheduler_exchange_prefix,
            graphs,
            &queue.published,
        )
        .await,
    ] {
        if let crate::events::DrainOutcome::Delivered(d) = outcome.map_err(|e| e.to_string())? {
            n += d;
        }
    }
    Ok(n)
}
