//! The Amazon MQ (RabbitMQ) event source mapping, locally: batches of messages from the
//! mapping's queues on the local RabbitMQ, handed to the function as `aws:rmq` events; a batch
//! is acknowledged only when the function succeeded, and redelivered otherwise.

use super::lambda::Pool;
use super::template::BrokerMapping;
use base64::Engine;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Consumes the mapping's first queue until `stop`, reconnecting as needed (the queue exists
/// once a publisher declared it).
pub async fn run(
    pool: Arc<Pool>,
    m: BrokerMapping,
    amqp_url: String,
    broker_arn: String,
    mut stop: watch::Receiver<bool>,
) {
    let Some(queue) = m.queues.first().cloned() else {
        return;
    };
    loop {
        tokio::select! {
            r = consume(&pool, &m, &queue, &amqp_url, &broker_arn) => {
                if let Err(e) = r {
                    tracing::debug!(%queue, error = %e, "broker mapping: retrying");
                }
            }
            _ = stop.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn consume(
    pool: &Arc<Pool>,
    m: &BrokerMapping,
    queue: &str,
    url: &str,
    broker_arn: &str,
) -> Result<(), String> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|e| e.to_string())?;
    let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
    // Passive: the mapping reads a queue that exists; it does not make one.
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    ch.basic_qos(
        m.batch_size.min(u16::MAX as usize) as u16,
        BasicQosOptions::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let vhost = url.rsplit('/').next().map(|v| {
        percent_encoding::percent_decode_str(v)
            .decode_utf8_lossy()
            .into_owned()
    });
    let key = format!(
        "{queue}::{}",
        vhost
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "/".into())
    );
    loop {
        let Some(first) = consumer.next().await else {
            return Err("consumer ended".into());
        };
        let mut batch = vec![first.map_err(|e| e.to_string())?];
        let until = Instant::now() + m.window;
        while batch.len() < m.batch_size {
            match tokio::time::timeout_at(until.into(), consumer.next()).await {
                Ok(Some(d)) => batch.push(d.map_err(|e| e.to_string())?),
                _ => break,
            }
        }
        let messages: Vec<Value> = batch
            .iter()
            .map(|d| {
                json!({
                    "basicProperties": {
                        "contentType": d.properties.content_type().as_ref().map(|c| c.to_string()),
                        "deliveryMode": d.properties.delivery_mode(),
                    },
                    "redelivered": d.redelivered,
                    "data": base64::engine::general_purpose::STANDARD.encode(&d.data),
                })
            })
            .collect();
        let event = json!({
            "eventSource": "aws:rmq",
            "eventSourceArn": broker_arn,
            "rmqMessagesByQueue": { key.clone(): messages }
        });
        let ok = pool.invoke(&event).await.is_ok();
        for d in &batch {
            let r = if ok {
                d.acker.ack(BasicAckOptions::default()).await
            } else {
                d.acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..Default::default()
                    })
                    .await
            };
            r.map_err(|e| e.to_string())?;
        }
        if !ok {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Deletes the durable queues `names` on the broker at `url` (a deleted stack's), as deleting
/// a stack leaves no queue behind on a broker it created; best effort.
pub async fn delete_queues(url: &str, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let Ok(conn) = Connection::connect(url, ConnectionProperties::default()).await else {
        return;
    };
    if let Ok(ch) = conn.create_channel().await {
        for name in names {
            let _ = ch
                .queue_delete(name.as_str().into(), Default::default())
                .await;
        }
    }
    let _ = conn.close(200, "stack deleted".into()).await;
}
