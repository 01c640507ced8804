//! Process-local hints about what this process just wrote, for the background loops that run
//! in the same process (the local server's publisher and dependency loop). They only shorten
//! the wait: the `outbox` and `resolved` indexes remain the record, so nothing is lost if a
//! hint is dropped or the process dies. Lambda functions have no such loops (the tables'
//! streams trigger the publisher and the dependency resolver) and observe nothing.

use crate::records::task::TaskRecord;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
}

impl WriteObserver for LocalHints {
    fn task_written(&self, rec: &TaskRecord, version: u64) {
        if rec.dependents_due.is_some() {
            self.dependents_waiting.notify_one();
        }
        if rec.outbox.is_empty() {
            return;
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
