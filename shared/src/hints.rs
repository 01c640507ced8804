//! Process-local hints about what this process just wrote, for the background loops that run
//! in the same process (the local server's publisher and dependency loop). They only shorten
//! the wait: the `outbox` and `resolved` indexes remain the record, so nothing is lost if a
//! hint is dropped or the process dies. Lambda functions have no such loops (the tables'
//! streams trigger the publisher and the dependency resolver) and observe nothing.

use crate::records::task::TaskRecord;
use crate::store::shard::Shards;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// Told of every write of a task status or a task graph that this process makes.
pub trait WriteObserver: Send + Sync + 'static {
    /// A task status was written and now stands as `rec` at `version`.
    fn task_written(&self, rec: &TaskRecord, version: u64);
    /// A task graph with new events was written.
    fn graph_written(&self);
}

/// Observes nothing (Lambda functions, tools).
pub struct NoHints;

impl WriteObserver for NoHints {
    fn task_written(&self, _: &TaskRecord, _: u64) {}
    fn graph_written(&self) {}
}

/// Publisher hints kept before further ones are dropped (the outbox sweep delivers those).
const DIRTY_MAX: usize = 10_000;

/// The local server's hints: which records wait for the publisher, and wake-ups for the
/// publisher and dependency loops.
#[derive(Default)]
pub struct LocalHints {
    /// Tasks written with events since the publisher last looked, at their latest version.
    dirty: Mutex<HashMap<String, (TaskRecord, u64)>>,
    /// Set when a task graph got events.
    graph_events: AtomicBool,
    /// Notified whenever new events sit in an outbox.
    pub events_waiting: Arc<Notify>,
    /// Notified whenever a resolved task awaits the dependency worker.
    pub dependents_waiting: Arc<Notify>,
    /// Set when a resolution was written with events: the dependency worker is woken once
    /// the publisher has delivered them ([`LocalHints::drained`]). Both rewrite the record (to
    /// clear the mark; to remove the delivered events), and woken together they raced for
    /// its version: the loser read, counted and wrote again (0.9 times a life cycle in the
    /// lifecycle bench).
    dependents_after_drain: AtomicBool,
    /// The `resolved` index's shards this process marked since the dependency worker last
    /// looked ([`LocalHints::take_resolved_shards`]), as [`Shards`] bits.
    resolved_shards: AtomicU32,
}

impl LocalHints {
    /// True if a record of this task waits in the hints (the sweep leaves it to the fast path).
    pub fn is_dirty(&self, task_id: &str) -> bool {
        self.dirty.lock().is_ok_and(|d| d.contains_key(task_id))
    }

    /// Takes the records written with events since the last call: the latest per task.
    pub fn take_dirty(&self) -> Vec<(TaskRecord, u64)> {
        self.dirty
            .lock()
            .map(|mut d| std::mem::take(&mut *d).into_values().collect())
            .unwrap_or_default()
    }

    /// Takes the "a graph has events" flag.
    pub fn take_graph_events(&self) -> bool {
        self.graph_events.swap(false, Ordering::SeqCst)
    }

    /// Sets the flag again (its events could not be delivered yet).
    pub fn keep_graph_events(&self) {
        self.graph_events.store(true, Ordering::SeqCst);
    }

    /// The shards of the resolutions written since the last call: a pass woken by them need
    /// not look at the others (the loop's timed passes look at every shard).
    pub fn take_resolved_shards(&self) -> Shards {
        Shards::from_bits(self.resolved_shards.swap(0, Ordering::SeqCst))
    }

    /// The publisher went through the records it took ([`LocalHints::take_dirty`]),
    /// delivered or not: wakes the dependency worker for the resolutions among them.
    pub fn drained(&self) {
        if self.dependents_after_drain.swap(false, Ordering::SeqCst) {
            self.dependents_waiting.notify_one();
        }
    }
}

impl WriteObserver for LocalHints {
    fn task_written(&self, rec: &TaskRecord, version: u64) {
        if rec.dependents_due.is_some() {
            // Set before the wake-up below or after the drain, so the woken pass sees it.
            let shard = Shards::of(&rec.task_id).bits();
            self.resolved_shards.fetch_or(shard, Ordering::SeqCst);
        }
        if rec.outbox.is_empty() {
            if rec.dependents_due.is_some() {
                self.dependents_waiting.notify_one();
            }
            return;
        }
        if rec.dependents_due.is_some() {
            self.dependents_after_drain.store(true, Ordering::SeqCst);
        }
        if let Ok(mut d) = self.dirty.lock() {
            let newer = d.get(&rec.task_id).is_none_or(|(_, v)| *v < version);
            if newer && (d.len() < DIRTY_MAX || d.contains_key(&rec.task_id)) {
                d.insert(rec.task_id.clone(), (rec.clone(), version));
            }
        }
        self.events_waiting.notify_one();
    }

    fn graph_written(&self) {
        self.graph_events.store(true, Ordering::SeqCst);
        self.events_waiting.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::Exchange;
    use crate::time::Ts;
    use std::time::Duration;

    async fn woken(h: &LocalHints) -> bool {
        let wait = h.dependents_waiting.notified();
        tokio::time::timeout(Duration::from_millis(50), wait)
            .await
            .is_ok()
    }

    fn resolved(task_id: &str, events: bool) -> TaskRecord {
        let mut rec = TaskRecord::for_test(task_id);
        rec.dependents_due = Some(Ts(5));
        if events {
            rec.emit(Exchange::TaskCompleted, None, false, Default::default());
        }
        rec
    }

    #[tokio::test]
    async fn a_resolution_with_events_wakes_the_dependency_worker_once_they_are_drained() {
        let h = LocalHints::default();
        h.task_written(&resolved("T1", true), 3);
        assert!(!woken(&h).await, "not before the publisher went through it");
        h.drained();
        assert!(woken(&h).await);
        assert_eq!(h.take_resolved_shards(), Shards::of("T1"));
        assert_eq!(h.take_resolved_shards(), Shards::NONE, "taken once");
        h.drained();
        assert!(!woken(&h).await, "one wake-up per resolution");
    }

    #[tokio::test]
    async fn a_resolution_without_events_wakes_the_dependency_worker_at_once() {
        let h = LocalHints::default();
        h.task_written(&resolved("T2", false), 3);
        assert!(woken(&h).await);
        assert_eq!(h.take_resolved_shards(), Shards::of("T2"));
        h.task_written(&TaskRecord::for_test("T3"), 1);
        assert!(!woken(&h).await, "an unresolved task wakes nobody");
        assert_eq!(h.take_resolved_shards(), Shards::NONE);
    }
}
