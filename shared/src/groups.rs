//! Task groups: get, list, seal, cancel, change priority, and the unresolved-task counter.
//!
//! A group is one item (`group`: schedulerId, expires, sealed) plus one member item per task
//! (`task#<taskId>`), all in the group's partition and written in the transaction that
//! creates the task. Listing is therefore a strongly consistent query in taskId order, and
//! its continuation token is the last taskId returned: tasks added while a client pages
//! never make it see a task twice or skip one that existed when it started.
//!
//! `task-group-resolved` comes from a counter of unresolved tasks, split into [`SHARDS`]
//! shares (`unresolved#<shard>`) so that tasks created together rarely contend. createTask
//! (and a rerun of a resolved task) adds one in its own transaction; the dependency worker,
//! which visits every resolution, takes one off in the transaction that clears the task's
//! resolution mark. The transaction that brings the last share to zero also checks that
//! every other share is still at the zero it read, and carries the event in the resolving
//! task's outbox: exactly one transaction sees the count reach zero, however many resolve at
//! once. Group events travel in a member task's outbox (no CCs), so the one publisher and
//! its sweeper deliver them like any other.
//!
//! [`SHARDS`]: keys::SHARDS

use crate::error::{ApiError, ApiResult};
use crate::keys;
use crate::model::{Priority, TaskRecord};
use crate::queue::{backoff, decode_token, encode_token, PageReq, Queue, MAX_ATTEMPTS};
use crate::store::{Cond, Cursor, Item, SkRange, StoreError, WriteOp};
use crate::time::Ts;
use futures_util::future::try_join_all;
use serde_json::{json, Map, Value};

/// Members handled concurrently by the group-wide operations.
const PARALLEL: usize = 16;

/// The group item, with its expiry entry.
pub(crate) fn group_item(task_group_id: &str, data: Value) -> Item {
    let indexes = data["expires"]
        .as_str()
        .and_then(Ts::parse)
        .map(|t| keys::group_expiry_entry(t, task_group_id))
        .into_iter()
        .collect();
    Item::new(task_group_id, keys::SK_GROUP, data, indexes)
}

fn group_expires(item: &Item) -> Option<Ts> {
    item.data["expires"].as_str().and_then(Ts::parse)
}

fn count_of(item: &Item) -> u64 {
    item.data["count"].as_u64().unwrap_or(0)
}

/// The write that sets a counter share to `count`, on the version read (or its absence).
fn share_op(task_group_id: &str, sk: String, count: u64, read: Option<&Item>) -> WriteOp {
    WriteOp::Put {
        table: keys::TASK_GROUPS,
        item: Item::new(task_group_id, sk, json!({ "count": count }), vec![]),
        cond: read.map_or(Cond::NotExists, |i| Cond::Version(i.version)),
    }
}

/// The writes that count `task_id` as one more unresolved task of its group, given the
/// shares read. With `reset` (the group id is taken again after expiry), the other shares are
/// cleared in the same transaction.
pub(crate) fn count_ops(
    shares: &[Item],
    group_id: &str,
    task_id: &str,
    reset: bool,
) -> Vec<WriteOp> {
    let sk = keys::sk_unresolved(task_id);
    let mine = shares.iter().find(|i| i.sk == sk);
    let count = if reset {
        1
    } else {
        mine.map_or(0, count_of) + 1
    };
    let mut ops = vec![share_op(group_id, sk.clone(), count, mine)];
    if reset {
        ops.extend(
            shares
                .iter()
                .filter(|i| i.sk != sk)
                .map(|i| WriteOp::Delete {
                    table: keys::TASK_GROUPS,
                    pk: group_id.to_string(),
                    sk: i.sk.clone(),
                    cond: Cond::Version(i.version),
                }),
        );
    }
    ops
}

/// The group as getTaskGroup shows it.
fn group_json(task_group_id: &str, item: &Item, expires: Ts) -> Value {
    let mut out = Map::new();
    out.insert("taskGroupId".into(), json!(task_group_id));
    out.insert("schedulerId".into(), item.data["schedulerId"].clone());
    out.insert("expires".into(), json!(expires));
    if let Some(sealed) = item.data.get("sealed").filter(|s| !s.is_null()) {
        out.insert("sealed".into(), sealed.clone());
    }
    Value::Object(out)
}

fn is_sealed(item: &Item) -> bool {
    item.data.get("sealed").is_some_and(|s| !s.is_null())
}

impl Queue {
    /// The group item if the group exists and has not expired at `now`.
    pub(crate) async fn live_group(&self, group_id: &str, now: Ts) -> ApiResult<Option<Item>> {
        let item = self
            .store
            .get(keys::TASK_GROUPS, group_id, keys::SK_GROUP)
            .await
            .map_err(ApiError::internal)?;
        Ok(item.filter(|i| group_expires(i).is_some_and(|e| e > now)))
    }

    /// The live group item, or 404.
    pub async fn group_or_404(&self, group_id: &str, now: Ts) -> ApiResult<Item> {
        self.live_group(group_id, now)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("Task group {group_id} not found")))
    }

    /// getTaskGroup: `{taskGroupId, schedulerId, expires, sealed?}`; a group past its
    /// `expires` is gone (404), even before the expiry job deletes it.
    pub async fn task_group(&self, group_id: &str, now: Ts) -> ApiResult<Value> {
        let item = self.group_or_404(group_id, now).await?;
        let expires = group_expires(&item).unwrap_or(now);
        Ok(group_json(group_id, &item, expires))
    }

    /// listTaskGroup: the group's fields and one page of its tasks, in taskId order.
    pub async fn list_task_group(
        &self,
        group_id: &str,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(Value, Option<String>)> {
        let mut out = self.task_group(group_id, now).await?;
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let range = SkRange {
            prefix: Some(keys::SK_MEMBER_PREFIX.to_string()),
            ..Default::default()
        };
        let res = self
            .store
            .query(
                keys::TASK_GROUPS,
                group_id,
                &range,
                after.as_ref(),
                page.limit,
            )
            .await
            .map_err(ApiError::internal)?;
        let ids: Vec<&str> = res
            .items
            .iter()
            .filter_map(|m| m.sk.strip_prefix(keys::SK_MEMBER_PREFIX))
            .collect();
        let mut tasks = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(16) {
            let found = try_join_all(chunk.iter().map(|id| self.task_and_status(id, now))).await?;
            // Expired members (deleted or not yet) are skipped.
            tasks.extend(found.into_iter().flatten());
        }
        out["tasks"] = json!(tasks);
        Ok((out, res.next.as_ref().map(encode_token)))
    }

    /// One page of a group's member taskIds, in taskId order.
    async fn members_page(
        &self,
        group_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> ApiResult<(Vec<String>, Option<Cursor>)> {
        let range = SkRange {
            prefix: Some(keys::SK_MEMBER_PREFIX.to_string()),
            ..Default::default()
        };
        let page = self
            .store
            .query(keys::TASK_GROUPS, group_id, &range, after, limit)
            .await
            .map_err(ApiError::internal)?;
        let ids = page
            .items
            .iter()
            .filter_map(|m| m.sk.strip_prefix(keys::SK_MEMBER_PREFIX))
            .map(String::from)
            .collect();
        Ok((ids, page.next))
    }

    /// Every member taskId of a group, in taskId order.
    async fn member_ids(&self, group_id: &str) -> ApiResult<Vec<String>> {
        let mut ids = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self
                .members_page(group_id, after.as_ref(), crate::queue::MAX_PAGE)
                .await?;
            ids.extend(page);
            match next {
                Some(c) => after = Some(c),
                None => return Ok(ids),
            }
        }
    }

    /// The member task that carries a group event: the first in taskId order that still
    /// exists and has not expired (members are read a page at a time, so a large group costs
    /// no more than its first live member).
    async fn carrier(&self, group_id: &str, now: Ts) -> ApiResult<Option<(TaskRecord, u64)>> {
        let mut after = None;
        loop {
            let (page, next) = self
                .members_page(group_id, after.as_ref(), PARALLEL)
                .await?;
            for id in page {
                if let Some((rec, v)) = self.load(&id).await? {
                    if rec.expires > now {
                        return Ok(Some((rec, v)));
                    }
                }
            }
            match next {
                Some(c) => after = Some(c),
                None => return Ok(None),
            }
        }
    }

    /// sealTaskGroup: no task may join the group from now on. Irreversible; a repeat keeps
    /// the first `sealed` time. Every call publishes `task-group-sealed`, written in the same
    /// transaction as the seal (in a member task's outbox).
    pub async fn seal_task_group(&self, group_id: &str, now: Ts) -> ApiResult<Value> {
        for attempt in 0..MAX_ATTEMPTS {
            let group = self.group_or_404(group_id, now).await?;
            let Some((mut carrier, version)) = self.carrier(group_id, now).await? else {
                return Err(ApiError::not_found(format!(
                    "Task group {group_id} has no tasks"
                )));
            };
            let mut data = group.data.clone();
            let group_op = if is_sealed(&group) {
                WriteOp::Check {
                    table: keys::TASK_GROUPS,
                    pk: group_id.to_string(),
                    sk: keys::SK_GROUP.to_string(),
                    cond: Cond::Version(group.version),
                }
            } else {
                data["sealed"] = json!(now);
                WriteOp::Put {
                    table: keys::TASK_GROUPS,
                    item: group_item(group_id, data.clone()),
                    cond: Cond::Version(group.version),
                }
            };
            let sealed = Item::new(group_id, keys::SK_GROUP, data, vec![]);
            let reply = group_json(group_id, &sealed, group_expires(&group).unwrap_or(now));
            let payload = reply.as_object().cloned().unwrap_or_default();
            carrier.emit_group_event("task-group-sealed", payload);
            let ops = vec![
                group_op,
                WriteOp::Put {
                    table: keys::TASKS,
                    item: Self::status_item(&carrier)?,
                    cond: Cond::Version(version),
                },
            ];
            match self.store.transact(ops).await {
                Ok(()) => {
                    self.after_write(&carrier, version + 1);
                    return Ok(reply);
                }
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "Task group {group_id} is changing too fast; try again"
        )))
    }

    /// Applies `f` to every member task that is unresolved and before its deadline, a few at
    /// a time. Returns the group's size (its members that exist) and the ids `f` reported
    /// as affected.
    async fn for_each_unresolved(
        &self,
        group_id: &str,
        now: Ts,
        f: impl Fn(&mut TaskRecord) -> ApiResult<bool> + Copy,
    ) -> ApiResult<(usize, Vec<String>)> {
        let ids = self.member_ids(group_id).await?;
        let mut size = 0;
        let mut affected = Vec::new();
        for chunk in ids.chunks(PARALLEL) {
            let results = try_join_all(chunk.iter().map(|id| async move {
                let Some((rec, _)) = self.load(id).await? else {
                    return Ok::<_, ApiError>(None);
                };
                if rec.expires <= now {
                    return Ok(None);
                }
                let (_, hit) = self
                    .mutate(id, |r| {
                        if r.is_unresolved() && r.deadline > now {
                            f(r)
                        } else {
                            Ok(false)
                        }
                    })
                    .await?;
                Ok(Some(hit.then(|| id.clone())))
            }))
            .await?;
            for r in results.into_iter().flatten() {
                size += 1;
                affected.extend(r);
            }
        }
        Ok((size, affected))
    }

    /// cancelTaskGroup (the caller checked the group exists and is sealed): cancels every
    /// unresolved task whose deadline is still ahead, each with its `task-exception`.
    pub async fn cancel_task_group(&self, group_id: &str, now: Ts) -> ApiResult<Value> {
        let (size, ids) = self
            .for_each_unresolved(group_id, now, |r| r.cancel(now).map(|_| true))
            .await?;
        Ok(json!({
            "taskGroupId": group_id,
            "taskGroupSize": size,
            "cancelledCount": ids.len(),
            "taskIds": ids,
        }))
    }

    /// changeTaskGroupPriority: sets the priority of every unresolved task of the group, then
    /// publishes `task-group-priority-changed` (through a member's outbox).
    pub async fn change_task_group_priority(
        &self,
        group_id: &str,
        priority: Priority,
        now: Ts,
    ) -> ApiResult<Value> {
        let group = self.group_or_404(group_id, now).await?;
        let (_, ids) = self
            .for_each_unresolved(group_id, now, |r| {
                r.set_priority(priority);
                Ok(true)
            })
            .await?;
        let reply = json!({
            "taskGroupId": group_id,
            "schedulerId": group.data["schedulerId"],
            "newPriority": priority.as_str(),
            "tasksAffected": ids.len(),
            "taskIds": ids,
        });
        if let Some((carrier, _)) = self.carrier(group_id, now).await? {
            let mut payload = reply.as_object().cloned().unwrap_or_default();
            payload.remove("taskIds");
            self.mutate(&carrier.task_id, |r| {
                r.emit_group_event("task-group-priority-changed", payload.clone());
                Ok(())
            })
            .await?;
        }
        Ok(reply)
    }

    /// The write that counts `task_id` as one more unresolved task of its group. With
    /// `reset` (the group id is being reused after expiry), the other shares are cleared in
    /// the same transaction.
    pub(crate) async fn count_unresolved_ops(
        &self,
        group_id: &str,
        task_id: &str,
        reset: bool,
    ) -> ApiResult<Vec<WriteOp>> {
        let shares = self.counter_shares(group_id, true).await?;
        Ok(count_ops(&shares, group_id, task_id, reset))
    }

    /// The counter shares of a group. Read eventually consistent (`consistent` false), they
    /// may be stale: every write that rests on them is conditioned on the versions read.
    pub(crate) async fn counter_shares(
        &self,
        group_id: &str,
        consistent: bool,
    ) -> ApiResult<Vec<Item>> {
        let range = SkRange {
            prefix: Some(keys::SK_UNRESOLVED_PREFIX.to_string()),
            ..Default::default()
        };
        let limit = keys::SHARDS as usize;
        let page = (self.store)
            .query_as(keys::TASK_GROUPS, group_id, &range, limit, consistent)
            .await;
        Ok(page.map_err(ApiError::internal)?.items)
    }

    /// Writes a status item at `version` together with `ops` (one write if there are none).
    pub(crate) async fn save_with(
        &self,
        rec: &TaskRecord,
        version: u64,
        mut ops: Vec<WriteOp>,
    ) -> ApiResult<Result<(), StoreError>> {
        if ops.is_empty() {
            return self.save(rec, version).await;
        }
        ops.insert(
            0,
            WriteOp::Put {
                table: keys::TASKS,
                item: Self::status_item(rec)?,
                cond: Cond::Version(version),
            },
        );
        Ok(self
            .store
            .transact(ops)
            .await
            .map(|()| self.after_write(rec, version + 1)))
    }

    /// The dependency worker is done with the resolution marked at `due`: clears the mark
    /// and, if the task is resolved and still counted, takes it off its group's count; the
    /// transaction that brings the count to zero carries `task-group-resolved`.
    pub(crate) async fn finish_resolution(
        &self,
        task_id: &str,
        mut rec: TaskRecord,
        mut version: u64,
        due: Ts,
        now: Ts,
    ) -> ApiResult<()> {
        for attempt in 0..MAX_ATTEMPTS {
            // A newer resolution (after a rerun) marked it again; that one is handled later.
            if rec.dependents_due != Some(due) {
                return Ok(());
            }
            rec.dependents_due = None;
            let mut ops = vec![];
            if rec.group_counted && !rec.is_unresolved() {
                rec.group_counted = false;
                // The first try reads the shares eventually consistent; they are checked
                // by version in the transaction, and a lost one reads them strongly.
                ops = self.uncount_ops(&mut rec, now, attempt > 0).await?;
            }
            match self.save_with(&rec, version, ops).await? {
                Ok(()) => return Ok(()),
                Err(e) if e.is_condition_failed() => {
                    backoff(attempt).await;
                    let Some(fresh) = self.load(task_id).await? else {
                        return Ok(());
                    };
                    (rec, version) = fresh;
                }
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {task_id} is changing too fast to count its resolution; try again"
        )))
    }

    /// The writes that take `rec` off its group's count; if that empties the count, also the
    /// checks that the other shares are still empty, and the event in `rec`'s outbox.
    async fn uncount_ops(
        &self,
        rec: &mut TaskRecord,
        now: Ts,
        consistent: bool,
    ) -> ApiResult<Vec<WriteOp>> {
        let gid = rec.task_group_id.clone();
        let sk = keys::sk_unresolved(&rec.task_id);
        let shares = self.counter_shares(&gid, consistent).await?;
        let mine = shares.iter().find(|i| i.sk == sk);
        let left = mine.map_or(0, count_of).saturating_sub(1);
        let mut ops = vec![share_op(&gid, sk.clone(), left, mine)];
        if left > 0 {
            return Ok(ops);
        }
        let others: Vec<&Item> = shares.iter().filter(|i| i.sk != sk).collect();
        ops.extend(others.iter().map(|i| WriteOp::Check {
            table: keys::TASK_GROUPS,
            pk: gid.clone(),
            sk: i.sk.clone(),
            cond: Cond::Version(i.version),
        }));
        if others.iter().all(|i| count_of(i) == 0) {
            if let Some(group) = self.live_group(&gid, now).await? {
                let expires = group_expires(&group).unwrap_or(now);
                let payload = group_json(&gid, &group, expires);
                let payload = payload.as_object().cloned().unwrap_or_default();
                rec.emit_group_event("task-group-resolved", payload);
            }
        }
        Ok(ops)
    }
}
