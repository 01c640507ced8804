//! A task group: its own item, one member item per task, and the shares of its
//! unresolved-task counter, all in the group's partition.
//!
//! | table         | pk          | sk                   | what                                  |
//! |---------------|-------------|----------------------|---------------------------------------|
//! | `task-groups` | taskGroupId | `group`              | schedulerId, expires, sealed          |
//! | `task-groups` | taskGroupId | `task#<taskId>`      | membership, for listTaskGroup         |
//! | `task-groups` | taskGroupId | `unresolved#<shard>` | a share of the unresolved-task count  |
//!
//! `group-expiry` (pk `group-expiry#<shard>`, sk `<expires ms>:<taskGroupId>`) holds every
//! group item by `expires`, for the expiry job.

use crate::error::{ApiError, ApiResult};
use crate::records::task::Priority;
use crate::store::shard::{shard_of, shard_pk, time_keyed, SHARDS};
use crate::store::{Cond, Data, IndexEntry, Item, WriteOp};
use crate::time::Ts;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Task groups.
pub const TASK_GROUPS: &str = "task-groups";
/// Sort key of a task group's own item.
pub const SK_GROUP: &str = "group";
/// Index of group items by `expires`.
pub const GROUP_EXPIRY: &str = "group-expiry";
/// Sort-key prefix of the member items in a group's partition.
pub const SK_MEMBER_PREFIX: &str = "task#";
/// Sort-key prefix of the shares of a group's unresolved-task counter.
pub const SK_UNRESOLVED_PREFIX: &str = "unresolved#";
/// Number of shares of the unresolved-task counter.
pub const COUNTER_SHARES: usize = SHARDS as usize;

/// Sort key of the item recording that `task_id` belongs to the partition's group.
pub fn sk_member(task_id: &str) -> String {
    format!("{SK_MEMBER_PREFIX}{task_id}")
}

/// Sort key of the counter share that counts `task_id` while it is unresolved. The count is
/// split over [`COUNTER_SHARES`] items so that tasks created together in one group rarely
/// contend.
pub fn sk_unresolved(task_id: &str) -> String {
    format!("{SK_UNRESOLVED_PREFIX}{}", shard_of(task_id))
}

/// The expiry entry of a task group item.
pub fn group_expiry_entry(expires: Ts, task_group_id: &str) -> IndexEntry {
    IndexEntry {
        index: GROUP_EXPIRY,
        pk: shard_pk(GROUP_EXPIRY, shard_of(task_group_id)),
        sk: time_keyed(expires, task_group_id),
    }
}

/// A task group's own item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    /// taskGroupId.
    pub task_group_id: String,
    /// The schedulerId every task of the group has.
    pub scheduler_id: String,
    /// When the group goes (it outlives its longest-lived task).
    pub expires: Ts,
    /// When it was sealed: no task may join it since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Ts>,
    /// A change of every unresolved task (cancelTaskGroup, changeTaskGroupPriority) that one
    /// call could not finish, which the `groupChanges` job goes on with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<GroupChange>,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

impl GroupRecord {
    /// A new, unsealed group.
    pub fn new(task_group_id: &str, scheduler_id: &str, expires: Ts) -> Self {
        GroupRecord {
            unknown: Default::default(),
            task_group_id: task_group_id.to_string(),
            scheduler_id: scheduler_id.to_string(),
            expires,
            sealed: None,
            change: None,
        }
    }

    /// Decodes a stored group item.
    pub fn from_item(item: &Item) -> ApiResult<Self> {
        item.data.decode().map_err(ApiError::internal)
    }

    /// The item, with its expiry entry.
    pub fn item(&self) -> Item {
        let data = Data::encode(self).unwrap_or_else(|_| json!({}).into());
        Item::new(
            self.task_group_id.as_str(),
            SK_GROUP,
            data,
            vec![group_expiry_entry(self.expires, &self.task_group_id)],
        )
    }

    /// True once sealed.
    pub fn is_sealed(&self) -> bool {
        self.sealed.is_some()
    }

    /// True if the group still exists at `now`.
    pub fn is_live(&self, now: Ts) -> bool {
        self.expires > now
    }

    /// `409` unless a task with this `scheduler_id` may join the group.
    pub fn check_joinable(&self, task_id: &str, scheduler_id: &str) -> ApiResult<()> {
        if self.scheduler_id != scheduler_id {
            return Err(ApiError::conflict(format!(
                "Task group {} belongs to schedulerId {}; task {task_id} has schedulerId {scheduler_id}",
                self.task_group_id, self.scheduler_id
            )));
        }
        if self.is_sealed() {
            // An identical repeat of an existing task is still a conflict once sealed, as upstream.
            return Err(ApiError::conflict(format!(
                "Task group {} is sealed; no tasks can be added",
                self.task_group_id
            )));
        }
        Ok(())
    }

    /// `409` unless the group may be cancelled: only a sealed group can be (upstream answers
    /// this before it checks scopes).
    pub fn check_cancellable(&self) -> ApiResult<()> {
        if !self.is_sealed() {
            return Err(ApiError::conflict(format!(
                "Task group {} is not sealed; seal it before cancelling it",
                self.task_group_id
            )));
        }
        Ok(())
    }

    /// The group as getTaskGroup shows it (and as group events carry it).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("taskGroupId".into(), json!(self.task_group_id));
        out.insert("schedulerId".into(), json!(self.scheduler_id));
        out.insert("expires".into(), json!(self.expires));
        if let Some(sealed) = self.sealed {
            out.insert("sealed".into(), json!(sealed));
        }
        out
    }
}

/// What a group change does to each unresolved task of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum GroupAction {
    /// cancelTaskGroup: cancels it.
    Cancel,
    /// changeTaskGroupPriority: gives it this priority.
    Priority {
        /// The new priority.
        priority: Priority,
    },
}

/// A change of every unresolved task of a group, under way: where it got to (members are
/// gone through in taskId order) and what it did so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupChange {
    /// What it does.
    #[serde(flatten)]
    pub action: GroupAction,
    /// When it was asked for.
    pub since: Ts,
    /// The last member it went through (taskId), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Members it went through.
    pub seen: u64,
    /// Tasks it changed.
    pub changed: u64,
}

impl GroupChange {
    /// How getTaskGroup shows it (`change`, this queue's addition).
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "since": self.since,
            "tasksSeen": self.seen,
            "tasksChanged": self.changed,
        });
        match self.action {
            GroupAction::Cancel => out["action"] = json!("cancel"),
            GroupAction::Priority { priority } => {
                out["action"] = json!("priority");
                out["newPriority"] = json!(priority.as_str());
            }
        }
        out
    }
}

/// Partition of the marks of the groups with a change under way, by the group's shard (a key
/// no group has: taskGroupIds are slugids, which have no `~`).
pub fn changes_pk(shard: u32) -> String {
    format!("~changes/{shard}")
}

/// The mark of a group with a change under way, which the `groupChanges` job looks for: in
/// the table, not an index, so that the job reads it strongly consistent.
pub fn change_mark(task_group_id: &str) -> Item {
    Item::new(
        changes_pk(shard_of(task_group_id)),
        task_group_id,
        json!({}),
        vec![],
    )
}

/// A member item: `task_id` belongs to the group until it expires.
pub fn member_item(task_group_id: &str, task_id: &str, expires: Ts) -> Item {
    Item::new(
        task_group_id,
        sk_member(task_id),
        json!({ "expires": expires }),
        vec![],
    )
}

/// The taskId a member item stands for.
pub fn member_task_id(item: &Item) -> Option<&str> {
    item.sk.strip_prefix(SK_MEMBER_PREFIX)
}

/// The count a counter share holds.
pub fn share_count(item: &Item) -> u64 {
    item.data["count"].as_u64().unwrap_or(0)
}

/// The write that sets a counter share to `count`, on the version read (or its absence).
pub fn share_op(task_group_id: &str, sk: String, count: u64, read: Option<&Item>) -> WriteOp {
    WriteOp::Put {
        table: TASK_GROUPS,
        item: Item::new(task_group_id, sk, json!({ "count": count }), vec![]),
        cond: read.map_or(Cond::NotExists, |i| Cond::Version(i.version)),
    }
}
