//! The work-signal port: wakes claimWork long polls when a task queue gets pending work.
//! Signals are hints only; a waiter always re-reads the pending index.
//!
//! [`LocalSignal`] wakes waiters of this process only. [`amqp::AmqpSignal`] (with the `amqp`
//! feature) also carries each wake-up through RabbitMQ to every other process that has a
//! claimWork waiting on the same task queue: other Lambda functions, other servers.

#[cfg(feature = "amqp")]
pub mod amqp;

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Wakes and waits for "this task queue may have pending work".
#[async_trait]
pub trait WorkSignal: Send + Sync + 'static {
    /// A token for the queue's current generation; take it *before* looking for work.
    fn token(&self, task_queue_id: &str) -> u64;
    /// Signals new pending work on a queue.
    fn notify(&self, task_queue_id: &str);
    /// Waits until the queue's generation moves past `token`, or `timeout` passes.
    async fn wait(&self, task_queue_id: &str, token: u64, timeout: Duration);
    /// True when a notify for `task_queue_id` from any process reaches this process's
    /// waiters now (so a waiter may re-read the index less often).
    fn crosses_processes(&self, _task_queue_id: &str) -> bool {
        false
    }
    /// Waits (at most `within`) until the wake-ups notified so far have left this process; a
    /// Lambda function calls it before answering, as it is frozen afterwards.
    async fn flush(&self, _within: Duration) {}
}

#[derive(Default)]
struct Slot {
    generation: u64,
    notify: Arc<Notify>,
}

/// In-process signals (the local server, and a warm Lambda container).
#[derive(Default)]
pub struct LocalSignal {
    slots: Mutex<HashMap<String, Slot>>,
}

impl LocalSignal {
    fn with_slot<T>(&self, q: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        f(slots.entry(q.to_string()).or_default())
    }
}

#[async_trait]
impl WorkSignal for LocalSignal {
    fn token(&self, q: &str) -> u64 {
        self.with_slot(q, |s| s.generation)
    }

    fn notify(&self, q: &str) {
        let n = self.with_slot(q, |s| {
            s.generation += 1;
            s.notify.clone()
        });
        n.notify_waiters();
    }

    async fn wait(&self, q: &str, token: u64, timeout: Duration) {
        let notify = self.with_slot(q, |s| s.notify.clone());
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Re-check after enabling, so that a notify between token() and here is not lost.
        if self.token(q) != token {
            return;
        }
        let _ = tokio::time::timeout(timeout, notified).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_notify_after_the_token_is_never_lost() {
        let s = LocalSignal::default();
        let t = s.token("q");
        s.notify("q");
        let start = std::time::Instant::now();
        s.wait("q", t, Duration::from_secs(5)).await;
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn waiting_wakes_on_notify() {
        let s = Arc::new(LocalSignal::default());
        let t = s.token("q");
        let s2 = s.clone();
        let h = tokio::spawn(async move { s2.wait("q", t, Duration::from_secs(10)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.notify("q");
        tokio::time::timeout(Duration::from_secs(2), h)
            .await
            .unwrap()
            .unwrap();
    }
}
