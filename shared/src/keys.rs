//! Every table, item key and index key, built in one place.
//!
//! | table         | pk            | sk         | what                                   |
//! |---------------|---------------|------------|----------------------------------------|
//! | `tasks`       | taskId        | `def`      | the immutable task definition          |
//! | `tasks`       | taskId        | `status`   | runs, retries, priority, event outbox  |
//! | `tasks`       | dependencyId  | `dependent#<taskId>` | an edge: requires, satisfied, expires |
//! | `task-groups` | taskGroupId   | `group`    | schedulerId, expires, sealed           |
//! | `task-groups` | taskGroupId   | `task#<taskId>` | membership, for listTaskGroup     |
//! | `task-groups` | taskGroupId   | `unresolved#<shard>` | a share of the unresolved-task count |
//! | `task-graphs` | taskGraphId   | `task-graph` | the scheduler's graph: state, leaves, event outbox |
//! | `task-graphs` | taskGraphId   | `task#<taskId>` | one task of the graph: label, requires, reruns |
//! | `auth`        | `clients`     | clientId   | a client of the auth API (with secret) |
//! | `auth`        | `roles`       | roleId     | a role of the auth API                 |
//!
//! Clients and roles each sit in one partition so that listing them is one query; they are
//! few and read through caches (roles) or by key (clients).
//!
//! Sparse indexes over `tasks/status` (present only while the condition holds):
//!
//! | index      | pk                    | sk                                         | while            |
//! |------------|-----------------------|--------------------------------------------|------------------|
//! | `pending`  | taskQueueId           | `<rank>:<scheduled ms>:<taskId>:<runId>`   | last run pending |
//! | `claimed`  | taskQueueId           | `<started ms>:<taskId>`                    | last run running |
//! | `claims`   | `claims#<shard>`      | `<takenUntil ms>:<taskId>`                 | last run running |
//! | `deadline` | `deadline#<shard>`    | `<deadline ms>:<taskId>`                   | task unresolved  |
//! | `outbox`   | `outbox#<shard>`      | `<taskId>`                                 | events to deliver (1)|
//! | `resolved` | `resolved#<shard>`    | `<resolved ms>:<taskId>`                   | dependents unseen|
//!
//! (1) Where the tables' streams deliver events (AWS), only while a publisher that could not
//! deliver holds them (`TaskRecord::sweep`). `task-graphs/task-graph` items have an `outbox`
//! index of the same shape (keyed by taskGraphId).
//!
//! Expiry indexes (written once with the item; the expiry job walks them with `sk <= now`):
//!
//! | index          | on                                  | pk                  | sk                     |
//! |----------------|-------------------------------------|---------------------|------------------------|
//! | `task-expiry`  | `tasks/def`, `tasks/dependent#<id>` | `task-expiry#<shard>` | `<expires ms>:<pk>:<sk>` |
//! | `group-expiry` | `task-groups/group`                 | `group-expiry#<shard>` | `<expires ms>:<taskGroupId>` |
//!
//! On DynamoDB only `pending` projects whole items; every other index is KEYS_ONLY (see
//! `infra/resources.json`), so writes that leave an item's entry alone cost that index nothing.
//! Item data is stored deflated there: a status item with its events is about 0.5 KB, a
//! definition 0.3–0.4 KB (typical tests' tasks), far from the 400 KB limit, which the port
//! checks on the uncompressed JSON (a payload-heavy definition is the largest item).
//!
//! Time-ordered partitions are sharded so that no single partition key is hot on DynamoDB;
//! the reapers walk every shard with `sk <= now`.

use crate::model::Priority;
use crate::store::IndexEntry;
use crate::time::Ts;

/// Tasks: definitions and statuses.
pub const TASKS: &str = "tasks";
/// Task groups.
pub const TASK_GROUPS: &str = "task-groups";

/// The task-graph scheduler's graphs and their tasks.
pub const TASK_GRAPHS: &str = "task-graphs";
/// Sort key of a graph's own item in [`TASK_GRAPHS`].
pub const SK_TASK_GRAPH: &str = "task-graph";
/// Sort-key prefix of a graph's task items in [`TASK_GRAPHS`].
pub const SK_GRAPH_TASK_PREFIX: &str = "task#";

/// Sort key of the item of task `task_id` in its graph's partition of [`TASK_GRAPHS`].
pub fn sk_graph_task(task_id: &str) -> String {
    format!("{SK_GRAPH_TASK_PREFIX}{task_id}")
}

/// Clients and roles of the auth API.
pub const AUTH: &str = "auth";
/// Partition of every client in [`AUTH`].
pub const PK_CLIENTS: &str = "clients";
/// Partition of every role in [`AUTH`].
pub const PK_ROLES: &str = "roles";

/// `(pk, sk)` of a client's item in [`AUTH`].
pub fn client_key(client_id: &str) -> (&'static str, String) {
    (PK_CLIENTS, client_id.to_string())
}

/// `(pk, sk)` of a role's item in [`AUTH`].
pub fn role_key(role_id: &str) -> (&'static str, String) {
    (PK_ROLES, role_id.to_string())
}

/// Sort key of a task's definition item.
pub const SK_DEF: &str = "def";
/// Sort key of a task's status item.
pub const SK_STATUS: &str = "status";
/// Sort key under which an event that failed its schema is kept for inspection, in the
/// task's partition of [`TASKS`].
pub fn sk_dead_letter(event_id: &str) -> String {
    format!("dead-letter#{event_id}")
}
/// Sort key of a task group item.
pub const SK_GROUP: &str = "group";

/// Index names.
pub mod index {
    /// Pending runs by task queue, priority then age.
    pub const PENDING: &str = "pending";
    /// Running runs by task queue and claim time.
    pub const CLAIMED: &str = "claimed";
    /// Running runs by `takenUntil`, for the claim reaper.
    pub const CLAIMS: &str = "claims";
    /// Unresolved tasks by deadline, for the deadline reaper.
    pub const DEADLINE: &str = "deadline";
    /// Status items holding undelivered events.
    pub const OUTBOX: &str = "outbox";
    /// Resolved tasks whose dependents have not been looked at yet.
    pub const RESOLVED: &str = "resolved";
    /// Task definitions and dependency edges by `expires` (table [`super::TASKS`]).
    pub const TASK_EXPIRY: &str = "task-expiry";
    /// Task groups by `expires` (table [`super::TASK_GROUPS`]).
    pub const GROUP_EXPIRY: &str = "group-expiry";
}

/// Sort-key prefix of the shares of a group's unresolved-task counter.
pub const SK_UNRESOLVED_PREFIX: &str = "unresolved#";

/// Sort key of the counter share that counts `task_id` while it is unresolved. The count is
/// split over [`SHARDS`] items so that tasks created together in one group rarely contend.
pub fn sk_unresolved(task_id: &str) -> String {
    format!("{SK_UNRESOLVED_PREFIX}{}", shard_of(task_id))
}

/// The expiry entry of an item of [`TASKS`] that expires on its own (a definition, which
/// takes its task's partition with it, or a dependency edge).
pub fn task_expiry_entry(expires: Ts, pk: &str, sk: &str) -> IndexEntry {
    IndexEntry {
        index: index::TASK_EXPIRY,
        pk: shard_pk(index::TASK_EXPIRY, shard_of(pk)),
        sk: format!("{}:{pk}:{sk}", time_key(expires)),
    }
}

/// The expiry entry of a task group item.
pub fn group_expiry_entry(expires: Ts, task_group_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::GROUP_EXPIRY,
        pk: shard_pk(index::GROUP_EXPIRY, shard_of(task_group_id)),
        sk: format!("{}:{task_group_id}", time_key(expires)),
    }
}

/// Sort-key prefix of the member items in a group's partition of [`TASK_GROUPS`].
pub const SK_MEMBER_PREFIX: &str = "task#";

/// Sort key of the item recording that `task_id` belongs to the partition's group.
pub fn sk_member(task_id: &str) -> String {
    format!("{SK_MEMBER_PREFIX}{task_id}")
}

/// Sort-key prefix of the dependency edges in a dependency's partition of [`TASKS`].
pub const SK_DEPENDENT_PREFIX: &str = "dependent#";

/// Sort key of the edge "`dependent` depends on the partition's task".
pub fn sk_dependent(dependent: &str) -> String {
    format!("{SK_DEPENDENT_PREFIX}{dependent}")
}

/// The entry of a resolved task whose dependents are still to be looked at.
pub fn resolved_entry(resolved: Ts, task_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::RESOLVED,
        pk: shard_pk(index::RESOLVED, shard_of(task_id)),
        sk: format!("{}:{task_id}", time_key(resolved)),
    }
}

/// Number of shards of each time-ordered index.
pub const SHARDS: u32 = 4;

/// Zero-padded so that string order is numeric order (dates up to year 2286).
pub fn time_key(t: Ts) -> String {
    format!("{:013}", t.millis().max(0))
}

/// The shard of a task in the time-ordered indexes.
pub fn shard_of(task_id: &str) -> u32 {
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let mut h: u32 = 0x811c9dc5;
    for b in task_id.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    h % SHARDS
}

/// Partition key of a sharded time-ordered index.
pub fn shard_pk(index: &str, shard: u32) -> String {
    format!("{index}#{shard}")
}

/// The pending index entry of a run.
pub fn pending_entry(
    task_queue_id: &str,
    priority: Priority,
    scheduled: Ts,
    task_id: &str,
    run_id: u32,
) -> IndexEntry {
    IndexEntry {
        index: index::PENDING,
        pk: task_queue_id.to_string(),
        sk: format!(
            "{}:{}:{task_id}:{run_id}",
            priority.rank(),
            time_key(scheduled)
        ),
    }
}

/// The claimed-by-queue entry of a running run.
pub fn claimed_entry(task_queue_id: &str, started: Ts, task_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::CLAIMED,
        pk: task_queue_id.to_string(),
        sk: format!("{}:{task_id}", time_key(started)),
    }
}

/// The claim-expiry entry of a running run.
pub fn claims_entry(taken_until: Ts, task_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::CLAIMS,
        pk: shard_pk(index::CLAIMS, shard_of(task_id)),
        sk: format!("{}:{task_id}", time_key(taken_until)),
    }
}

/// The deadline entry of an unresolved task.
pub fn deadline_entry(deadline: Ts, task_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::DEADLINE,
        pk: shard_pk(index::DEADLINE, shard_of(task_id)),
        sk: format!("{}:{task_id}", time_key(deadline)),
    }
}

/// The outbox entry of a status item with undelivered events.
pub fn outbox_entry(task_id: &str) -> IndexEntry {
    IndexEntry {
        index: index::OUTBOX,
        pk: shard_pk(index::OUTBOX, shard_of(task_id)),
        sk: task_id.to_string(),
    }
}

/// Artifacts: one item per (task, run, name). Table `artifacts`, pk taskId, sk
/// `<runId, 4 digits>#<name>` (so a run's artifacts are one prefix query, in name order),
/// with the sparse index `artifact-expiry` (pk `artifact-expiry#<shard>`, sk
/// `<expires ms>:<taskId>:<runId>:<name>`) that the expiry reaper walks with `sk <= cutoff`.
pub const ARTIFACTS: &str = "artifacts";
/// The artifact expiry index.
pub const ARTIFACT_EXPIRY: &str = "artifact-expiry";

/// Sort-key prefix of every artifact of one run.
pub fn artifact_run_prefix(run_id: u32) -> String {
    format!("{run_id:04}#")
}

/// Sort key of an artifact item.
pub fn artifact_sk(run_id: u32, name: &str) -> String {
    format!("{run_id:04}#{name}")
}

/// The expiry entry of an artifact item.
pub fn artifact_expiry_entry(expires: Ts, task_id: &str, run_id: u32, name: &str) -> IndexEntry {
    IndexEntry {
        index: ARTIFACT_EXPIRY,
        pk: shard_pk(ARTIFACT_EXPIRY, shard_of(task_id)),
        sk: format!("{}:{task_id}:{run_id}:{name}", time_key(expires)),
    }
}

/// Upper bound for "every time-ordered key due at `now`".
pub fn due_upto(now: Ts) -> String {
    format!("{}:\u{10FFFF}", time_key(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_sort_numerically() {
        assert!(time_key(Ts(999)) < time_key(Ts(1000)));
        assert!(time_key(Ts(1_700_000_000_000)) < time_key(Ts(17_000_000_000_000)));
    }

    #[test]
    fn higher_priority_sorts_first_then_older() {
        let a = pending_entry("p/w", Priority::High, Ts(2000), "t1", 0);
        let b = pending_entry("p/w", Priority::Lowest, Ts(1000), "t2", 0);
        let c = pending_entry("p/w", Priority::High, Ts(1000), "t3", 0);
        let mut v = [a.sk.clone(), b.sk.clone(), c.sk.clone()];
        v.sort();
        assert_eq!(v, [c.sk, a.sk, b.sk]);
    }

    #[test]
    fn due_bound_includes_everything_up_to_now() {
        let e = claims_entry(Ts(5000), "abc");
        assert!(e.sk <= due_upto(Ts(5000)));
        assert!(e.sk > due_upto(Ts(4999)));
    }
}
