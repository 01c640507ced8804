//! The task-graph scheduler's records (seed 001): a graph's own item and one item per task of
//! the graph, in the graph's partition of the `task-graphs` table.
//!
//! | table         | pk          | sk              | what                                        |
//! |---------------|-------------|-----------------|---------------------------------------------|
//! | `task-graphs` | taskGraphId | `task-graph`    | state, leaves (`requires`), event outbox    |
//! | `task-graphs` | taskGraphId | `task#<taskId>` | one task: label, requires, dependents, reruns |
//!
//! Graph items with undelivered events have an `outbox` index entry, as task statuses do.

use super::outbox::{outbox_entry, OutboxEvent, Outboxed};
use crate::error::{ApiError, ApiResult};
use crate::routing::Exchange;
use crate::store::{Data, IndexEntry, Item};
use crate::time::Ts;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The task-graph scheduler's graphs and their tasks.
pub const TASK_GRAPHS: &str = "task-graphs";
/// Sort key of a graph's own item.
pub const SK_TASK_GRAPH: &str = "task-graph";
/// Sort-key prefix of a graph's task items.
pub const SK_GRAPH_TASK_PREFIX: &str = "task#";

/// Sort key of the item of task `task_id` in its graph's partition.
pub fn sk_graph_task(task_id: &str) -> String {
    format!("{SK_GRAPH_TASK_PREFIX}{task_id}")
}

/// Graph states.
pub mod state {
    /// Tasks are still to complete.
    pub const RUNNING: &str = "running";
    /// A task failed for good.
    pub const BLOCKED: &str = "blocked";
    /// Every task completed.
    pub const FINISHED: &str = "finished";
}

/// Task node states.
pub mod node_state {
    /// Defined on the queue, waiting for the tasks it requires.
    pub const UNSCHEDULED: &str = "unscheduled";
    /// Scheduled (or rerun) on the queue.
    pub const SCHEDULED: &str = "scheduled";
    /// Completed successfully.
    pub const COMPLETED: &str = "completed";
    /// Failed with no reruns left.
    pub const FAILED: &str = "failed";
}

/// The graph's own item.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphRecord {
    /// taskGraphId.
    pub task_graph_id: String,
    /// The scheduler's id.
    pub scheduler_id: String,
    /// `running`, `blocked` or `finished`.
    pub state: String,
    /// The graph's routing (`""` when none).
    pub routing: String,
    /// The graph's leaves: taskIds no other task requires.
    pub requires: Vec<String>,
    /// The leaves not yet completed.
    pub requires_left: Vec<String>,
    /// Free-form metadata from the submission.
    pub metadata: Value,
    /// Free-form tags from the submission.
    pub tags: Value,
    /// The secret from which taskIds are derived (never shown).
    pub salt: String,
    /// Digest of the submission, to tell a repeat from a conflicting reuse of the id.
    pub digest: String,
    /// When the graph was submitted.
    pub created: Ts,
    /// Events not yet published.
    #[serde(default)]
    pub outbox: Vec<OutboxEvent>,
    /// Whether events wait in the outbox, findable by the outbox sweeper, until a publisher
    /// removes them; not so where the table's stream delivers them, as for task statuses
    /// (see [`crate::records::task::TaskRecord::sweep`]): the sweeper then never races the
    /// stream's publisher to the same event.
    #[serde(default = "super::outbox::sweep_by_default")]
    pub sweep: bool,
    /// When a stream publisher first failed to deliver the events this record holds for the
    /// sweeper (see [`crate::records::task::TaskRecord::held_since`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Ts>,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

impl GraphRecord {
    /// The status structure of seed 001.
    pub fn status_json(&self) -> Value {
        json!({
            "taskGraphId": self.task_graph_id,
            "schedulerId": self.scheduler_id,
            "state": self.state,
            "routing": self.routing,
        })
    }

    /// Queues the scheduler event `exchange` (its short name) about this graph as it now is.
    pub fn emit(&mut self, exchange: Exchange) {
        self.outbox.push(OutboxEvent {
            unknown: Default::default(),
            id: crate::ids::new_slugid(),
            exchange: exchange.name().to_string(),
            routing_key: crate::routing::task_graph_routing_key(
                &self.scheduler_id,
                &self.task_graph_id,
                &self.routing,
            ),
            cc: vec![],
            payload: super::outbox::Payload::of(
                &json!({ "version": 1, "status": self.status_json() }),
            ),
            run_id: None,
            fresh: true,
        });
    }

    /// taskId of `label` in this graph: the first 16 bytes of HMAC-SHA256 under the graph's
    /// secret, as a slugid.
    pub fn task_id(&self, label: &str) -> String {
        let mac = crate::mac::digest(self.salt.as_bytes(), label.as_bytes());
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&mac[..16]);
        crate::ids::slugid_from(bytes)
    }

    /// The graph's item: where the stream delivers the events, its outbox holds only those
    /// this write adds.
    pub fn item(&self) -> ApiResult<Item> {
        let data = super::outbox::stored_data(self).map_err(ApiError::internal)?;
        Ok(Item::new(
            self.task_graph_id.clone(),
            SK_TASK_GRAPH,
            data,
            Outboxed::index_entries(self),
        ))
    }
}

impl Outboxed for GraphRecord {
    const TABLE: &'static str = TASK_GRAPHS;
    const SK: &'static str = SK_TASK_GRAPH;
    fn pk(&self) -> &str {
        &self.task_graph_id
    }
    fn outbox(&self) -> &[OutboxEvent] {
        &self.outbox
    }
    fn outbox_mut(&mut self) -> &mut Vec<OutboxEvent> {
        &mut self.outbox
    }
    fn index_entries(&self) -> Vec<IndexEntry> {
        if self.outbox.is_empty() || !self.sweep {
            vec![]
        } else {
            vec![outbox_entry(&self.task_graph_id)]
        }
    }
    fn stream_delivered(&self) -> bool {
        !self.sweep
    }
    fn hold_for_sweep(&mut self, since: Ts) {
        self.sweep = true;
        self.held_since = Some(self.held_since.map_or(since, |t| t.min(since)));
    }
    fn held_since(&self) -> Option<Ts> {
        self.held_since
    }
    fn clear_held(&mut self) {
        self.held_since = None;
    }
}

/// One task of a graph.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskNode {
    /// taskId.
    pub task_id: String,
    /// The task's label in the graph.
    pub label: String,
    /// taskIds this task requires.
    pub requires: Vec<String>,
    /// Those not yet completed.
    pub requires_left: Vec<String>,
    /// taskIds that require this task.
    pub dependents: Vec<String>,
    /// Reruns allowed.
    pub reruns: u32,
    /// Reruns left.
    pub reruns_left: u32,
    /// `unscheduled`, `scheduled`, `completed` or `failed`.
    pub state: String,
    /// The last run whose resolution was acted on.
    #[serde(default)]
    pub handled_run: Option<u32>,
    /// Digest of the submitted entry (label, requires, reruns, task), to tell a repeated
    /// extension from a conflicting label.
    pub digest: String,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

impl TaskNode {
    /// The node as `inspect` shows it.
    pub fn to_json(&self) -> Value {
        json!({
            "taskId": self.task_id,
            "label": self.label,
            "requires": self.requires,
            "requiresLeft": self.requires_left,
            "dependents": self.dependents,
            "reruns": self.reruns,
            "rerunsLeft": self.reruns_left,
            "state": self.state,
        })
    }
}

/// `info` / `inspect` reply parts shared by both.
impl GraphRecord {
    /// The `info` reply (and the start of `inspect`'s).
    pub fn info_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("status".into(), self.status_json());
        m.insert("metadata".into(), self.metadata.clone());
        m.insert("tags".into(), self.tags.clone());
        m
    }
}

impl TaskNode {
    /// The node's item.
    pub fn item(&self, task_graph_id: &str) -> ApiResult<Item> {
        let data = Data::encode(self).map_err(ApiError::internal)?;
        Ok(Item::new(
            task_graph_id,
            sk_graph_task(&self.task_id),
            data,
            vec![],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(salt: &str) -> GraphRecord {
        GraphRecord {
            unknown: Default::default(),
            task_graph_id: "g".into(),
            scheduler_id: "s".into(),
            state: state::RUNNING.into(),
            routing: String::new(),
            requires: vec![],
            requires_left: vec![],
            metadata: json!({}),
            tags: json!({}),
            salt: salt.into(),
            digest: String::new(),
            created: Ts(0),
            outbox: vec![],
            sweep: true,
            held_since: None,
        }
    }

    /// A stream publisher's view of an image ([`super::super::outbox::Outbound`]) reads the
    /// events and the flag of a task graph and of a task status alike.
    #[test]
    fn both_outboxed_records_read_as_outbound() {
        use super::super::outbox::Outbound;
        use super::super::task::TaskRecord;
        use crate::store::Data;
        let ids = |o: &[OutboxEvent]| o.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        for sweep in [false, true] {
            let mut g = graph("s");
            g.sweep = sweep;
            g.emit(Exchange::TaskGraphRunning);
            let view: Outbound = Data::encode(&g).unwrap().decode().unwrap();
            assert_eq!((ids(&view.outbox), view.sweep), (ids(&g.outbox), sweep));
            let mut t = TaskRecord::for_test("t");
            t.sweep = sweep;
            t.emit(Exchange::TaskCompleted, None, false, Default::default());
            let view: Outbound = Data::encode(&t).unwrap().decode().unwrap();
            assert_eq!((ids(&view.outbox), view.sweep), (ids(&t.outbox), sweep));
            assert_eq!(view.outbox.len(), 1);
        }
        // A record from before the flag reads as swept, as the records do.
        let old: Outbound = serde_json::from_str(r#"{"taskId":"t"}"#).unwrap();
        assert!(old.sweep && old.outbox.is_empty());
    }

    #[test]
    fn derived_task_ids_are_slugids_and_stable() {
        let a = graph("salt").task_id("build");
        assert!(crate::ids::is_slugid(&a), "{a}");
        assert_eq!(a, graph("salt").task_id("build"));
        assert_ne!(a, graph("salt").task_id("test"));
        assert_ne!(a, graph("other").task_id("build"));
    }
}
