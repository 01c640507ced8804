//! A dependency edge: one item in the dependency's partition of the `tasks` table,
//! `dependent#<taskId>`, carrying what the dependent requires and whether it has been
//! satisfied. It expires with its dependent: expiring a task deletes the edges its definition
//! names (edges written by earlier versions also have an entry in the `task-expiry` index of
//! [`super::task`], which finds them too). It carries no index entry of its own, as each
//! entry is a write unit more when the edge is created and another when it is deleted.

use super::task::{RunState, TaskRecord};
use crate::store::Item;
use serde_json::{json, Value};

/// Sort-key prefix of the dependency edges in a dependency's partition of `tasks`.
pub const SK_DEPENDENT_PREFIX: &str = "dependent#";

/// Sort key of the edge "`dependent` depends on the partition's task".
pub fn sk_dependent(dependent: &str) -> String {
    format!("{SK_DEPENDENT_PREFIX}{dependent}")
}

/// The dependent an edge item points to.
pub fn dependent_of(item: &Item) -> Option<&str> {
    item.sk.strip_prefix(SK_DEPENDENT_PREFIX)
}

/// `requires` of a task definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requires {
    /// Every dependency must resolve `completed` (the default).
    AllCompleted,
    /// Every dependency must resolve, in any way.
    AllResolved,
}

impl Requires {
    /// Reads `requires` from a definition or an edge (absent means all-completed).
    pub fn of(v: &Value) -> Requires {
        match v["requires"].as_str() {
            Some("all-resolved") => Requires::AllResolved,
            _ => Requires::AllCompleted,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Requires::AllCompleted => "all-completed",
            Requires::AllResolved => "all-resolved",
        }
    }

    /// True if the dependency's current state meets this requirement.
    pub fn met_by(self, dep: &TaskRecord) -> bool {
        match dep.runs.last().map(|r| r.state) {
            Some(RunState::Completed) => true,
            Some(RunState::Failed | RunState::Exception) => self == Requires::AllResolved,
            _ => false,
        }
    }
}

/// True if the edge item has been satisfied.
pub fn is_satisfied(item: &Item) -> bool {
    item.data["satisfied"] == json!(true)
}

/// The edge item `dependency → dependent`.
pub fn edge_item(
    dependency: &str,
    dependent: &TaskRecord,
    requires: Requires,
    satisfied: bool,
) -> Item {
    let sk = sk_dependent(&dependent.task_id);
    let data = json!({
        "requires": requires.as_str(),
        "satisfied": satisfied,
        "expires": dependent.expires,
    });
    Item::new(dependency, sk, data, vec![])
}

/// The same edge, satisfied.
pub fn satisfied_edge(edge: &Item) -> Item {
    let mut data = edge.data.clone();
    data["satisfied"] = json!(true);
    Item::new(edge.pk.clone(), edge.sk.clone(), data, vec![])
}
