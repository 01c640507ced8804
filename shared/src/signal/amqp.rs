//! Wake-ups across processes through RabbitMQ: as deployed, createTask and claimWork are
//! different Lambda functions, so an in-process signal never reaches the waiter.
//!
//! Every task queue with waiters has one RabbitMQ queue, `<exchange prefix>claim-work/<task
//! queue id>`, that all its waiters consume from as competing consumers, each with a prefetch
//! of one. A new pending run that no waiter of its own process takes is published there once
//! (through the default exchange), so RabbitMQ hands it to **one** waiter of one process:
//! each run costs one wake-up and one re-read, however many workers wait. A waiter settles
//! its delivery when it has used it (acknowledged) or leaves without (returned to the queue,
//! so that another waiter gets it). The queue holds few wake-ups for a short time and goes
//! away a minute after its last consumer, so a frozen Lambda container or a queue nobody waits
//! on piles up nothing.
//!
//! A wake-up is only a hint: a lost one costs the waiter its next scheduled re-read of the
//! index, never a task, and nothing here blocks a request on the broker. One background task
//! owns the connection; every broker step has a timeout, and a broker that is away leaves the
//! process with local signals and its re-reads until it comes back.

use super::{Hint, Registry, Remote, Settle, Slot, Waiter, WorkSignal};
use crate::events::amqp::timed;
use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::Acker;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Longest wait for connecting before the process carries on without.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for one publish, declare, consume, cancel or settle.
const STEP_TIMEOUT: Duration = Duration::from_secs(1);
/// Wake-ups a task queue's RabbitMQ queue keeps while no waiter can take them, and for how
/// long (ms): enough for waiters busy reading to come back, nothing to pile up.
const QUEUE_MAX_LENGTH: i64 = 1_000;
const QUEUE_TTL_MS: i64 = 5_000;
/// How long a RabbitMQ queue outlives its last consumer (ms).
const QUEUE_EXPIRES_MS: i64 = 60_000;
/// Commands waiting for the broker before further ones are dropped.
const OUTGOING_MAX: usize = 4096;
/// Of those, the places only subscriptions, cancels and settles may take.
const CONTROL_RESERVE: usize = 1024;

/// The RabbitMQ queue carrying the wake-ups of task queue `q`, under `prefix`.
pub fn queue_name(prefix: &str, q: &str) -> String {
    format!("{prefix}claim-work/{q}")
}

enum Cmd {
    Publish(String, Option<Hint>),
    Subscribe(usize),
    Unsubscribe(usize),
    Settle(Acker, bool),
}

/// A waiter subscribed to wake-ups from other processes.
struct Sub {
    q: String,
    slot: Weak<Slot>,
}

/// What the background task and the callers share.
struct Broker {
    prefix: String,
    registry: Arc<Registry>,
    tx: mpsc::Sender<Cmd>,
    /// Commands sent and not yet carried out (or dropped).
    pending: AtomicUsize,
    subs: Mutex<HashMap<usize, Sub>>,
    next_id: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Broker {
    fn send(&self, cmd: Cmd) {
        // Wake-ups are shed first: a lost one costs a re-read, a lost cancel or settle a
        // consumer left behind for the connection's life.
        if matches!(cmd, Cmd::Publish(..)) && self.tx.capacity() <= CONTROL_RESERVE {
            return;
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        if self.tx.try_send(cmd).is_err() {
            self.done();
        }
    }

    fn done(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
    }

    fn id_of(&self, slot: &Arc<Slot>) -> usize {
        Arc::as_ptr(slot) as usize
    }

    /// A settle for a delivery: carried out by the background task on its channel.
    fn settle(self: &Arc<Self>, acker: Acker) -> Settle {
        let me = Arc::downgrade(self);
        Box::new(move |used| {
            if let Some(me) = me.upgrade() {
                me.send(Cmd::Settle(acker, used));
            }
        })
    }
}

impl Remote for Broker {
    fn subscribe(&self, q: &str, slot: &Arc<Slot>) {
        let id = self.id_of(slot);
        let sub = Sub {
            q: q.to_string(),
            slot: Arc::downgrade(slot),
        };
        lock(&self.subs).insert(id, sub);
        self.send(Cmd::Subscribe(id));
    }

    fn unsubscribe(&self, slot: &Arc<Slot>) {
        let id = self.id_of(slot);
        if lock(&self.subs).remove(&id).is_some() {
            self.send(Cmd::Unsubscribe(id));
        }
        if let Some(settle) = slot.take_held() {
            settle(false);
        }
    }

    fn publish(&self, q: &str, hint: Option<Hint>) {
        self.send(Cmd::Publish(q.to_string(), hint));
    }
}

/// A [`WorkSignal`] that also carries wake-ups between processes through RabbitMQ.
pub struct AmqpSignal {
    registry: Arc<Registry>,
    broker: Arc<Broker>,
}

impl AmqpSignal {
    /// Starts the background task for the broker at `url`, with the wake-up queues under
    /// `prefix`; it connects when first needed and reconnects whenever the connection is
    /// lost. Must be called within a tokio runtime.
    pub fn start(url: impl Into<String>, prefix: &str) -> AmqpSignal {
        let registry = Arc::new(Registry::default());
        let (tx, rx) = mpsc::channel(OUTGOING_MAX);
        let broker = Arc::new(Broker {
            prefix: prefix.to_string(),
            registry: registry.clone(),
            tx,
            pending: AtomicUsize::new(0),
            subs: Mutex::new(HashMap::new()),
            next_id: AtomicUsize::new(0),
        });
        tokio::spawn(run(url.into(), Arc::downgrade(&broker), rx));
        AmqpSignal { registry, broker }
    }

    /// How many waiters of `q` this process has.
    pub fn waiting(&self, q: &str) -> usize {
        self.registry.waiting(q)
    }
}

#[async_trait]
impl WorkSignal for AmqpSignal {
    fn waiter(&self, q: &str) -> Waiter {
        let remote: Arc<dyn Remote> = self.broker.clone();
        Waiter::new(q, self.registry.clone(), Some(remote))
    }

    fn notify(&self, q: &str, hint: &dyn Fn() -> Option<Hint>) {
        if !self.registry.wake_one(q, hint) {
            self.broker.publish(q, hint());
        }
    }

    async fn flush(&self, within: Duration) {
        let until = Instant::now() + within;
        while self.broker.pending.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

async fn connect(url: &str) -> Result<(Connection, Channel), String> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|e| e.to_string())?;
    let channel = conn.create_channel().await.map_err(|e| e.to_string())?;
    // Each consumer (one per waiter) holds at most one wake-up it has not used.
    channel
        .basic_qos(1, BasicQosOptions { global: false })
        .await
        .map_err(|e| e.to_string())?;
    Ok((conn, channel))
}

/// The background task: connect when there is something to do, then carry out commands
/// until the connection fails; then start over after a pause.
async fn run(url: String, broker: Weak<Broker>, mut rx: mpsc::Receiver<Cmd>) {
    // A process that never wakes or waits (most functions) never connects.
    let Some(mut first) = rx.recv().await.map(Some) else {
        return;
    };
    let mut pause = Duration::from_millis(200);
    loop {
        let Some(b) = broker.upgrade() else { return };
        match timed(CONNECT_TIMEOUT, "connecting", connect(&url)).await {
            Ok((conn, channel)) => {
                tracing::debug!("claim-work wake-ups connected");
                pause = Duration::from_millis(200);
                let why = serve(&b, &channel, first.take(), &mut rx).await;
                // Closed, not only dropped: its consumers would otherwise live on where a
                // step timed out on a connection still open.
                let reason = ShortString::from("claim-work wake-ups reconnect");
                let _ = timed(STEP_TIMEOUT, "closing", conn.close(200, reason)).await;
                tracing::warn!(reason = %why, "claim-work wake-ups lost the broker; waiters re-read the index meanwhile");
            }
            Err(e) => {
                tracing::warn!(error = %e, "claim-work wake-ups cannot reach the broker; waiters re-read the index meanwhile");
            }
        }
        lost_link(&b);
        if first.take().is_some() {
            b.done();
        }
        drop(b);
        // Commands meanwhile are dropped (waiters re-read on their schedule); subscriptions
        // are made again from `subs` on the next connection.
        let until = tokio::time::Instant::now() + pause;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                cmd = rx.recv() => match (cmd, broker.upgrade()) {
                    (Some(_), Some(b)) => b.done(),
                    _ => return,
                },
            }
        }
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

/// The link is gone: no waiter is reached across processes, and the deliveries waiters held
/// went back to their queues with the channel.
fn lost_link(b: &Broker) {
    let subs = lock(&b.subs);
    for sub in subs.values() {
        if let Some(slot) = sub.slot.upgrade() {
            slot.set_crosses(false);
            drop(slot.take_held());
        }
    }
}

/// Serves one connection; returns why it ended.
async fn serve(
    b: &Arc<Broker>,
    channel: &Channel,
    first: Option<Cmd>,
    rx: &mut mpsc::Receiver<Cmd>,
) -> String {
    let on = Link {
        b,
        channel,
        tags: Mutex::new(HashMap::new()),
        readers: Mutex::new(Vec::new()),
    };
    let subscribed: Vec<usize> = lock(&b.subs).keys().copied().collect();
    for id in subscribed {
        if let Err(e) = on.subscribe(id).await {
            if first.is_some() {
                b.done();
            }
            return e;
        }
    }
    let mut cmd = first;
    loop {
        if let Some(c) = cmd.take() {
            let step = on.handle(c).await;
            b.done();
            if let Err(e) = step {
                return e;
            }
        }
        if !channel.status().connected() {
            return "the channel closed".into();
        }
        match tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            Ok(None) => return "stopped".into(),
            Ok(Some(c)) => cmd = Some(c),
            Err(_) => {}
        }
    }
}

/// A connection's channel, for carrying out commands.
struct Link<'a> {
    b: &'a Arc<Broker>,
    channel: &'a Channel,
    /// Consumer tags per subscription on this channel.
    tags: Mutex<HashMap<usize, ShortString>>,
    /// The tasks reading its consumers: they end with the link, even where a step timed out
    /// on a channel still open.
    readers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        for r in lock(&self.readers).drain(..) {
            r.abort();
        }
    }
}

impl Link<'_> {
    async fn handle(&self, cmd: Cmd) -> Result<(), String> {
        match cmd {
            // The body is the wake-up's hint (empty: none).
            Cmd::Publish(q, hint) => timed(
                STEP_TIMEOUT,
                "publishing",
                self.channel.basic_publish(
                    ShortString::from(""),
                    ShortString::from(queue_name(&self.b.prefix, &q)),
                    BasicPublishOptions::default(),
                    hint.as_deref().unwrap_or_default(),
                    BasicProperties::default(),
                ),
            )
            .await
            .map(|_| ()),
            Cmd::Subscribe(id) => self.subscribe(id).await,
            Cmd::Unsubscribe(id) => {
                let Some(tag) = lock(&self.tags).remove(&id) else {
                    return Ok(());
                };
                timed(
                    STEP_TIMEOUT,
                    "cancelling",
                    self.channel
                        .basic_cancel(tag, BasicCancelOptions::default()),
                )
                .await
            }
            // A delivery of an earlier channel cannot be settled on this one (it went back to
            // its queue when that channel closed): the broker answers "unknown delivery tag".
            Cmd::Settle(acker, used) => {
                let settled = if used {
                    timed(
                        STEP_TIMEOUT,
                        "acking",
                        acker.ack(BasicAckOptions::default()),
                    )
                    .await
                } else {
                    let requeue = BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    };
                    timed(STEP_TIMEOUT, "returning", acker.nack(requeue)).await
                };
                if let Err(e) = settled {
                    tracing::debug!(error = %e, "a claim-work wake-up was not settled");
                }
                Ok(())
            }
        }
    }

    /// Declares the task queue's RabbitMQ queue and consumes from it for one waiter (still
    /// subscribed: it may have left meanwhile).
    async fn subscribe(&self, id: usize) -> Result<(), String> {
        let (q, slot) = {
            let subs = lock(&self.b.subs);
            match subs
                .get(&id)
                .and_then(|s| Some((s.q.clone(), s.slot.upgrade()?)))
            {
                Some(found) => found,
                None => return Ok(()),
            }
        };
        if lock(&self.tags).contains_key(&id) {
            return Ok(());
        }
        let name = queue_name(&self.b.prefix, &q);
        let mut args = FieldTable::default();
        for (k, v) in [
            ("x-max-length", QUEUE_MAX_LENGTH),
            ("x-message-ttl", QUEUE_TTL_MS),
            ("x-expires", QUEUE_EXPIRES_MS),
        ] {
            args.insert(ShortString::from(k), AMQPValue::LongLongInt(v));
        }
        timed(
            STEP_TIMEOUT,
            "declaring",
            self.channel.queue_declare(
                ShortString::from(name.as_str()),
                QueueDeclareOptions::default(),
                args,
            ),
        )
        .await?;
        let n = self.b.next_id.fetch_add(1, Ordering::Relaxed);
        let tag = ShortString::from(format!("claim-work-{n}"));
        let consumer = timed(
            STEP_TIMEOUT,
            "consuming",
            self.channel.basic_consume(
                ShortString::from(name.as_str()),
                tag.clone(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            ),
        )
        .await?;
        lock(&self.tags).insert(id, tag);
        slot.set_crosses(true);
        let b = Arc::downgrade(self.b);
        let slot = Arc::downgrade(&slot);
        let mut readers = lock(&self.readers);
        readers.retain(|r| !r.is_finished());
        readers.push(tokio::spawn(async move {
            let mut consumer = consumer;
            while let Some(Ok(d)) = consumer.next().await {
                let (Some(b), slot) = (b.upgrade(), slot.upgrade()) else {
                    return;
                };
                let settle = b.settle(d.acker);
                let hint = (!d.data.is_empty()).then(|| Hint::from(d.data));
                let refused = match slot {
                    Some(slot) => slot.deliver(settle, hint).err(),
                    None => Some((settle, hint)),
                };
                // Its waiter has left (or holds a delivery already): another waiter of
                // this process takes it, or it goes back to the queue for another process.
                if let Some((settle, hint)) = refused {
                    settle(b.registry.wake_one(&q, &|| hint.clone()));
                }
            }
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker that is away, or a listener that accepts and never speaks AMQP, never holds
    /// up a notify or a wait: waiters keep their local signal and their own timeout.
    #[tokio::test]
    async fn a_missing_or_silent_broker_blocks_nothing() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let mut held = vec![];
            while let Ok((sock, _)) = silent.accept().await {
                held.push(sock);
            }
        });
        for url in [
            "amqp://guest:guest@127.0.0.1:1/%2f".to_string(),
            format!("amqp://guest:guest@{silent_addr}/%2f"),
        ] {
            let s = Arc::new(AmqpSignal::start(url.clone(), "exchange/x/v1/"));
            let start = Instant::now();
            for _ in 0..10_000 {
                s.notify("p/w", &|| None);
            }
            s.flush(Duration::from_millis(50)).await;
            assert!(start.elapsed() < Duration::from_millis(500), "{url}");
            let mut w = s.waiter("p/w");
            let waiter = {
                let s = s.clone();
                tokio::spawn(async move {
                    w.wait(Duration::from_secs(10)).await;
                    let crosses = w.crosses_processes();
                    drop(s);
                    crosses
                })
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.notify("p/w", &|| None);
            let crosses = tokio::time::timeout(Duration::from_secs(1), waiter)
                .await
                .expect("woken by this process's notify")
                .unwrap();
            assert!(!crosses, "{url}");
            let mut w = s.waiter("q/w");
            let start = Instant::now();
            w.wait(Duration::from_millis(200)).await;
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(190) && took < Duration::from_secs(2),
                "{took:?}"
            );
        }
        hold.abort();
    }
}
