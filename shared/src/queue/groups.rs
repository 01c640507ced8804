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
//! cancelTaskGroup and changeTaskGroupPriority go through the members in taskId order, at most
//! `group_call_tasks` of them (and [`CALL_TIME`]) in one call. A call that stops short notes
//! the change and where it got to on the group item (`change`), with a mark in the
//! `~changes/<shard>` partition written in the same transaction; the `groupChanges` job finds
//! the marks (strongly consistent, no index) and goes on from there, writing its progress the
//! same way, conditioned on the group's version, until the last member, when change and mark
//! go. A cancellation may be helped by another call; a priority change is refused (409) while
//! any change is under way, so two priorities never race over the same tasks.
//!

use super::core::{backoff, Pass, Queue, MAX_ATTEMPTS, PARALLEL};
use super::counter;
use crate::error::{ApiError, ApiResult};
use crate::page::{encode_token, PageReq, MAX_PAGE};
use crate::records::group::{
    change_mark, changes_pk, member_task_id, sk_member, GroupAction, GroupChange, GroupRecord,
    SK_GROUP, SK_MEMBER_PREFIX, TASK_GROUPS,
};
use crate::records::task::{Priority, TaskRecord, TASKS};
use crate::routing::Exchange;
use crate::store::shard::SHARDS;
use crate::store::{Cond, Cursor, SkRange, WriteOp};
use crate::time::{Budget, Ts};
use futures_util::future::try_join_all;
use serde_json::{json, Value};

/// The longest one cancelTaskGroup or changeTaskGroupPriority call goes through members
/// (besides `group_call_tasks`), well within the HTTP API's 30 s limit.
const CALL_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// What one stretch of a group change did.
struct Stretch {
    /// Members it went through (existing, not expired).
    seen: u64,
    /// Tasks it changed.
    changed: Vec<String>,
    /// The last member it went through, or where it started.
    last: Option<String>,
    /// True if it got to the end of the group.
    finished: bool,
}

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

    /// How many members the group has (its member items, read a page of keys at a time).
    async fn member_count(&self, group_id: &str) -> ApiResult<u64> {
        let mut n = 0;
        let mut after = None;
        loop {
            let (page, next) = self
                .members_page(group_id, after.as_ref(), MAX_PAGE)
                .await?;
            n += page.len() as u64;
            match next {
                Some(c) => after = Some(c),
                None => return Ok(n),
            }
        }
    }

    /// True if the group has no unresolved task (its counter, strongly consistent; it may
    /// still count a task that resolved moments ago, never miss one that has not).
    async fn all_resolved(&self, group_id: &str) -> ApiResult<bool> {
        let shares = counter::shares(self.store.as_ref(), group_id, true).await?;
        Ok(shares
            .iter()
            .all(|s| crate::records::group::share_count(s) == 0))
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

    /// Applies `action` to the members in `ids` that exist, have not expired, are unresolved
    /// and before their deadline, [`PARALLEL`] at a time: how many exist, and those changed.
    async fn change_members(
        &self,
        ids: &[String],
        action: GroupAction,
        now: Ts,
    ) -> ApiResult<(u64, Vec<String>)> {
        let results = try_join_all(ids.iter().map(|id| async move {
            let Some((rec, _)) = self.load(id).await? else {
                return Ok::<_, ApiError>(None);
            };
            if rec.expires <= now {
                return Ok(None);
            }
            let (_, hit) = self
                .mutate(id, |r| {
                    if !(r.is_unresolved() && r.deadline > now) {
                        return Ok(false);
                    }
                    match action {
                        GroupAction::Cancel => r.cancel(now).map(|_| true),
                        GroupAction::Priority { priority } => {
                            r.set_priority(priority);
                            Ok(true)
                        }
                    }
                })
                .await?;
            Ok(Some(hit.then(|| id.clone())))
        }))
        .await?;
        let mut seen = 0;
        let mut changed = vec![];
        for r in results.into_iter().flatten() {
            seen += 1;
            changed.extend(r);
        }
        Ok((seen, changed))
    }

    /// Applies `action` to the group's members after `after` (taskId order), a page of
    /// [`PARALLEL`] at a time, until it went through `limit` members or `budget` ran out.
    async fn change_stretch(
        &self,
        group_id: &str,
        action: GroupAction,
        after: Option<String>,
        limit: u64,
        budget: Option<&Budget>,
        now: Ts,
    ) -> ApiResult<Stretch> {
        let mut out = Stretch {
            seen: 0,
            changed: vec![],
            last: after,
            finished: false,
        };
        let mut cursor = out
            .last
            .as_deref()
            .map(|l| (sk_member(l), group_id.to_string(), sk_member(l)));
        let mut visited = 0;
        while visited < limit && budget.is_none_or(Budget::left) {
            let (ids, next) = self
                .members_page(group_id, cursor.as_ref(), PARALLEL)
                .await?;
            visited += ids.len() as u64;
            let (seen, changed) = self.change_members(&ids, action, now).await?;
            out.seen += seen;
            out.changed.extend(changed);
            if let Some(last) = ids.last() {
                out.last = Some(last.clone());
            }
            match next {
                Some(c) => cursor = Some(c),
                None => {
                    out.finished = true;
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Notes what a stretch of a group change did on the group item (and its mark, for the
    /// `groupChanges` job): the change under way, or none once it is done. A change that
    /// finishes publishes `task-group-priority-changed` if it changed priorities. The group
    /// item is written conditioned on the version read, so a stretch that another one (of a
    /// call, of the job) went past leaves the further one's place.
    async fn note_stretch(
        &self,
        group_id: &str,
        action: GroupAction,
        stretch: &Stretch,
        now: Ts,
    ) -> ApiResult<()> {
        for attempt in 0..MAX_ATTEMPTS {
            let Some((mut group, version)) = self.live_group(group_id, now).await? else {
                return Ok(());
            };
            let under_way = group.change.clone().filter(|c| c.action == action);
            if stretch.finished && under_way.is_none() {
                // One call went through the whole group, or another finished it first.
                return Ok(());
            }
            let mut change = under_way.unwrap_or(GroupChange {
                action,
                since: now,
                after: None,
                seen: 0,
                changed: 0,
            });
            change.after = change.after.max(stretch.last.clone());
            change.seen += stretch.seen;
            change.changed += stretch.changed.len() as u64;
            let done = stretch.finished.then(|| change.clone());
            group.change = (!stretch.finished).then_some(change);
            let mark = change_mark(group_id);
            let mark_op = match group.change {
                Some(_) => WriteOp::Put {
                    table: TASK_GROUPS,
                    item: mark,
                    cond: Cond::None,
                },
                None => WriteOp::Delete {
                    table: TASK_GROUPS,
                    pk: mark.pk,
                    sk: mark.sk,
                    cond: Cond::None,
                },
            };
            let ops = vec![
                WriteOp::Put {
                    table: TASK_GROUPS,
                    item: group.item(),
                    cond: Cond::Version(version),
                },
                mark_op,
            ];
            match self.store.transact(ops).await {
                Ok(()) => {
                    if let (Some(done), GroupAction::Priority { priority }) = (done, action) {
                        self.announce_priority(&group, priority, done.changed, now)
                            .await?;
                    }
                    return Ok(());
                }
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Task group {group_id} is changing too fast; try again"
        )))
    }

    /// Publishes `task-group-priority-changed` through a member's outbox.
    async fn announce_priority(
        &self,
        group: &GroupRecord,
        priority: Priority,
        affected: u64,
        now: Ts,
    ) -> ApiResult<()> {
        let group_id = group.task_group_id.as_str();
        if let Some((carrier, _)) = self.carrier(group_id, now).await? {
            let payload = json!({
                "taskGroupId": group_id,
                "schedulerId": group.scheduler_id,
                "newPriority": priority.as_str(),
                "tasksAffected": affected,
            });
            let payload = payload.as_object().cloned().unwrap_or_default();
            self.mutate(&carrier.task_id, |r| {
                r.emit_group_event(Exchange::TaskGroupPriorityChanged, payload.clone());
                Ok(())
            })
            .await?;
        }
        Ok(())
    }

    /// cancelTaskGroup (the caller checked the group exists and is sealed, see
    /// [`GroupRecord::check_cancellable`]): cancels every unresolved task whose deadline is
    /// still ahead, each with its `task-exception`. One call goes through at most
    /// `group_call_tasks` members (going on from where a cancellation under way got to);
    /// the `groupChanges` job does the rest. The reply counts what this call did.
    pub async fn cancel_task_group(&self, group_id: &str, now: Ts) -> ApiResult<Value> {
        let group = self.task_group(group_id, now).await?;
        let action = GroupAction::Cancel;
        let after = match group.change {
            Some(c) if c.action == action => c.after,
            Some(c) => return Err(Self::change_under_way(group_id, &c)),
            None => None,
        };
        if after.is_none() && self.all_resolved(group_id).await? {
            // Nothing to go through: a repeat, as upstream, cancels none.
            return Ok(json!({
                "taskGroupId": group_id,
                "taskGroupSize": self.member_count(group_id).await?,
                "cancelledCount": 0,
                "taskIds": [],
            }));
        }
        let limit = self.cfg.group_call_tasks;
        let stretch = self
            .change_stretch(
                group_id,
                action,
                after,
                limit,
                Some(&Budget::of(CALL_TIME)),
                now,
            )
            .await?;
        self.note_stretch(group_id, action, &stretch, now).await?;
        Ok(json!({
            "taskGroupId": group_id,
            "taskGroupSize": stretch.seen,
            "cancelledCount": stretch.changed.len(),
            "taskIds": stretch.changed,
        }))
    }

    /// changeTaskGroupPriority: sets the priority of every unresolved task of the group, then
    /// publishes `task-group-priority-changed` (through a member's outbox). One call goes
    /// through at most `group_call_tasks` members; the `groupChanges` job does the rest and
    /// publishes the event, with every task it changed counted, once done.
    pub async fn change_task_group_priority(
        &self,
        group_id: &str,
        priority: Priority,
        now: Ts,
    ) -> ApiResult<Value> {
        let group = self.task_group(group_id, now).await?;
        if let Some(c) = &group.change {
            return Err(Self::change_under_way(group_id, c));
        }
        let action = GroupAction::Priority { priority };
        let limit = self.cfg.group_call_tasks;
        let stretch = if self.all_resolved(group_id).await? {
            Stretch {
                seen: 0,
                changed: vec![],
                last: None,
                finished: true,
            }
        } else {
            self.change_stretch(
                group_id,
                action,
                None,
                limit,
                Some(&Budget::of(CALL_TIME)),
                now,
            )
            .await?
        };
        if stretch.finished {
            let affected = stretch.changed.len() as u64;
            self.announce_priority(&group, priority, affected, now)
                .await?;
        } else {
            self.note_stretch(group_id, action, &stretch, now).await?;
        }
        Ok(json!({
            "taskGroupId": group_id,
            "schedulerId": group.scheduler_id,
            "newPriority": priority.as_str(),
            "tasksAffected": stretch.changed.len(),
            "taskIds": stretch.changed,
        }))
    }

    fn change_under_way(group_id: &str, change: &GroupChange) -> ApiError {
        let what = match change.action {
            GroupAction::Cancel => "being cancelled".to_string(),
            GroupAction::Priority { priority } => {
                format!("changing its tasks' priority to {}", priority.as_str())
            }
        };
        ApiError::conflict(format!(
            "Task group {group_id} is {what} (since {}, {} tasks so far); try again once that is done",
            change.since, change.changed
        ))
    }

    /// One pass of the `groupChanges` job: goes on with every group change under way (its
    /// mark found strongly consistent in [`changes_pk`]'s partitions, up to `batch` a shard)
    /// while `budget` lasts. A mark whose group has no change under way (any more) goes, on
    /// the version read, so that a change noted meanwhile keeps it.
    pub async fn advance_group_changes_once(
        &self,
        now: Ts,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let mut pass = Pass {
            done: 0,
            more: false,
        };
        for shard in 0..SHARDS {
            let page = self
                .store
                .query(
                    TASK_GROUPS,
                    &changes_pk(shard),
                    &SkRange::default(),
                    None,
                    batch,
                )
                .await?;
            pass.more |= page.next.is_some();
            for mark in page.items {
                if !budget.left() {
                    pass.more = true;
                    return Ok(pass);
                }
                let group_id = mark.sk.as_str();
                let change = self
                    .live_group(group_id, now)
                    .await?
                    .and_then(|(g, _)| g.change);
                let Some(change) = change else {
                    let gone = WriteOp::Delete {
                        table: TASK_GROUPS,
                        pk: mark.pk.clone(),
                        sk: mark.sk.clone(),
                        cond: Cond::Version(mark.version),
                    };
                    match self.store.write(gone).await {
                        Err(e) if !e.is_condition_failed() => return Err(e.into()),
                        _ => continue,
                    }
                };
                let stretch = self
                    .change_stretch(
                        group_id,
                        change.action,
                        change.after,
                        u64::MAX,
                        Some(budget),
                        now,
                    )
                    .await?;
                self.note_stretch(group_id, change.action, &stretch, now)
                    .await?;
                pass.done += stretch.changed.len();
                pass.more |= !stretch.finished;
            }
        }
        Ok(pass)
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
            rec.resolution_held = false;
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
