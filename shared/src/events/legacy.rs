//! Seed 003's exchange layout, published next to today's when the legacy mode is on
//! (`TCQ_LEGACY_EXCHANGES`): four exchanges, `v1/queue:task-{pending,running,completed,failed}`,
//! and one seven-word routing key (see [`crate::routing::legacy_routing_key`]). Each legacy
//! message is derived from one of today's as it is published, and goes out in the same
//! confirmed batch right after it: from the same outbox, at least once, in order per task.

use crate::events::Event;
use crate::routing::{legacy_exchange, legacy_routing_key, TaskKey, LEGACY_EXCHANGES};
use serde_json::json;

/// `events`, each followed by its legacy counterpart if it has one. `prefix` is today's
/// exchange prefix; `scheduler_id` the task-graph scheduler's, whose tasks' routing words
/// are their graph's.
pub fn with_legacy(events: &[Event], prefix: &str, scheduler_id: &str) -> Vec<Event> {
    let mut out = Vec::with_capacity(events.len() * 2);
    for e in events {
        out.push(e.clone());
        out.extend(legacy_event(e, prefix, scheduler_id));
    }
    out
}

/// The schema a legacy message to `exchange` is checked against before it is published.
pub fn schema_name(exchange: &str) -> String {
    let short = exchange.rsplit(':').next().unwrap_or(exchange);
    format!("legacy-{short}-message")
}

/// The legacy counterpart of one of today's events, if it has one. A body that fails its
/// schema (a bug) is logged and left out; today's message still goes.
pub fn legacy_event(e: &Event, prefix: &str, scheduler_id: &str) -> Option<Event> {
    let exchange = legacy_exchange(e.exchange.strip_prefix(prefix)?)?;
    let p = &e.payload;
    let status = &p["status"];
    // As the seed says: a pending task has not started running, so its runId word is `_`.
    let run_id = p["runId"]
        .as_u64()
        .and_then(|r| u32::try_from(r).ok())
        .filter(|_| exchange != LEGACY_EXCHANGES[0]);
    let key = TaskKey {
        task_id: status["taskId"].as_str()?,
        run_id,
        worker_group: p["workerGroup"].as_str(),
        worker_id: p["workerId"].as_str(),
        provisioner_id: status["provisionerId"].as_str()?,
        worker_type: status["workerType"].as_str()?,
        ..TaskKey::default()
    };
    // The scheduler routes its graphs' tasks through `<schedulerId>.<taskGraphId>.<routing>`.
    let graph_route = format!("route.{scheduler_id}.");
    let routing = (status["schedulerId"] == scheduler_id)
        .then(|| {
            e.cc.iter()
                .find(|c| c.starts_with(&graph_route))
                .and_then(|c| c.strip_prefix("route."))
        })
        .flatten();
    let mut body = json!({ "version": 1, "status": status });
    for field in ["runId", "workerGroup", "workerId"] {
        if let (Some(v), Some(o)) = (p.get(field), body.as_object_mut()) {
            o.insert(field.to_string(), v.clone());
        }
    }
    let schema = schema_name(exchange);
    if let Err(errors) = crate::schema::check(&schema, &body) {
        tracing::error!(
            exchange,
            ?errors,
            "BUG: a legacy message does not match its schema; not published"
        );
        return None;
    }
    Some(Event {
        exchange: exchange.to_string(),
        routing_key: legacy_routing_key(&key, routing),
        cc: e.cc.clone(),
        payload: body,
        text: None,
    })
}
