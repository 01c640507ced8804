//! The event port and the outbox drainer.
//!
//! Events are written into the status item of the task they concern, in the same conditional
//! write as the state change (see `model`). The drainer publishes them through an
//! [`EventSink`] and only then removes them, so delivery is at least once: a crash between the
//! two re-publishes on the next pass.

use crate::keys::{self, index, SHARDS};
use crate::model::{OutboxEvent, TaskRecord};
use crate::store::{Cond, Item, SkRange, Store, StoreError, WriteOp};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};

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
}

/// Where events go: RabbitMQ in production, the log locally.
#[async_trait]
pub trait EventSink: Send + Sync + 'static {
    /// Publishes events in order; returns only once they are safely handed over.
    async fn publish(&self, events: &[Event]) -> Result<(), String>;
}

/// Logs every event (the local server's default sink).
pub struct LogSink;

#[async_trait]
impl EventSink for LogSink {
    async fn publish(&self, events: &[Event]) -> Result<(), String> {
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
    async fn publish(&self, events: &[Event]) -> Result<(), String> {
        self.events
            .lock()
            .map_err(|e| e.to_string())?
            .extend_from_slice(events);
        Ok(())
    }
}

/// Publishes to several sinks in turn.
pub struct FanoutSink(pub Vec<Arc<dyn EventSink>>);

#[async_trait]
impl EventSink for FanoutSink {
    async fn publish(&self, events: &[Event]) -> Result<(), String> {
        for s in &self.0 {
            s.publish(events).await?;
        }
        Ok(())
    }
}

/// What one drain step did.
#[derive(Debug, PartialEq, Eq)]
pub enum DrainOutcome {
    /// This many events were published and removed.
    Delivered(usize),
    /// Nothing was waiting.
    Empty,
}

fn to_event(prefix: &str, e: &OutboxEvent) -> Event {
    Event {
        exchange: crate::routing::exchange_name(prefix, &e.exchange),
        routing_key: e.routing_key.clone(),
        cc: e.cc.clone(),
        payload: e.payload.clone(),
    }
}

/// Delivers the outbox of one task: publish, then remove exactly what was published.
pub async fn drain_task(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    task_id: &str,
) -> Result<DrainOutcome, StoreError> {
    let Some(item) = store.get(keys::TASKS, task_id, keys::SK_STATUS).await? else {
        return Ok(DrainOutcome::Empty);
    };
    let rec: TaskRecord =
        serde_json::from_value(item.data).map_err(|e| StoreError::Other(e.to_string()))?;
    if rec.outbox.is_empty() {
        return Ok(DrainOutcome::Empty);
    }
    let events: Vec<Event> = rec.outbox.iter().map(|e| to_event(prefix, e)).collect();
    if let Err(e) = sink.publish(&events).await {
        tracing::warn!(task_id, error = %e, "publishing failed; events stay in the outbox");
        return Err(StoreError::Other(format!("publish failed: {e}")));
    }
    let published: Vec<String> = rec.outbox.iter().map(|e| e.id.clone()).collect();
    let (mut rec, mut version) = (rec, item.version);
    loop {
        rec.outbox.retain(|e| !published.contains(&e.id));
        let data = serde_json::to_value(&rec).map_err(|e| StoreError::Other(e.to_string()))?;
        let new_item = Item::new(task_id, keys::SK_STATUS, data, rec.index_entries());
        let op = WriteOp::Put {
            table: keys::TASKS,
            item: new_item,
            cond: Cond::Version(version),
        };
        match store.write(op).await {
            Ok(_) => return Ok(DrainOutcome::Delivered(published.len())),
            Err(e) if e.is_condition_failed() => {
                // The task changed meanwhile; re-read and remove only what we published.
                let Some(item) = store.get(keys::TASKS, task_id, keys::SK_STATUS).await? else {
                    return Ok(DrainOutcome::Delivered(published.len()));
                };
                rec = serde_json::from_value(item.data)
                    .map_err(|e| StoreError::Other(e.to_string()))?;
                version = item.version;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One pass over every outbox shard; returns the number of events delivered.
pub async fn drain_all(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    batch: usize,
) -> Result<usize, StoreError> {
    let mut delivered = 0;
    for shard in 0..SHARDS {
        let page = store
            .query_index(
                keys::TASKS,
                index::OUTBOX,
                &keys::shard_pk(index::OUTBOX, shard),
                &SkRange::default(),
                None,
                batch,
            )
            .await?;
        for item in page.items {
            if let DrainOutcome::Delivered(n) = drain_task(store, sink, prefix, &item.pk).await? {
                delivered += n;
            }
        }
    }
    Ok(delivered)
}
