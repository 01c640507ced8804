//! A submission to the scheduler, checked before anything is stored: its `tasks` map parsed
//! into entries (labels, requires, reruns, `$subs`), every label known and no cycle.

use super::{MAX_RERUNS, MAX_TASKS_PER_CALL};
use crate::error::{ApiError, ApiResult};
use crate::records::graph::{node_state, GraphRecord, TaskNode};
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};

/// The entries of one createTaskGraph or extendTaskGraph call, and what authorising it takes.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The entries, in label order.
    pub entries: Vec<Entry>,
}

impl Submission {
    /// The createTask bodies whose scopes the caller needs (besides the scheduler's own
    /// scope): each task as the scheduler will define it, except the route it adds itself.
    pub fn task_bodies(&self, scheduler_id: &str) -> Vec<(String, Value)> {
        self.entries
            .iter()
            .map(|e| {
                let mut body = e.task.clone();
                body["schedulerId"] = json!(scheduler_id);
                (e.label.clone(), body)
            })
            .collect()
    }
}

pub(crate) fn digest_of(v: &Value) -> String {
    let hash = Sha256::digest(v.to_string().as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash)
}

/// One submitted task entry, checked.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its label.
    pub label: String,
    /// The labels it requires.
    pub requires: Vec<String>,
    /// Reruns allowed.
    pub reruns: u32,
    /// The task definition as submitted (`$subs` not yet replaced).
    pub task: Value,
    /// Digest of the whole entry, to tell a repeat from a conflicting reuse of a label.
    pub digest: String,
}

/// Replaces every `{"$subs": "taskId:<label>"}` object in `v` with the label's taskId.
pub(crate) fn substitute(
    v: &mut Value,
    ids: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            if m.len() == 1 {
                if let Some(Value::String(s)) = m.get("$subs") {
                    let label = s
                        .strip_prefix("taskId:")
                        .ok_or_else(|| format!("$subs {s:?} must have the form taskId:<label>"))?;
                    let id =
                        ids(label).ok_or_else(|| format!("$subs names unknown label {label:?}"))?;
                    *v = Value::String(id);
                    return Ok(());
                }
            }
            for x in m.values_mut() {
                substitute(x, ids)?;
            }
            Ok(())
        }
        Value::Array(a) => a.iter_mut().try_for_each(|x| substitute(x, ids)),
        _ => Ok(()),
    }
}

/// Labels named by `$subs` objects in `v`.
pub(crate) fn subs_labels(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let (1, Some(Value::String(s))) = (m.len(), m.get("$subs")) {
                out.insert(s.strip_prefix("taskId:").unwrap_or(s).to_string());
                return;
            }
            m.values().for_each(|x| subs_labels(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| subs_labels(x, out)),
        _ => {}
    }
}

/// Parses the `tasks` map of a submission (already schema-checked): every label in
/// `requires` and `$subs` must be one of `tasks` or satisfy `known`; `requires` must not form
/// a cycle. Returns the entries in label order.
pub fn parse_entries(tasks: &Value, known: &dyn Fn(&str) -> bool) -> ApiResult<Vec<Entry>> {
    let Some(map) = tasks.as_object() else {
        return Err(ApiError::input("tasks must be an object"));
    };
    if map.is_empty() || map.len() > MAX_TASKS_PER_CALL {
        return Err(ApiError::input(format!(
            "a call adds 1..={MAX_TASKS_PER_CALL} tasks, got {}",
            map.len()
        )));
    }
    let mut entries = Vec::with_capacity(map.len());
    for (label, node) in map {
        let requires = crate::json::string_list(&node["requires"]);
        let reruns = node["reruns"].as_u64().unwrap_or(0);
        if reruns > MAX_RERUNS {
            return Err(ApiError::input(format!(
                "task {label:?}: reruns must be 0..={MAX_RERUNS}"
            )));
        }
        let mut named = BTreeSet::new();
        subs_labels(&node["task"], &mut named);
        for r in requires.iter().chain(named.iter()) {
            if !map.contains_key(r) && !known(r) {
                return Err(ApiError::input(format!(
                    "task {label:?} names unknown label {r:?}"
                )));
            }
        }
        entries.push(Entry {
            label: label.clone(),
            requires,
            reruns: reruns as u32,
            task: node["task"].clone(),
            digest: digest_of(node),
        });
    }
    check_acyclic(&entries)?;
    entries.sort_by(|a, b| a.label.cmp(&b.label));
    Ok(entries)
}

/// Kahn's algorithm over the submitted labels (labels outside them are already in the graph
/// and cannot require new ones, so they cannot close a cycle).
fn check_acyclic(entries: &[Entry]) -> ApiResult<()> {
    let labels: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.label.as_str(), i))
        .collect();
    let mut indegree = vec![0usize; entries.len()];
    let mut dependents: Vec<Vec<usize>> = vec![vec![]; entries.len()];
    for (i, e) in entries.iter().enumerate() {
        for r in &e.requires {
            if let Some(&j) = labels.get(r.as_str()) {
                indegree[i] += 1;
                dependents[j].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..entries.len()).filter(|&i| indegree[i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = ready.pop() {
        seen += 1;
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.push(d);
            }
        }
    }
    if seen < entries.len() {
        let stuck: Vec<&str> = (0..entries.len())
            .filter(|&i| indegree[i] > 0)
            .map(|i| entries[i].label.as_str())
            .collect();
        return Err(ApiError::input(format!(
            "requires forms a cycle among {stuck:?}"
        )));
    }
    Ok(())
}

/// The nodes of newly submitted entries, as first written: nothing completed yet.
pub(crate) fn new_nodes(graph: &GraphRecord, entries: &[Entry]) -> Vec<TaskNode> {
    entries
        .iter()
        .map(|e| {
            let requires: Vec<String> = e.requires.iter().map(|r| graph.task_id(r)).collect();
            TaskNode {
                unknown: Default::default(),
                task_id: graph.task_id(&e.label),
                label: e.label.clone(),
                requires_left: requires.clone(),
                requires,
                dependents: entries
                    .iter()
                    .filter(|d| d.requires.contains(&e.label))
                    .map(|d| graph.task_id(&d.label))
                    .collect(),
                reruns: e.reruns,
                reruns_left: e.reruns,
                state: node_state::UNSCHEDULED.into(),
                handled_run: None,
                digest: e.digest.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(v: Value) -> ApiResult<Vec<Entry>> {
        parse_entries(&v, &|_| false)
    }

    #[test]
    fn cycles_and_unknown_labels_are_refused() {
        let cyc =
            json!({"a": {"requires": ["b"], "task": {}}, "b": {"requires": ["a"], "task": {}}});
        assert_eq!(entries(cyc).err().map(|e| e.status()), Some(400));
        let unknown = json!({"a": {"requires": ["zz"], "task": {}}});
        assert_eq!(entries(unknown).err().map(|e| e.status()), Some(400));
        let subs = json!({"a": {"task": {"payload": {"x": {"$subs": "taskId:nope"}}}}});
        assert_eq!(entries(subs).err().map(|e| e.status()), Some(400));
        let ok = json!({"a": {"task": {}}, "b": {"requires": ["a"], "task": {"p": [{"$subs": "taskId:a"}]}}});
        assert_eq!(entries(ok).map(|e| e.len()).ok(), Some(2));
    }

    #[test]
    fn subs_are_replaced_everywhere() {
        let mut v =
            json!({"payload": {"a": {"$subs": "taskId:x"}, "l": [1, {"$subs": "taskId:x"}]}});
        substitute(&mut v, &|l| (l == "x").then(|| "ID".to_string())).unwrap();
        assert_eq!(v, json!({"payload": {"a": "ID", "l": [1, "ID"]}}));
    }
}
