//! The work-signal port: wakes claimWork long polls when a task queue gets pending work.
//! Signals are hints only. A wake-up may carry the run that caused it ([`Hint`]), which the
//! woken waiter tries to claim at once, without reading the pending index first; when it
//! carries none, or its run is gone, the waiter reads the index.
//!
//! Each new pending run wakes **one** waiter, not all of them: with a thousand workers waiting
//! on one queue, waking all would have every one re-read the same pending head and race for
//! it (a read each and a failed conditional write for all but one, per run). A waiter that
//! leaves holding a wake-up it has not used (its call found work, timed out or was cancelled)
//! hands it on, so a run's wake-up is used by someone who reads after it.
//!
//! [`LocalSignal`] wakes waiters of this process only. [`amqp::AmqpSignal`] (with the `amqp`
//! feature) also carries each wake-up through RabbitMQ to one waiter of any other process
//! waiting on the same task queue: other Lambda functions, other servers.

#[cfg(feature = "amqp")]
pub mod amqp;

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What a wake-up may carry: the run made pending, as its write stored it, opaque here (the
/// queue encodes and decodes it). Like an index entry it may be stale by the time it is
/// used: the claim is conditioned on the version it names.
pub type Hint = Arc<[u8]>;

/// Wakes and waits for "this task queue may have pending work".
#[async_trait]
pub trait WorkSignal: Send + Sync + 'static {
    /// Registers a waiter on a task queue. Take it *before* looking for work, so that a run
    /// made pending meanwhile wakes it (its next [`Waiter::wait`] returns at once).
    fn waiter(&self, task_queue_id: &str) -> Waiter;
    /// Signals one new pending run on a queue: one waiter is woken, in this process when
    /// one here can take it, else (across processes) in another; it gets what `hint` makes,
    /// which is made only when a waiter or the broker takes it (signing one costs a hash of
    /// the whole record).
    fn notify(&self, task_queue_id: &str, hint: &dyn Fn() -> Option<Hint>);
    /// Waits (at most `within`) until the wake-ups notified so far, and the waiters that
    /// left, are through with the broker; a Lambda function calls it before answering, as it
    /// is frozen afterwards.
    async fn flush(&self, _within: Duration) {}
}

/// A delivery a waiter holds from elsewhere (a broker message): settled once, `true` when
/// the wake-up was used, `false` to hand it back to another waiter.
pub(crate) type Settle = Box<dyn FnOnce(bool) + Send>;

#[derive(Default)]
struct SlotState {
    /// Parked in [`Waiter::wait`] (not reading the index).
    parked: bool,
    /// Woken from this process and not yet used.
    woken: bool,
    /// The hint of that wake-up.
    woken_hint: Option<Hint>,
    /// Woken from another process and not yet used, with its hint.
    held: Option<(Settle, Option<Hint>)>,
    /// Wake-ups from every process reach this waiter (its broker subscription is in place).
    crosses: bool,
    /// The waiter has left: a delivery that comes now goes to someone else.
    left: bool,
    /// Wake-ups from every process have just started to reach the waiter: it reads the
    /// index once more (its next wait returns at once), since a wake-up sent before went
    /// nowhere (RabbitMQ drops a message for a queue nobody has declared yet) and its run
    /// may have been written after the waiter's last read.
    recheck: bool,
}

impl SlotState {
    fn awake(&self) -> bool {
        self.woken || self.held.is_some()
    }
}

/// One waiter's state, shared with the signal that wakes it.
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
    notify: Notify,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives the waiter a delivery from another process; refused (and returned) when it
    /// holds one already or has left. A waiter woken from this process takes it too (its
    /// next read serves both): refused, the delivery would come straight back to it while
    /// it reads.
    #[cfg(any(feature = "amqp", test))]
    pub(crate) fn deliver(
        &self,
        settle: Settle,
        hint: Option<Hint>,
    ) -> Result<(), (Settle, Option<Hint>)> {
        {
            let mut s = self.lock();
            if s.held.is_some() || s.left {
                return Err((settle, hint));
            }
            s.held = Some((settle, hint));
        }
        self.notify.notify_waiters();
        Ok(())
    }

    /// Marks whether wake-ups from every process now reach this waiter; when they start
    /// to, it reads the index once more ([`SlotState::recheck`]).
    #[cfg(any(feature = "amqp", test))]
    pub(crate) fn set_crosses(&self, crosses: bool) {
        let started = {
            let mut s = self.lock();
            let started = crosses && !s.crosses;
            s.crosses = crosses;
            s.recheck |= started;
            started
        };
        if started {
            self.notify.notify_waiters();
        }
    }

    /// Takes back a delivery the waiter has not used (it is leaving, or the broker link that
    /// delivered it is gone).
    #[cfg(any(feature = "amqp", test))]
    pub(crate) fn take_held(&self) -> Option<Settle> {
        self.lock().held.take().map(|(settle, _)| settle)
    }
}

/// One task queue's waiters in this process, in the order they came, and when one of them
/// last read the queue's pending index.
#[derive(Default)]
struct Waiting {
    slots: Vec<Arc<Slot>>,
    read_at: Option<Instant>,
}

/// The waiters of this process, per task queue (a queue's entry goes with its last waiter).
#[derive(Default)]
pub(crate) struct Registry {
    queues: Mutex<HashMap<String, Waiting>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Waiting>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, q: &str) -> Arc<Slot> {
        let slot = Arc::new(Slot::default());
        self.lock()
            .entry(q.to_string())
            .or_default()
            .slots
            .push(slot.clone());
        slot
    }

    /// Removes a waiter; `Some` (with its hint) when it held a wake-up from this process it
    /// had not used.
    fn remove(&self, q: &str, slot: &Arc<Slot>) -> Option<Option<Hint>> {
        let mut queues = self.lock();
        if let Some(w) = queues.get_mut(q) {
            w.slots.retain(|s| !Arc::ptr_eq(s, slot));
            if w.slots.is_empty() {
                queues.remove(q);
            }
        }
        let mut s = slot.lock();
        s.left = true;
        let hint = s.woken_hint.take();
        std::mem::take(&mut s.woken).then_some(hint)
    }

    /// Records a read of `q`'s pending index by one of its waiters, at `at`.
    fn note_read(&self, q: &str, at: Instant) {
        if let Some(w) = self.lock().get_mut(q) {
            w.read_at = Some(at);
        }
    }

    /// When a waiter of `q` last read its pending index.
    fn read_at(&self, q: &str) -> Option<Instant> {
        self.lock().get(q).and_then(|w| w.read_at)
    }

    /// Wakes one waiter of `q` that has no wake-up yet, the longest parked first, else one
    /// that is reading the index (its next wait returns at once). False when there is none:
    /// every waiter here is already due to read again. The waiter woken gets `hint`, made
    /// outside the locks (it encodes and signs a record) and at most once.
    pub(crate) fn wake_one(&self, q: &str, hint: &dyn Fn() -> Option<Hint>) -> bool {
        let mut made: Option<Option<Hint>> = None;
        // Another wake-up, or the waiter's leaving, may come between the choice and the
        // wake-up: then choose again (a rare race, which moves things forward).
        while let Some(slot) = self.wakeable(q) {
            let h = made.take().unwrap_or_else(hint);
            let mut s = slot.lock();
            if s.awake() || s.left {
                made = Some(h);
                continue;
            }
            s.woken = true;
            s.woken_hint = h;
            drop(s);
            // A waiter that was reading may have parked since.
            slot.notify.notify_waiters();
            return true;
        }
        false
    }

    /// The waiter of `q` [`Registry::wake_one`] would wake now.
    fn wakeable(&self, q: &str) -> Option<Arc<Slot>> {
        let queues = self.lock();
        let mut reading = None;
        for slot in &queues.get(q)?.slots {
            let s = slot.lock();
            if s.awake() || s.left {
                continue;
            }
            if s.parked {
                return Some(slot.clone());
            }
            reading = reading.or(Some(slot));
        }
        reading.cloned()
    }

    /// How many waiters of `q` this process has.
    pub(crate) fn waiting(&self, q: &str) -> usize {
        self.lock().get(q).map_or(0, |w| w.slots.len())
    }
}

/// What a signal that crosses processes does for its waiters.
pub(crate) trait Remote: Send + Sync + 'static {
    /// The waiter parks for the first time: subscribe it to wake-ups from other processes.
    fn subscribe(&self, q: &str, slot: &Arc<Slot>);
    /// The waiter leaves: end its subscription and hand back a delivery it did not use.
    fn unsubscribe(&self, slot: &Arc<Slot>);
    /// Sends one wake-up, with `hint`, to a waiter of `q` in any process.
    fn publish(&self, q: &str, hint: Option<Hint>);
}

/// One claimWork's registration on a task queue (see [`WorkSignal::waiter`]); dropping it
/// (also when the call is cancelled) hands an unused wake-up on.
pub struct Waiter {
    q: String,
    slot: Arc<Slot>,
    registry: Arc<Registry>,
    remote: Option<Arc<dyn Remote>>,
    subscribed: bool,
    /// When this waiter last read the pending index.
    read_at: Option<Instant>,
    /// The hint of the wake-up its last wait used.
    hint: Option<Hint>,
}

impl Waiter {
    fn new(q: &str, registry: Arc<Registry>, remote: Option<Arc<dyn Remote>>) -> Waiter {
        Waiter {
            q: q.to_string(),
            slot: registry.register(q),
            registry,
            remote,
            subscribed: false,
            read_at: None,
            hint: None,
        }
    }

    /// Records that this waiter read its queue's pending index just now.
    pub fn note_read(&mut self) {
        let now = Instant::now();
        self.read_at = Some(now);
        self.registry.note_read(&self.q, now);
    }

    /// True when another waiter of the same queue in this process read the pending index
    /// after this one did, less than `within` ago. A waiter due to re-read on its schedule
    /// (not woken) may then skip it: the queue is still read at least every `within` here,
    /// and a thousand waiters on one queue make one schedule's reads, not a thousand.
    pub fn other_read_within(&self, within: Duration) -> bool {
        match self.registry.read_at(&self.q) {
            Some(t) => self.read_at.is_none_or(|mine| t > mine) && t.elapsed() < within,
            None => false,
        }
    }

    /// Waits until this waiter is woken (returns at once if it was woken since its last
    /// wait), or `timeout` passes; true when woken, or when wake-ups from other processes
    /// have started to reach it since (it should read the index again). Either way, one
    /// wake-up it held counts as used.
    pub async fn wait(&mut self, timeout: Duration) -> bool {
        if !self.subscribed {
            self.subscribed = true;
            if let Some(r) = &self.remote {
                r.subscribe(&self.q, &self.slot);
            }
        }
        let notified = self.slot.notify.notified();
        tokio::pin!(notified);
        // Enabled before the check, so that a wake-up between the check and the await is
        // not lost (the waker sets the state, then notifies).
        notified.as_mut().enable();
        let awake = {
            let mut s = self.slot.lock();
            s.parked = !s.awake() && !s.recheck;
            !s.parked
        };
        if !awake {
            let _ = tokio::time::timeout(timeout, notified).await;
        }
        // One wake-up is used per wait: a second one (a run each) makes the next wait return
        // at once, or is handed on when the waiter leaves.
        let (woken, settle) = {
            let mut s = self.slot.lock();
            s.parked = false;
            let recheck = std::mem::take(&mut s.recheck);
            if s.woken {
                s.woken = false;
                self.hint = s.woken_hint.take();
                (true, None)
            } else {
                let held = s.held.take().map(|(settle, hint)| {
                    self.hint = hint;
                    settle
                });
                (held.is_some() || recheck, held)
            }
        };
        if let Some(settle) = settle {
            settle(true);
        }
        woken
    }

    /// Counts an unused wake-up this waiter holds as used when its hint satisfies `used`
    /// (its call claimed that run from the index meanwhile), so that leaving does not hand
    /// on a wake-up for a run already taken.
    pub fn used_up(&mut self, used: impl Fn(&[u8]) -> bool) {
        let settle = {
            let mut s = self.slot.lock();
            if s.woken && s.woken_hint.as_deref().is_some_and(&used) {
                s.woken = false;
                s.woken_hint = None;
            }
            match s.held.take() {
                Some((settle, Some(hint))) if used(&hint) => Some(settle),
                other => {
                    s.held = other;
                    None
                }
            }
        };
        if let Some(settle) = settle {
            settle(true);
        }
    }

    /// The hint of the wake-up the last wait used, if it carried one (once).
    pub fn take_hint(&mut self) -> Option<Hint> {
        self.hint.take()
    }

    /// True when wake-ups from every process reach this waiter (so it may re-read the index
    /// less often).
    pub fn crosses_processes(&self) -> bool {
        self.slot.lock().crosses
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let unused = self.registry.remove(&self.q, &self.slot);
        if let Some(r) = &self.remote {
            r.unsubscribe(&self.slot);
        }
        if let Some(hint) = unused {
            if !self.registry.wake_one(&self.q, &|| hint.clone()) {
                if let Some(r) = &self.remote {
                    r.publish(&self.q, hint);
                }
            }
        }
    }
}

/// In-process signals (the local server, and a warm Lambda container).
#[derive(Default)]
pub struct LocalSignal {
    registry: Arc<Registry>,
}

impl LocalSignal {
    /// How many waiters of `q` this process has.
    pub fn waiting(&self, q: &str) -> usize {
        self.registry.waiting(q)
    }
}

#[async_trait]
impl WorkSignal for LocalSignal {
    fn waiter(&self, q: &str) -> Waiter {
        Waiter::new(q, self.registry.clone(), None)
    }

    fn notify(&self, q: &str, hint: &dyn Fn() -> Option<Hint>) {
        self.registry.wake_one(q, hint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    #[tokio::test]
    async fn a_notify_after_registering_is_never_lost() {
        let s = LocalSignal::default();
        let mut w = s.waiter("q");
        s.notify("q", &|| None);
        let start = Instant::now();
        w.wait(Duration::from_secs(5)).await;
        assert!(start.elapsed() < Duration::from_secs(1));
        // Used: the next wait sleeps its whole timeout.
        let start = Instant::now();
        w.wait(Duration::from_millis(100)).await;
        assert!(start.elapsed() >= Duration::from_millis(90));
    }

    /// A wake-up's hint is made only when a waiter takes it.
    #[test]
    fn a_hint_is_made_only_for_a_waiter() {
        let s = LocalSignal::default();
        let made = AtomicUsize::new(0);
        let hint = || {
            made.fetch_add(1, Ordering::SeqCst);
            None
        };
        s.notify("q", &hint);
        assert_eq!(made.load(Ordering::SeqCst), 0, "no waiter, no hint");
        let _w = s.waiter("q");
        s.notify("q", &hint);
        assert_eq!(made.load(Ordering::SeqCst), 1);
    }

    /// Spawns `n` waiters of `q`, each waiting once; counts those woken before `timeout`.
    async fn parked(
        s: &Arc<LocalSignal>,
        q: &str,
        n: usize,
        timeout: Duration,
    ) -> (Arc<AtomicUsize>, Vec<tokio::task::JoinHandle<()>>) {
        let woken = Arc::new(AtomicUsize::new(0));
        let mut handles = vec![];
        for _ in 0..n {
            let mut w = s.waiter(q);
            let woken = woken.clone();
            handles.push(tokio::spawn(async move {
                let start = Instant::now();
                w.wait(timeout).await;
                if start.elapsed() < timeout {
                    woken.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        (woken, handles)
    }

    #[tokio::test]
    async fn each_notify_wakes_one_waiter_of_its_queue() {
        let s = Arc::new(LocalSignal::default());
        let (woken, handles) = parked(&s, "q", 100, Duration::from_secs(2)).await;
        let (other, other_handles) = parked(&s, "other", 10, Duration::from_secs(2)).await;
        for _ in 0..3 {
            s.notify("q", &|| None);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 3, "three runs wake three");
        assert_eq!(other.load(Ordering::SeqCst), 0);
        for h in handles.into_iter().chain(other_handles) {
            h.await.unwrap();
        }
        assert_eq!(s.waiting("q"), 0, "waiters leave the registry");
    }

    #[tokio::test]
    async fn a_waiter_leaving_with_an_unused_wake_up_hands_it_on() {
        let s = Arc::new(LocalSignal::default());
        // Registered, reading the index (never parked): it gets the wake-up, then leaves
        // (its read found other work), and a parked waiter gets it.
        let reading = s.waiter("q");
        let (woken, handles) = parked(&s, "q", 1, Duration::from_secs(2)).await;
        // The parked one is preferred; a second notify goes to the reader.
        s.notify("q", &|| None);
        s.notify("q", &|| None);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        let (woken2, handles2) = parked(&s, "q", 1, Duration::from_secs(2)).await;
        assert_eq!(woken2.load(Ordering::SeqCst), 0);
        drop(reading);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(woken2.load(Ordering::SeqCst), 1, "handed on");
        for h in handles.into_iter().chain(handles2) {
            h.await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_delivery_is_used_by_a_wait_or_handed_back() {
        let s = LocalSignal::default();
        let settled = Arc::new(Mutex::new(vec![]));
        let settle = |settled: &Arc<Mutex<Vec<bool>>>| -> Settle {
            let settled = settled.clone();
            Box::new(move |used| settled.lock().unwrap().push(used))
        };
        let mut w = s.waiter("q");
        assert!(w.slot.deliver(settle(&settled), None).is_ok());
        assert!(
            w.slot.deliver(settle(&settled), None).is_err(),
            "one at a time"
        );
        w.wait(Duration::from_secs(5)).await;
        assert_eq!(*settled.lock().unwrap(), vec![true]);
        assert!(w.slot.deliver(settle(&settled), None).is_ok());
        let held = w.slot.take_held().expect("held");
        held(false);
        assert_eq!(*settled.lock().unwrap(), vec![true, false]);
    }

    /// Once wake-ups from every process reach a waiter, it reads the index once more (a
    /// wake-up sent before its subscription went nowhere); again after a lost broker link.
    #[tokio::test]
    async fn a_waiter_reads_again_when_wake_ups_start_to_cross_processes() {
        let s = LocalSignal::default();
        let mut w = s.waiter("q");
        let slot = w.slot.clone();
        let parked = tokio::spawn(async move {
            let start = Instant::now();
            let woken = w.wait(Duration::from_secs(10)).await;
            (w, woken, start.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        slot.set_crosses(true);
        let (mut w, woken, took) = parked.await.unwrap();
        assert!(woken && took < Duration::from_secs(5), "{took:?}");
        assert!(w.take_hint().is_none(), "no run to take");
        slot.set_crosses(true);
        assert!(!w.wait(Duration::from_millis(50)).await, "once only");
        slot.set_crosses(false);
        assert!(
            !w.wait(Duration::from_millis(50)).await,
            "lost: nothing to read"
        );
        slot.set_crosses(true);
        assert!(w.wait(Duration::from_secs(10)).await, "back: read again");
        // A re-read due is no wake-up: leaving, the waiter hands nothing on.
        slot.set_crosses(false);
        slot.set_crosses(true);
        let mut other = s.waiter("q");
        drop(w);
        assert!(
            !other.wait(Duration::from_millis(50)).await,
            "nothing handed on"
        );
    }

    #[tokio::test]
    async fn waiters_of_a_queue_share_their_scheduled_reads() {
        let s = LocalSignal::default();
        let (mut a, mut b, mut other) = (s.waiter("q"), s.waiter("q"), s.waiter("r"));
        assert!(
            !a.other_read_within(Duration::from_secs(1)),
            "nobody read yet"
        );
        a.note_read();
        assert!(!a.other_read_within(Duration::from_secs(1)), "its own read");
        assert!(b.other_read_within(Duration::from_secs(1)), "a read for b");
        assert!(
            !b.other_read_within(Duration::ZERO),
            "but not within no time"
        );
        assert!(
            !other.other_read_within(Duration::from_secs(1)),
            "another queue"
        );
        b.note_read();
        assert!(
            !b.other_read_within(Duration::from_secs(1)),
            "b read after a"
        );
        assert!(a.other_read_within(Duration::from_secs(1)));
        other.note_read();
        // A queue whose last waiter leaves forgets its reads.
        drop((a, b));
        assert!(!s.waiter("q").other_read_within(Duration::from_secs(1)));
        assert!(
            !s.waiter("q").wait(Duration::from_millis(1)).await,
            "not woken"
        );
        s.notify("r", &|| None);
        assert!(other.wait(Duration::from_secs(5)).await, "woken");
    }
}
