//! The RabbitMQ (Amazon MQ) adapter of the event port: lapin, with publisher confirms.
//!
//! One connection and one confirm-mode channel, opened on first use and kept across calls
//! (and across warm Lambda invocations); any failure drops them so that the next call
//! reconnects. `publish` returns only once the broker has confirmed every message, so the
//! outbox drainer removes nothing the broker has not taken responsibility for.

use crate::events::{Event, EventSink, SinkError};
use crate::routing::{
    exchange_name, EXCHANGES, LEGACY_EXCHANGES, SCHEDULER_EXCHANGES, SCHEDULER_EXCHANGE_PREFIX,
};
use async_trait::async_trait;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::sync::Mutex;

/// Declares every exchange under `prefix` as a durable topic exchange (idempotent; consumers
/// may declare them too, with the same arguments, to bind before anything is published).
pub async fn declare_exchanges(channel: &Channel, prefix: &str) -> Result<(), String> {
    declare(channel, prefix, &EXCHANGES).await
}

/// [`declare_exchanges`] for the task-graph scheduler's exchanges.
pub async fn declare_scheduler_exchanges(channel: &Channel, prefix: &str) -> Result<(), String> {
    declare(channel, prefix, &SCHEDULER_EXCHANGES).await
}

/// Declares seed 003's exchanges ([`LEGACY_EXCHANGES`], full names), as the legacy mode's
/// publisher does.
pub async fn declare_legacy_exchanges(channel: &Channel) -> Result<(), String> {
    declare(channel, "", &LEGACY_EXCHANGES).await
}

async fn declare(channel: &Channel, prefix: &str, names: &[&str]) -> Result<(), String> {
    for short in names {
        channel
            .exchange_declare(
                ShortString::from(exchange_name(prefix, short)),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("declaring exchange {short}: {e}"))?;
    }
    Ok(())
}

/// AMQP delivery mode of a persistent message.
const PERSISTENT: u8 = 2;

/// Longest wait for connecting to the broker (and declaring what it needs): a broker in a
/// memory or disk alarm, or a listener that never speaks AMQP, must not hold a publisher
/// until its function's timeout, when it could no longer put its batch back.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest wait for the broker to confirm one batch.
pub const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `f`, or an error naming `what` after `limit`.
pub(crate) async fn timed<T, E: std::fmt::Display>(
    limit: std::time::Duration,
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {limit:?}")),
    }
}

/// Publishes events to topic exchanges named `<prefix><exchange>`.
pub struct AmqpSink {
    url: String,
    prefix: String,
    scheduler_prefix: String,
    durable_queues: Vec<DurableQueue>,
    /// The legacy mode's scheduler id, when on ([`crate::events::legacy`]).
    legacy: Option<String>,
    open: Mutex<Option<(Connection, Channel)>>,
}

/// The queue exchanges a task-graph scheduler consumes: the resolutions.
pub const RESOLUTION_EXCHANGES: [&str; 3] = crate::routing::RESOLUTION_NAMES;

/// The binding pattern of a consumer of the queue's messages about the tasks of scheduler
/// `scheduler_id` (the routing key's eighth word is the task's schedulerId).
pub fn scheduler_pattern(scheduler_id: &str) -> String {
    format!("primary.*.*.*.*.*.*.{scheduler_id}.#")
}

/// worker-manager's exchanges whose messages say a worker is gone, after its prefix
/// (upstream's `exchange/taskcluster-worker-manager/v1/`).
pub const WORKER_GONE_EXCHANGES: [&str; 2] = ["worker-stopped", "worker-removed"];

/// A durable queue declared and bound on every (re)connect, so that it exists, and holds
/// every matching message, before anything needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableQueue {
    /// Its name.
    pub name: String,
    /// The exchanges it is bound to (full names). Each is declared too, as every exchange
    /// here (durable, topic): another service's may not exist yet.
    pub exchanges: Vec<String>,
    /// The binding pattern.
    pub pattern: String,
    /// True if a publisher must not publish without it (its messages would be lost); false
    /// for a queue of another service's messages, declared best effort so that a broker that
    /// refuses it (permissions) never stops the queue's own events.
    pub required: bool,
}

/// Where a feed's queue is bound, by what the job declares (see [`crate::jobs::declare::Feed`]).
pub struct FeedBindings<'a> {
    /// The queue's exchange prefix.
    pub exchange_prefix: &'a str,
    /// The task-graph scheduler's id.
    pub scheduler_id: &'a str,
    /// worker-manager's exchange prefix.
    pub worker_manager_prefix: &'a str,
}

impl FeedBindings<'_> {
    /// The durable queue `name` bound as `binds` says.
    pub fn queue(&self, name: String, binds: crate::jobs::declare::Binds) -> DurableQueue {
        use crate::jobs::declare::Binds;
        let (exchanges, pattern, required) = match binds {
            // The queue's own messages: a publisher declares it before it publishes.
            Binds::Resolutions => (
                RESOLUTION_EXCHANGES
                    .iter()
                    .map(|x| exchange_name(self.exchange_prefix, x))
                    .collect(),
                scheduler_pattern(self.scheduler_id),
                true,
            ),
            Binds::WorkerManager => (
                WORKER_GONE_EXCHANGES
                    .iter()
                    .map(|x| format!("{}{x}", self.worker_manager_prefix))
                    .collect(),
                "#".into(),
                false,
            ),
        };
        DurableQueue {
            name,
            exchanges,
            pattern,
            required,
        }
    }
}

/// Declares `q` and its exchanges, and binds it.
pub async fn declare_durable_queue(channel: &Channel, q: &DurableQueue) -> Result<(), String> {
    channel
        .queue_declare(
            ShortString::from(q.name.as_str()),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("declaring queue {}: {e}", q.name))?;
    for x in &q.exchanges {
        declare(channel, "", &[x.as_str()]).await?;
        channel
            .queue_bind(
                ShortString::from(q.name.as_str()),
                ShortString::from(x.as_str()),
                ShortString::from(q.pattern.as_str()),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("binding queue {} to {x}: {e}", q.name))?;
    }
    Ok(())
}

impl AmqpSink {
    /// A sink for the broker at `url` (`amqp://` or `amqps://`); connects on first publish.
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> Self {
        AmqpSink {
            url: url.into(),
            prefix: prefix.into(),
            scheduler_prefix: SCHEDULER_EXCHANGE_PREFIX.into(),
            durable_queues: vec![],
            legacy: None,
            open: Mutex::new(None),
        }
    }

    /// The same sink, declaring the scheduler's exchanges under `prefix` instead of the
    /// default.
    pub fn with_scheduler_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.scheduler_prefix = prefix.into();
        self
    }

    /// The same sink, also declaring the durable queue `q` (and its exchanges) on every
    /// (re)connect and so before anything is published: the queue an event source mapping
    /// reads exists, and holds every matching message, from the first publish on.
    pub fn with_durable_queue(mut self, q: DurableQueue) -> Self {
        self.durable_queues.push(q);
        self
    }

    /// The same sink, also publishing seed 003's layout ([`crate::events::legacy`]);
    /// `scheduler_id` is the task-graph scheduler's, whose tasks route by their graph.
    pub fn with_legacy_exchanges(mut self, scheduler_id: impl Into<String>) -> Self {
        self.legacy = Some(scheduler_id.into());
        self
    }

    /// Connects now (if not connected), declaring the exchanges and the durable queue, so that
    /// consumers can rely on them before the first event.
    pub async fn ensure_connected(&self) -> Result<(), String> {
        self.ensure_connected_within(CONNECT_TIMEOUT).await
    }

    /// [`AmqpSink::ensure_connected`], giving up after `limit` (a cold start's, shorter).
    pub async fn ensure_connected_within(&self, limit: std::time::Duration) -> Result<(), String> {
        let mut open = self.open.lock().await;
        if !open.as_ref().is_some_and(|(c, _)| c.status().connected()) {
            *open = Some(timed(limit, "RabbitMQ", self.connect()).await?);
        }
        Ok(())
    }

    /// Connects, enables confirms and declares every exchange (durable topic exchanges) and
    /// the durable queues, if any.
    async fn connect(&self) -> Result<(Connection, Channel), String> {
        let conn = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(|e| format!("connecting to RabbitMQ: {e}"))?;
        let channel = conn.create_channel().await.map_err(|e| e.to_string())?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        declare_exchanges(&channel, &self.prefix).await?;
        declare_scheduler_exchanges(&channel, &self.scheduler_prefix).await?;
        if self.legacy.is_some() {
            declare_legacy_exchanges(&channel).await?;
        }
        for q in &self.durable_queues {
            if q.required {
                declare_durable_queue(&channel, q).await?;
                continue;
            }
            // On a channel of its own: a refusal closes the channel it happens on.
            let declared = match conn.create_channel().await {
                Ok(ch) => {
                    let r = declare_durable_queue(&ch, q).await;
                    let _ = ch.close(200, ShortString::from("declared")).await;
                    r
                }
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = declared {
                tracing::warn!(queue = %q.name, error = %e, "could not declare a feed queue; the queue's own events go on");
            }
        }
        Ok((conn, channel))
    }

    async fn publish_on(channel: &Channel, events: &[Event]) -> Result<(), String> {
        let mut confirms = Vec::with_capacity(events.len());
        for e in events {
            let body = e.body().map_err(|e| e.to_string())?;
            let mut props = BasicProperties::default()
                .with_delivery_mode(PERSISTENT)
                .with_content_type(ShortString::from("application/json"))
                .with_content_encoding(ShortString::from("utf-8"));
            if !e.cc.is_empty() {
                // RabbitMQ's sender-selected distribution: one copy per matching queue, even
                // when several of the keys match it.
                let cc: Vec<AMQPValue> =
                    e.cc.iter()
                        .map(|k| AMQPValue::LongString(LongString::from(k.as_str())))
                        .collect();
                let mut headers = FieldTable::default();
                headers.insert(
                    ShortString::from("CC"),
                    AMQPValue::FieldArray(FieldArray::from(cc)),
                );
                props = props.with_headers(headers);
            }
            let confirm = channel
                .basic_publish(
                    ShortString::from(e.exchange.as_str()),
                    ShortString::from(e.routing_key.as_str()),
                    BasicPublishOptions::default(),
                    &body,
                    props,
                )
                .await
                .map_err(|err| format!("publishing to {}: {err}", e.exchange))?;
            confirms.push(confirm);
        }
        for confirm in confirms {
            let answer = confirm.await.map_err(|e| e.to_string())?;
            if !answer.is_ack() {
                return Err("RabbitMQ refused a message (nack)".into());
            }
        }
        Ok(())
    }
}

#[async_trait]
impl EventSink for AmqpSink {
    /// Connects (if not connected), which declares every exchange of every enabled layout.
    async fn prepare(&self) -> Result<(), SinkError> {
        self.ensure_connected().await.map_err(SinkError)
    }

    async fn publish(&self, events: &[Event]) -> Result<(), SinkError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut open = self.open.lock().await;
        if !open.as_ref().is_some_and(|(c, _)| c.status().connected()) {
            let link = timed(CONNECT_TIMEOUT, "RabbitMQ", self.connect()).await;
            *open = Some(link.map_err(SinkError)?);
        }
        let Some((_, channel)) = open.as_ref() else {
            return Err(SinkError::new("no RabbitMQ channel"));
        };
        let expanded;
        let events = match &self.legacy {
            Some(scheduler_id) => {
                expanded = crate::events::legacy::with_legacy(events, &self.prefix, scheduler_id);
                &expanded[..]
            }
            None => events,
        };
        let what = format!("RabbitMQ confirming {} events", events.len());
        let result = timed(CONFIRM_TIMEOUT, &what, Self::publish_on(channel, events)).await;
        if result.is_err() {
            // Start over on a fresh connection next time; the events stay in the outbox.
            *open = None;
        }
        result.map_err(SinkError)
    }
}

/// Consumes the durable queue `q` on the broker at `url` (declaring it, its exchanges and its
/// bindings first): each message's body and redelivered flag go to `handle`, in order; the
/// message is acknowledged once `handle` succeeds and put back otherwise (redelivered after
/// the others). At most `prefetch` messages are unacknowledged at once. Returns why it stopped
/// (the connection or the channel failed); the caller connects again.
pub async fn consume<F, Fut>(url: &str, q: &DurableQueue, prefetch: u16, handle: F) -> String
where
    F: Fn(Vec<u8>, bool) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    use futures_util::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
    let setup = async {
        let conn = Connection::connect(url, ConnectionProperties::default())
            .await
            .map_err(|e| format!("connecting to RabbitMQ: {e}"))?;
        let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
        declare_durable_queue(&ch, q).await?;
        ch.basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let consumer = ch
            .basic_consume(
                ShortString::from(q.name.as_str()),
                ShortString::from(""),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("consuming {}: {e}", q.name))?;
        Ok::<_, String>((conn, ch, consumer))
    };
    let (_conn, _ch, mut consumer) = match timed(CONNECT_TIMEOUT, "RabbitMQ", setup).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    while let Some(delivery) = consumer.next().await {
        let d = match delivery {
            Ok(d) => d,
            Err(e) => return e.to_string(),
        };
        let done = match handle(d.data.clone(), d.redelivered).await {
            Ok(()) => d.ack(BasicAckOptions::default()).await,
            Err(e) => {
                tracing::warn!(queue = %q.name, error = %e, "handling a message failed; it is put back");
                let requeue = BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                };
                d.nack(requeue).await
            }
        };
        if let Err(e) = done {
            return e.to_string();
        }
    }
    format!("the consumer of {} ended", q.name)
}
