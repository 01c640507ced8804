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

use super::core::{backoff, Queue, MAX_ATTEMPTS, PARALLEL};
use super::counter;
use crate::error::{ApiError, ApiResult};
use crate::page::{encode_token, PageReq, MAX_PAGE};
use crate::records::group::{
    member_task_id, sk_member, GroupRecord, SK_GROUP, SK_MEMBER_PREFIX, TASK_GROUPS,
};
use crate::records::task::{Priority, TaskRecord, TASKS};
use crate::routing::Exchange;
use crate::store::{Cond, Cursor, SkRange, WriteOp};
use crate::time::Ts;
use futures_util::future::try_join_all;
use serde_json::{json, Value};

/// A group item as read, with its version.
pub(crate) type Versioned<T> = (T, u64);

impl Queue {
    /// The group if it exists and has not expired at `now`.
    pub(crate) async fn live_group(
        &self,
        group_id: &str,
        now: Ts,
    ) -> ApiResult<Option<Versioned<GroupRecord>>> {
        let Some(item) = self.store.get(TASK_GROUPS, group_id, SK_GROUP).await? else {
            return Ok(None);
        };
        let group = GroupRecord::from_item(&item)?;
        Ok(group.is_live(now).then_some((group, item.version)))
    }

    /// getTaskGroup (and what the group operations authorise against): the live group, or
    /// 404. A group past its `expires` is gone, even before the expiry job deletes it.
    pub async fn task_group(&self, group_id: &str, now: Ts) -> ApiResult<GroupRecord> {
        self.live_group(group_id, now)
            .await?
            .map(|(g, _)| g)
            .ok_or_else(|| ApiError::not_found(format!("Task group {group_id} not found")))
    }

    /// listTaskGroup: the group and one page of its tasks (`{task, status}`), in taskId
    /// order, with the next page's token.
    pub async fn list_task_group(
        &self,
        group_id: &str,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(GroupRecord, Vec<Value>, Option<String>)> {
        let group = self.task_group(group_id, now).await?;
        let (ids, mut next) = self
            .members_page(group_id, page.cursor()?.as_ref(), page.limit)
            .await?;
        let page = self.fill_task_page(&ids, now).await?;
        if let Some(last) = page.full_after {
            // Full: the next page starts just after the last member taken.
            next = last.map(|l| (sk_member(l), group_id.to_string(), sk_member(l)));
        }
        Ok((group, page.tasks, next.as_ref().map(encode_token)))
    }

    /// One page of a group's member taskIds, in taskId order.
    async fn members_page(
        &self,
        group_id: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> ApiResult<(Vec<String>, Option<Cursor>)> {
        let range = SkRange {
            prefix: Some(SK_MEMBER_PREFIX.to_string()),
            ..Default::default()
        };
        let page = self
            .store
            .query(TASK_GROUPS, group_id, &range, after, limit)
            .await?;
        let ids = page
            .items
            .iter()
            .filter_map(member_task_id)
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
                .members_page(group_id, after.as_ref(), MAX_PAGE)
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
    pub async fn seal_task_group(&self, group_id: &str, now: Ts) -> ApiResult<GroupRecord> {
        for attempt in 0..MAX_ATTEMPTS {
            let Some((mut group, group_version)) = self.live_group(group_id, now).await? else {
                return Err(ApiError::not_found(format!(
                    "Task group {group_id} not found"
                )));
            };
            let Some((mut carrier, version)) = self.carrier(group_id, now).await? else {
                return Err(ApiError::not_found(format!(
                    "Task group {group_id} has no tasks"
                )));
            };
            let group_op = if group.is_sealed() {
                WriteOp::Check {
                    table: TASK_GROUPS,
                    pk: group_id.to_string(),
                    sk: SK_GROUP.to_string(),
                    cond: Cond::Version(group_version),
                }
            } else {
                group.sealed = Some(now);
                WriteOp::Put {
                    table: TASK_GROUPS,
                    item: group.item(),
                    cond: Cond::Version(group_version),
                }
            };
            carrier.emit_group_event(Exchange::TaskGroupSealed, group.to_json());
            let ops = vec![
                group_op,
                WriteOp::Put {
                    table: TASKS,
                    item: Self::status_item(&carrier)?,
                    cond: Cond::Version(version),
                },
            ];
            match self.store.transact(ops).await {
                Ok(()) => {
                    self.after_write(&carrier, version + 1);
                    return Ok(group);
                }
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
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

    /// cancelTaskGroup (the caller checked the group exists and is sealed, see
    /// [`GroupRecord::check_cancellable`]): cancels every unresolved task whose deadline is
    /// still ahead, each with its `task-exception`.
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
        let group = self.task_group(group_id, now).await?;
        let (_, ids) = self
            .for_each_unresolved(group_id, now, |r| {
                r.set_priority(priority);
                Ok(true)
            })
            .await?;
        let reply = json!({
            "taskGroupId": group_id,
            "schedulerId": group.scheduler_id,
            "newPriority": priority.as_str(),
            "tasksAffected": ids.len(),
            "taskIds": ids,
        });
        if let Some((carrier, _)) = self.carrier(group_id, now).await? {
            let mut payload = reply.as_object().cloned().unwrap_or_default();
            payload.remove("taskIds");
            self.mutate(&carrier.task_id, |r| {
                r.emit_group_event(Exchange::TaskGroupPriorityChanged, payload.clone());
                Ok(())
            })
            .await?;
        }
        Ok(reply)
    }

    /// The task-group writes that go into the creating transaction: the group item (created,
    /// its `expires` pushed later, or only checked) and one more unresolved task on its
    /// counter. A group past its `expires` is gone: its id may be taken again, by any
    /// schedulerId.
    pub(crate) async fn join_group_ops(
        &self,
        rec: &TaskRecord,
        now: Ts,
        consistent: bool,
    ) -> ApiResult<Vec<WriteOp>> {
        let gid = rec.task_group_id.as_str();
        let wanted_expires = rec.expires.plus(self.cfg.group_expiry_extension_ms);
        let group = (self.store).get_as(TASK_GROUPS, gid, SK_GROUP, consistent);
        // Both reads at once: they sit on createTask's critical path.
        let (group, shares) = futures_util::future::join(
            group,
            counter::shares(self.store.as_ref(), gid, consistent),
        )
        .await;
        let group = match group? {
            Some(item) => Some((GroupRecord::from_item(&item)?, item.version)),
            None => None,
        };
        let reuse = group.as_ref().is_some_and(|(g, _)| !g.is_live(now));
        let mut ops = counter::count_ops(&shares?, gid, rec.task_id.as_str(), reuse);
        let fresh = GroupRecord::new(gid, &rec.scheduler_id, wanted_expires);
        let (group, version) = match group {
            None => {
                ops.push(WriteOp::Put {
                    table: TASK_GROUPS,
                    item: fresh.item(),
                    cond: Cond::NotExists,
                });
                return Ok(ops);
            }
            Some((_, version)) if reuse => {
                ops.push(WriteOp::Put {
                    table: TASK_GROUPS,
                    item: fresh.item(),
                    cond: Cond::Version(version),
                });
                return Ok(ops);
            }
            Some(found) => found,
        };
        group.check_joinable(&rec.task_id, &rec.scheduler_id)?;
        ops.push(if group.expires < wanted_expires {
            let mut longer = group;
            longer.expires = wanted_expires;
            WriteOp::Put {
                table: TASK_GROUPS,
                item: longer.item(),
                cond: Cond::Version(version),
            }
        } else {
            WriteOp::Check {
                table: TASK_GROUPS,
                pk: gid.to_string(),
                sk: SK_GROUP.to_string(),
                cond: Cond::Version(version),
            }
        });
        Ok(ops)
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
                Err(e) => return Err(e.into()),
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
        let shares = counter::shares(self.store.as_ref(), &gid, consistent).await?;
        let (ops, emptied) = counter::uncount_ops(&shares, &gid, &rec.task_id);
        if emptied {
            if let Some((group, _)) = self.live_group(&gid, now).await? {
                rec.emit_group_event(Exchange::TaskGroupResolved, group.to_json());
            }
        }
        Ok(ops)
    }
}
