//! The event port: where the queue's messages go (RabbitMQ in production, the log locally),
//! and the outbox drainer ([`drain`]) that moves them there from the records that hold them.

#[cfg(feature = "amqp")]
pub mod amqp;
pub mod drain;
pub mod held;
pub mod legacy;

use async_trait::async_trait;
use std::sync::{Arc, Mutex};

/// A sink could not take events (the broker is away, or refused them); they stay where
/// they were and are published again later.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

impl SinkError {
    /// A failure described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        SinkError(message.into())
    }
}

/// A message as it leaves the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Full exchange name, e.g. `exchange/taskcluster-queue/v1/task-pending`.
    pub exchange: String,
    /// Primary routing key.
    pub routing_key: String,
    /// CC routing keys.
    pub cc: Vec<String>,
    /// Message body.
    pub payload: serde_json::Value,
    /// The body's JSON text, when the event came from an outbox (the text `payload` was
    /// parsed from), so that a sink sends it as stored instead of serializing `payload` again.
    pub text: Option<String>,
}

impl Event {
    /// The body as the wire carries it: [`Event::text`] if at hand, else `payload` serialized.
    pub fn body(&self) -> serde_json::Result<std::borrow::Cow<'_, [u8]>> {
        match &self.text {
            Some(text) => Ok(std::borrow::Cow::Borrowed(text.as_bytes())),
            None => serde_json::to_vec(&self.payload).map(std::borrow::Cow::Owned),
        }
    }
}

/// Where events go: RabbitMQ in production, the log locally.
#[async_trait]
pub trait EventSink: Send + Sync + 'static {
    /// Publishes events in order; returns only once they are safely handed over.
    async fn publish(&self, events: &[Event]) -> Result<(), SinkError>;

    /// Makes ready what consumers rely on before the first event (a broker's exchanges), so
    /// that a consumer that binds at start-up finds them. Nothing to do by default.
    async fn prepare(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Logs every event (the local server's default sink).
pub struct LogSink;

#[async_trait]
impl EventSink for LogSink {
    async fn publish(&self, events: &[Event]) -> Result<(), SinkError> {
        for e in events {
            tracing::info!(exchange = %e.exchange, routing_key = %e.routing_key, cc = ?e.cc, "event");
        }
        Ok(())
    }
}

/// Keeps every event in memory (tests and tools observe the queue through it).
#[derive(Default, Clone)]
pub struct RecordingSink {
    events: Arc<Mutex<Vec<Event>>>,
}

impl RecordingSink {
    /// Everything published so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl EventSink for RecordingSink {
    async fn publish(&self, events: &[Event]) -> Result<(), SinkError> {
        self.events
            .lock()
            .map_err(|e| SinkError::new(e.to_string()))?
            .extend_from_slice(events);
        Ok(())
    }
}

/// Publishes to several sinks in turn.
pub struct FanoutSink(pub Vec<Arc<dyn EventSink>>);

#[async_trait]
impl EventSink for FanoutSink {
    async fn publish(&self, events: &[Event]) -> Result<(), SinkError> {
        for s in &self.0 {
            s.publish(events).await?;
        }
        Ok(())
    }

    async fn prepare(&self) -> Result<(), SinkError> {
        for s in &self.0 {
            s.prepare().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body goes out as the text it was stored as, and is serialized only without one.
    #[test]
    fn a_body_is_its_stored_text_when_at_hand() {
        let event = |text: Option<&str>| Event {
            exchange: "x".into(),
            routing_key: "k".into(),
            cc: vec![],
            payload: serde_json::json!({ "a": 1, "b": [true] }),
            text: text.map(str::to_string),
        };
        let stored = r#"{"b":[true],  "a":1}"#;
        assert_eq!(
            event(Some(stored)).body().unwrap().as_ref(),
            stored.as_bytes()
        );
        assert_eq!(
            event(None).body().unwrap().as_ref(),
            br#"{"a":1,"b":[true]}"#.as_slice()
        );
    }
}
