//! Wake-ups across processes through RabbitMQ: as deployed, createTask and claimWork are
//! different Lambda functions, so an in-process signal never reaches the waiter.
//!
//! Each process publishes "task queue X may have work" (transient, no confirm, routing key
//! X) to one direct exchange, `<exchange prefix>claim-work-wakeups`, whenever it makes a run
//! pending, and binds a queue of its own (exclusive, auto-deleted, short TTL and bounded
//! length, so a frozen Lambda container piles up nothing) to the task queues its claimWork
//! calls wait on. A wake-up is only a hint: a lost one costs the waiter its next scheduled
//! re-read of the index, never a task, and nothing here blocks a request on the broker. One
//! background task owns the connection; every broker step has a timeout, and a broker that is
//! away leaves the process with local signals and its re-reads until it comes back.

use super::{LocalSignal, WorkSignal};
use crate::events::amqp::timed;
use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer, ExchangeKind};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Longest wait for connecting (and declaring) before the process carries on without.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for one publish, bind or unbind.
const STEP_TIMEOUT: Duration = Duration::from_secs(1);
/// Wake-ups a waiter's queue keeps, and for how long (ms): enough to wake, nothing to pile up.
const QUEUE_MAX_LENGTH: i64 = 100;
const QUEUE_TTL_MS: i64 = 10_000;
/// Wake-ups waiting to be published before further ones are dropped.
const OUTGOING_MAX: usize = 4096;
/// How long a binding outlives its last waiter: a claimWork's successive waits, and a
/// worker's next claimWork, find it still in place.
pub const LINGER: Duration = Duration::from_secs(30);

/// The name of the wake-up exchange under `prefix`.
pub fn exchange(prefix: &str) -> String {
    format!("{prefix}claim-work-wakeups")
}

enum Cmd {
    Publish(String),
    Watch(String),
    Unwatch(String),
}

/// What the background task and the callers share.
#[derive(Default)]
struct Shared {
    local: LocalSignal,
    /// Waiters per task queue in this process.
    watched: Mutex<HashMap<String, usize>>,
    /// Task queues whose binding is in place on the current connection.
    bound: Mutex<HashSet<String>>,
    /// Task queues with a wake-up not yet handed to the broker (one each is enough).
    queued: Mutex<HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A [`WorkSignal`] that also carries wake-ups between processes through RabbitMQ.
pub struct AmqpSignal {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Cmd>,
}

impl AmqpSignal {
    /// Starts the background task for the broker at `url`, with the wake-up exchange under
    /// `prefix`; it connects at once and reconnects whenever the connection is lost. Must be
    /// called within a tokio runtime.
    pub fn start(url: impl Into<String>, prefix: &str) -> AmqpSignal {
        AmqpSignal::start_with(url, prefix, LINGER)
    }

    /// [`AmqpSignal::start`], with bindings kept `linger` after their last waiter.
    pub fn start_with(url: impl Into<String>, prefix: &str, linger: Duration) -> AmqpSignal {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::channel(OUTGOING_MAX);
        tokio::spawn(run(
            url.into(),
            exchange(prefix),
            shared.clone(),
            rx,
            linger,
        ));
        AmqpSignal { shared, tx }
    }

    fn send(&self, cmd: Cmd) -> bool {
        self.tx.try_send(cmd).is_ok()
    }
}

#[async_trait]
impl WorkSignal for AmqpSignal {
    fn token(&self, q: &str) -> u64 {
        self.shared.local.token(q)
    }

    fn notify(&self, q: &str) {
        self.shared.local.notify(q);
        if lock(&self.shared.queued).insert(q.to_string()) && !self.send(Cmd::Publish(q.into())) {
            lock(&self.shared.queued).remove(q);
        }
    }

    async fn wait(&self, q: &str, token: u64, timeout: Duration) {
        let _watch = Watch::start(self, q);
        self.shared.local.wait(q, token, timeout).await;
    }

    fn crosses_processes(&self, q: &str) -> bool {
        lock(&self.shared.bound).contains(q)
    }

    async fn flush(&self, within: Duration) {
        let until = Instant::now() + within;
        while !lock(&self.shared.queued).is_empty() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// One waiter's interest in a task queue's wake-ups, given up when dropped (also when the
/// wait is cancelled, as a request whose client went away is).
struct Watch<'a> {
    signal: &'a AmqpSignal,
    q: &'a str,
}

impl<'a> Watch<'a> {
    fn start(signal: &'a AmqpSignal, q: &'a str) -> Watch<'a> {
        let first = {
            let mut w = lock(&signal.shared.watched);
            let n = w.entry(q.to_string()).or_insert(0);
            *n += 1;
            *n == 1
        };
        if first {
            signal.send(Cmd::Watch(q.to_string()));
        }
        Watch { signal, q }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let last = {
            let mut w = lock(&self.signal.shared.watched);
            match w.get_mut(self.q) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                _ => {
                    w.remove(self.q);
                    true
                }
            }
        };
        if last {
            self.signal.send(Cmd::Unwatch(self.q.to_string()));
        }
    }
}

struct Link {
    _conn: Connection,
    channel: Channel,
    queue: ShortString,
    consumer: Consumer,
}

async fn connect(url: &str, exchange: &str) -> Result<Link, String> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|e| e.to_string())?;
    let channel = conn.create_channel().await.map_err(|e| e.to_string())?;
    channel
        .exchange_declare(
            ShortString::from(exchange),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-max-length"),
        AMQPValue::LongLongInt(QUEUE_MAX_LENGTH),
    );
    args.insert(
        ShortString::from("x-message-ttl"),
        AMQPValue::LongLongInt(QUEUE_TTL_MS),
    );
    let declared = channel
        .queue_declare(
            ShortString::from(""),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            args,
        )
        .await
        .map_err(|e| e.to_string())?;
    let queue = declared.name().clone();
    let consumer = channel
        .basic_consume(
            queue.clone(),
            ShortString::from("claim-work"),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(Link {
        _conn: conn,
        channel,
        queue,
        consumer,
    })
}

/// The background task: connect, bind what is watched, then publish, bind and deliver until
/// the connection fails; then start over after a pause.
async fn run(
    url: String,
    exchange: String,
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Cmd>,
    linger: Duration,
) {
    // A process that never wakes or waits (most functions) never connects.
    let Some(mut first) = rx.recv().await.map(Some) else {
        return;
    };
    let mut pause = Duration::from_millis(200);
    loop {
        match timed(CONNECT_TIMEOUT, "connecting", connect(&url, &exchange)).await {
            Ok(link) => {
                tracing::debug!("claim-work wake-ups connected");
                pause = Duration::from_millis(200);
                let why = serve(link, &exchange, &shared, first.take(), &mut rx, linger).await;
                tracing::warn!(reason = %why, "claim-work wake-ups lost the broker; waiters re-read the index meanwhile");
            }
            Err(e) => {
                tracing::warn!(error = %e, "claim-work wake-ups cannot reach the broker; waiters re-read the index meanwhile");
            }
        }
        lock(&shared.bound).clear();
        if let Some(Cmd::Publish(q)) = first.take() {
            drop_wakeup(&shared, &q);
        }
        // Wake-ups queued meanwhile are dropped (waiters re-read on their schedule); watches
        // are re-bound from `watched` on the next connection.
        let until = tokio::time::Instant::now() + pause;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                cmd = rx.recv() => match cmd {
                    None => return,
                    Some(Cmd::Publish(q)) => drop_wakeup(&shared, &q),
                    Some(_) => {}
                },
            }
        }
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

fn drop_wakeup(shared: &Shared, q: &str) {
    lock(&shared.queued).remove(q);
}

async fn bind(
    channel: &Channel,
    queue: &ShortString,
    exchange: &str,
    q: &str,
    shared: &Shared,
) -> Result<(), String> {
    timed(
        STEP_TIMEOUT,
        "binding",
        channel.queue_bind(
            queue.clone(),
            ShortString::from(exchange),
            ShortString::from(q),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await?;
    lock(&shared.bound).insert(q.to_string());
    Ok(())
}

/// Serves one connection; returns why it ended.
async fn serve(
    link: Link,
    exchange: &str,
    shared: &Shared,
    first: Option<Cmd>,
    rx: &mut mpsc::Receiver<Cmd>,
    linger: Duration,
) -> String {
    let Link {
        _conn,
        channel,
        queue,
        mut consumer,
    } = link;
    let on = Bound {
        channel: &channel,
        queue: &queue,
        exchange,
        shared,
    };
    let watched: Vec<String> = lock(&shared.watched).keys().cloned().collect();
    for q in watched {
        if let Err(e) = on.handle(Cmd::Watch(q)).await {
            return e;
        }
    }
    // Bindings whose last waiter left, by when they go.
    let mut leaving: HashMap<String, tokio::time::Instant> = HashMap::new();
    let mut cmd = first;
    loop {
        let step = match cmd.take() {
            Some(Cmd::Unwatch(q)) => {
                leaving.insert(q, tokio::time::Instant::now() + linger);
                Ok(())
            }
            Some(c) => {
                if let Cmd::Watch(q) = &c {
                    leaving.remove(q);
                }
                on.handle(c).await
            }
            None => Ok(()),
        };
        if let Err(e) = step {
            return e;
        }
        let next_leave = leaving.values().min().copied();
        tokio::select! {
            delivery = consumer.next() => match delivery {
                Some(Ok(d)) => shared.local.notify(d.routing_key.as_str()),
                Some(Err(e)) => return format!("consuming: {e}"),
                None => return "the consumer ended".into(),
            },
            c = rx.recv() => match c {
                None => return "stopped".into(),
                Some(c) => cmd = Some(c),
            },
            _ = tokio::time::sleep_until(next_leave.unwrap_or_else(far_future)), if next_leave.is_some() => {
                let now = tokio::time::Instant::now();
                let due: Vec<String> = leaving
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(q, _)| q.clone())
                    .collect();
                for q in due {
                    leaving.remove(&q);
                    if let Err(e) = on.handle(Cmd::Unwatch(q)).await {
                        return e;
                    }
                }
            }
        }
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400)
}

/// A connection's channel and queue, for carrying out commands.
struct Bound<'a> {
    channel: &'a Channel,
    queue: &'a ShortString,
    exchange: &'a str,
    shared: &'a Shared,
}

impl Bound<'_> {
    async fn handle(&self, cmd: Cmd) -> Result<(), String> {
        let shared = self.shared;
        match cmd {
            Cmd::Publish(q) => {
                let published = timed(
                    STEP_TIMEOUT,
                    "publishing",
                    self.channel.basic_publish(
                        ShortString::from(self.exchange),
                        ShortString::from(q.as_str()),
                        BasicPublishOptions::default(),
                        b"",
                        BasicProperties::default(),
                    ),
                )
                .await;
                // Handed over (or failed): a later notify queues a wake-up again.
                lock(&shared.queued).remove(&q);
                published.map(|_| ())
            }
            // Each wait of a claimWork's loop watches again: a binding still in place (or
            // lingering) needs no second bind.
            Cmd::Watch(q)
                if lock(&shared.watched).contains_key(&q) && !lock(&shared.bound).contains(&q) =>
            {
                bind(self.channel, self.queue, self.exchange, &q, shared).await
            }
            Cmd::Unwatch(q) if !lock(&shared.watched).contains_key(&q) => {
                lock(&shared.bound).remove(&q);
                timed(
                    STEP_TIMEOUT,
                    "unbinding",
                    self.channel.queue_unbind(
                        self.queue.clone(),
                        ShortString::from(self.exchange),
                        ShortString::from(q.as_str()),
                        FieldTable::default(),
                    ),
                )
                .await
            }
            // A watch already given up, or an unwatch already watched again.
            Cmd::Watch(_) | Cmd::Unwatch(_) => Ok(()),
        }
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
                s.notify("p/w");
            }
            s.flush(Duration::from_millis(50)).await;
            assert!(start.elapsed() < Duration::from_millis(500), "{url}");
            let token = s.token("p/w");
            let waiter = {
                let s = s.clone();
                tokio::spawn(async move { s.wait("p/w", token, Duration::from_secs(10)).await })
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!s.crosses_processes("p/w"), "{url}");
            s.notify("p/w");
            tokio::time::timeout(Duration::from_secs(1), waiter)
                .await
                .expect("woken by this process's notify")
                .unwrap();
            let t = s.token("q/w");
            let start = Instant::now();
            s.wait("q/w", t, Duration::from_millis(200)).await;
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(190) && took < Duration::from_secs(2),
                "{took:?}"
            );
        }
        hold.abort();
    }
}
