//! A dependency edge: one item in the dependency's partition of the `tasks` table,
//! `dependent#<taskId>`, carrying what the dependent requires and whether it has been
//! satisfied. It expires with its dependent (the `task-expiry` index of [`super::task`]).

use super::task::{task_expiry_entry, RunState, TaskRecord};
use crate::store::{IndexEntry, Item};
use crate::time::Ts;
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
    let indexes = edge_indexes(dependency, &sk, &data);
    Item::new(dependency, sk, data, indexes)
}

/// The same edge, satisfied.
pub fn satisfied_edge(edge: &Item) -> Item {
    let mut data = edge.data.clone();
    data["satisfied"] = json!(true);
    let indexes = edge_indexes(&edge.pk, &edge.sk, &data);
    Item::new(edge.pk.clone(), edge.sk.clone(), data, indexes)
}

/// An edge expires with its dependent, whichever task's partition it sits in.
fn edge_indexes(dependency: &str, sk: &str, data: &Value) -> Vec<IndexEntry> {
    data["expires"]
        .as_str()
        .and_then(Ts::parse)
        .map(|t| task_expiry_entry(t, dependency, sk))
        .into_iter()
        .collect()
}
