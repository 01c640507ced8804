//! Test helpers for RabbitMQ: a consumer with an exchange prefix of its own, and a relay
//! that can cut the server off from the broker.

use crate::slugid;
use lapin::options::{
    BasicGetOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Every exchange the queue publishes to.
pub const ALL: [&str; 11] = shared::routing::EXCHANGES;

/// The broker's address (`TCQ_TEST_AMQP_ADDR`, default the machine's RabbitMQ).
pub fn broker_addr() -> String {
    std::env::var("TCQ_TEST_AMQP_ADDR").unwrap_or_else(|_| "127.0.0.1:5672".into())
}

/// The AMQP URL of a broker address, as guest.
pub fn amqp_url(addr: &str) -> String {
    format!("amqp://guest:guest@{addr}/%2f")
}

/// True if the exchange `name` exists on the machine's broker (a passive declaration, which
/// RabbitMQ refuses with 404 for a missing exchange and which closes its channel).
pub async fn exchange_exists(name: &str) -> bool {
    let conn = Connection::connect(&amqp_url(&broker_addr()), ConnectionProperties::default())
        .await
        .expect("RabbitMQ reachable");
    let ch = conn.create_channel().await.expect("channel");
    let found = ch
        .exchange_declare(
            ShortString::from(name),
            lapin::ExchangeKind::Topic,
            lapin::options::ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .is_ok();
    let _ = conn.close(200, ShortString::from("done")).await;
    found
}

/// Deletes the exchanges `names` (a test's own, when it ends).
pub async fn delete_exchanges(names: &[String]) {
    let conn = Connection::connect(&amqp_url(&broker_addr()), ConnectionProperties::default())
        .await
        .expect("RabbitMQ reachable");
    let ch = conn.create_channel().await.expect("channel");
    for name in names {
        let _ = ch
            .exchange_delete(
                ShortString::from(name.as_str()),
                ExchangeDeleteOptions::default(),
            )
            .await;
    }
    let _ = conn.close(200, ShortString::from("done")).await;
}

/// A message as a consumer saw it.
#[derive(Debug)]
pub struct Msg {
    /// Full exchange name.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// JSON body.
    pub payload: Value,
    /// Delivery mode 2.
    pub persistent: bool,
    /// Content type.
    pub content_type: String,
    /// The CC header's keys.
    pub cc: Vec<String>,
}

/// A consumer connection with the test's own exchange prefix.
pub struct Broker {
    _conn: Connection,
    /// The consumer's channel.
    pub ch: Channel,
    /// This broker's exchange prefix, e.g. `exchange/tcq-test-<slug>/v1/`.
    pub prefix: String,
}

impl Broker {
    pub async fn connect() -> Broker {
        let conn = Connection::connect(&amqp_url(&broker_addr()), ConnectionProperties::default())
            .await
            .expect("RabbitMQ reachable (scripts/test.sh starts it)");
        let ch = conn.create_channel().await.expect("channel");
        let prefix = format!("exchange/tcq-test-{}/v1/", slugid());
        // Declared here too (the publisher's own declaration) so that queues can be bound
        // before the server publishes anything.
        shared::events::amqp::declare_exchanges(&ch, &prefix)
            .await
            .expect("declare exchanges");
        Broker {
            _conn: conn,
            ch,
            prefix,
        }
    }

    /// A consumer for exchanges that already exist under `prefix` (after a reconnect).
    pub async fn with_prefix(prefix: &str) -> Broker {
        let conn = Connection::connect(&amqp_url(&broker_addr()), ConnectionProperties::default())
            .await
            .expect("RabbitMQ reachable");
        let ch = conn.create_channel().await.expect("channel");
        Broker {
            _conn: conn,
            ch,
            prefix: prefix.to_string(),
        }
    }

    /// A durable queue named `name` (it outlives this connection and a broker restart),
    /// bound to `exchanges` with `pattern`.
    pub async fn bind_durable(&self, exchanges: &[&str], pattern: &str, name: &str) {
        self.ch
            .queue_declare(
                ShortString::from(name),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("declare queue");
        self.bind_queue(name, exchanges, pattern).await;
    }

    /// Binds queue `name` to each of `exchanges` with `pattern`.
    async fn bind_queue(&self, name: &str, exchanges: &[&str], pattern: &str) {
        for short in exchanges {
            self.ch
                .queue_bind(
                    ShortString::from(name),
                    ShortString::from(format!("{}{short}", self.prefix)),
                    ShortString::from(pattern),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .expect("bind");
        }
    }

    /// Deletes a queue made by [`Broker::bind_durable`].
    pub async fn delete_queue(&self, name: &str) {
        let _ = self
            .ch
            .queue_delete(ShortString::from(name), Default::default())
            .await;
    }

    /// A server queue bound to `exchanges` with `pattern`; returns its name.
    pub async fn bind(&self, exchanges: &[&str], pattern: &str) -> String {
        let q = self
            .ch
            .queue_declare(
                ShortString::from(""),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("declare queue");
        let name = q.name().to_string();
        self.bind_queue(&name, exchanges, pattern).await;
        name
    }

    pub async fn get(&self, queue: &str) -> Option<Msg> {
        let m = self
            .ch
            .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")?;
        let props = &m.delivery.properties;
        let cc = cc_of(props);
        Some(Msg {
            exchange: m.delivery.exchange.to_string(),
            routing_key: m.delivery.routing_key.to_string(),
            payload: serde_json::from_slice(&m.delivery.data).expect("JSON body"),
            persistent: *props.delivery_mode() == Some(2),
            content_type: props
                .content_type()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default(),
            cc,
        })
    }

    /// Waits for `n` messages on `queue` (panics after `timeout`).
    pub async fn take(&self, queue: &str, n: usize, timeout: Duration) -> Vec<Msg> {
        let until = Instant::now() + timeout;
        let mut got = vec![];
        while got.len() < n {
            match self.get(queue).await {
                Some(m) => got.push(m),
                None => {
                    assert!(
                        Instant::now() < until,
                        "got {} of {n} messages: {got:#?}",
                        got.len()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        got
    }

    /// Everything that arrives on `queue` within `quiet`.
    pub async fn rest(&self, queue: &str, quiet: Duration) -> Vec<Msg> {
        tokio::time::sleep(quiet).await;
        let mut got = vec![];
        while let Some(m) = self.get(queue).await {
            got.push(m);
        }
        got
    }

    pub fn short<'a>(&self, m: &'a Msg) -> &'a str {
        m.exchange.strip_prefix(&self.prefix).unwrap_or(&m.exchange)
    }

    /// The short exchange names of the messages in `got` about task `id`, in order.
    pub fn names_of<'a>(&self, got: &'a [Msg], id: &str) -> Vec<&'a str> {
        got.iter()
            .filter(|m| m.payload["status"]["taskId"] == id)
            .map(|m| self.short(m))
            .collect()
    }

    pub async fn cleanup(self) {
        for short in ALL {
            let _ = self
                .ch
                .exchange_delete(
                    ShortString::from(format!("{}{short}", self.prefix)),
                    ExchangeDeleteOptions::default(),
                )
                .await;
        }
    }
}

/// A TCP relay to the broker that the test can take down (cutting live connections and
/// refusing new ones) and bring back: RabbitMQ becoming unreachable, from the server's side.
pub struct Relay {
    addr: String,
    up: watch::Sender<bool>,
}

impl Relay {
    pub async fn start(up: bool) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("addr").to_string();
        let (tx, rx) = watch::channel(up);
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                if !*rx.borrow() {
                    continue; // dropped: the connection is refused
                }
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(broker_addr()).await else {
                        return;
                    };
                    let mut inbound = inbound;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = rx.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Relay { addr, up: tx }
    }

    pub fn url(&self) -> String {
        amqp_url(&self.addr)
    }

    pub fn set(&self, up: bool) {
        let _ = self.up.send(up);
    }
}

/// The keys of a message's `CC` header.
fn cc_of(props: &lapin::BasicProperties) -> Vec<String> {
    props
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("CC").cloned())
        .map(|v| match v {
            AMQPValue::FieldArray(a) => a
                .as_slice()
                .iter()
                .filter_map(|x| match x {
                    AMQPValue::LongString(s) => Some(s.to_string()),
                    _ => None,
                })
                .collect(),
            _ => vec![],
        })
        .unwrap_or_default()
}

/// Records every message published under each `(prefix, as)` pair of exchange prefixes into
/// `sink`, as the local server's sink would have seen it: its exchange under `as` instead of
/// `prefix`. The deployed shape's functions publish to RabbitMQ only, so its tests read their
/// events back this way. Declares the exchanges first, so that the binding comes before any
/// publish; runs until aborted.
pub async fn record(
    url: String,
    prefixes: Vec<(String, String)>,
    sink: shared::events::RecordingSink,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    use futures_util::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions};
    use shared::events::EventSink;
    let conn = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("RabbitMQ reachable");
    let ch = conn.create_channel().await.expect("channel");
    let q = ch
        .queue_declare(
            ShortString::from(""),
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare queue");
    for (i, (prefix, _)) in prefixes.iter().enumerate() {
        let names: &[&str] = if i == 0 {
            shared::events::amqp::declare_exchanges(&ch, prefix)
                .await
                .expect("declare exchanges");
            &ALL
        } else {
            shared::events::amqp::declare_scheduler_exchanges(&ch, prefix)
                .await
                .expect("declare exchanges");
            &shared::routing::SCHEDULER_EXCHANGES
        };
        for short in names {
            ch.queue_bind(
                q.name().clone(),
                ShortString::from(format!("{prefix}{short}")),
                ShortString::from("#"),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind");
        }
    }
    let mut consumer = ch
        .basic_consume(
            q.name().clone(),
            ShortString::from("recorder"),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let _ = ready.send(());
    while let Some(Ok(d)) = consumer.next().await {
        let exchange = d.exchange.to_string();
        let exchange = prefixes
            .iter()
            .find_map(|(p, as_)| {
                exchange
                    .strip_prefix(p.as_str())
                    .map(|s| format!("{as_}{s}"))
            })
            .unwrap_or(exchange);
        let cc = cc_of(&d.properties);
        let event = shared::events::Event {
            exchange,
            routing_key: d.routing_key.to_string(),
            cc,
            payload: serde_json::from_slice(&d.data).unwrap_or(Value::Null),
            text: None,
        };
        let _ = sink.publish(&[event]).await;
        let _ = d.acker.ack(BasicAckOptions::default()).await;
    }
}
