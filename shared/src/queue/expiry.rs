//! Expiry: deletes tasks, dependency edges, task groups, task queues and workers once their
//! `expires` has passed.
//!
//! Reads already treat anything past `expires` as gone; this job reclaims the space. It finds
//! work through the `task-expiry` and `group-expiry` indexes (written with the items); a
//! task's artifacts and the edges to it go with the task, and
//! every step is safe to repeat: a task's definition, which holds its index entry, is deleted
//! last, so a pass that dies half-way is finished by the next one. A task whose outbox still
//! holds events is left until they are delivered, so expiry never drops an event.

use super::core::{chunked, Pass, Queue, PARALLEL};
use crate::blobs::BlobStore;
use crate::error::ApiResult;
use crate::page::MAX_PAGE;
use crate::records::edge::{sk_dependent, SK_DEPENDENT_PREFIX};
use crate::records::group::{sk_member, GROUP_EXPIRY, SK_GROUP, TASK_GROUPS};
use crate::records::task::{index, SK_DEF, SK_STATUS, TASKS};
use crate::store::{Cond, Item, SkRange, WriteOp};
use crate::time::{Budget, Ts};
use futures_util::future::try_join_all;

/// What expiring a task leaves in its partition for later: its definition, which holds its
/// index entry and goes last, and the edges to its dependents, which go with them (the
/// dependent's expiry deletes the edges its definition names).
fn keep_when_expiring(sk: &str) -> bool {
    sk == SK_DEF || sk.starts_with(SK_DEPENDENT_PREFIX)
}

fn expires_of(item: &Item) -> Option<Ts> {
    item.data["expires"].as_str().and_then(Ts::parse)
}

impl Queue {
    /// One pass of the expiry job: deletes what expired at or before `now` (up to `batch` per
    /// index shard), a few at a time, while `budget` lasts; `done` counts the tasks, edges,
    /// groups and worker records deleted. A task's artifacts go with it, their bytes from
    /// `blobs`, once `grace_ms` has passed since they expired (downloads answer 410 meanwhile).
    pub async fn expire_once(
        &self,
        blobs: &dyn BlobStore,
        now: Ts,
        grace_ms: i64,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let tasks = self.due_in(TASKS, index::TASK_EXPIRY, now, batch).await?;
        let (deleted, cut) = chunked(&tasks.items, budget, |entry| async move {
            if entry.sk == SK_DEF {
                self.expire_task(blobs, &entry.pk, now, grace_ms).await
            } else {
                self.expire_edge(&entry.pk, &entry.sk, now).await
            }
        })
        .await?;
        let mut done = deleted.into_iter().filter(|d| *d).count();
        if cut || !budget.left() {
            return Ok(Pass { done, more: true });
        }
        // A full page of which nothing could go (tasks whose artifacts are in their grace,
        // or whose events wait) would come back the same at once: the next scheduled pass
        // looks again instead. What lies after them in the index expired later still.
        let more_tasks = tasks.more && done > 0;
        let groups = self.due_in(TASK_GROUPS, GROUP_EXPIRY, now, batch).await?;
        let (deleted, cut) =
            chunked(&groups.items, budget, |e| self.expire_group(&e.pk, now)).await?;
        done += deleted.into_iter().filter(|d| *d).count();
        if cut || !budget.left() {
            return Ok(Pass { done, more: true });
        }
        let (workers, more_workers) = self.expire_worker_info(now, batch, budget).await?;
        Ok(Pass {
            done: done + workers,
            more: more_tasks || groups.more || more_workers,
        })
    }

    /// Deletes every item of a partition except those whose sort key `keep` holds, a few at
    /// once; `cond` gives each deletion's condition.
    async fn delete_partition(
        &self,
        table: &'static str,
        pk: &str,
        keep: impl Fn(&str) -> bool,
        cond: impl Fn(&Item) -> Cond,
    ) -> ApiResult<()> {
        let mut after = None;
        loop {
            let page = self
                .store
                .query(table, pk, &SkRange::default(), after.as_ref(), MAX_PAGE)
                .await?;
            let doomed: Vec<&Item> = page.items.iter().filter(|i| !keep(&i.sk)).collect();
            for chunk in doomed.chunks(PARALLEL) {
                try_join_all(chunk.iter().map(|i| {
                    self.store.write(WriteOp::Delete {
                        table,
                        pk: pk.to_string(),
                        sk: i.sk.clone(),
                        cond: cond(i),
                    })
                }))
                .await?;
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// The item at `(table, pk, sk)` if it exists and expired at or before `now`.
    async fn expired_item(
        &self,
        table: &'static str,
        pk: &str,
        sk: &str,
        now: Ts,
    ) -> ApiResult<Option<Item>> {
        let item = self.store.get(table, pk, sk).await?;
        Ok(item.filter(|i| expires_of(i).is_some_and(|e| e <= now)))
    }

    /// Deletes `item` if it is still at the version read; false if it changed meanwhile.
    pub(crate) async fn delete_if_unchanged(
        &self,
        table: &'static str,
        item: &Item,
    ) -> ApiResult<bool> {
        let op = WriteOp::Delete {
            table,
            pk: item.pk.clone(),
            sk: item.sk.clone(),
            cond: Cond::Version(item.version),
        };
        match self.store.write(op).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_condition_failed() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes an expired task: its artifacts (see [`Queue::expire_artifacts_of`]; not within
    /// `grace_ms` of their expiry), its status, anything else in its partition but the edges
    /// to its dependents, its group membership and the edges from its dependencies, then its
    /// definition. False if it is not due (or still has events to deliver, or artifacts in
    /// their grace).
    pub async fn expire_task(
        &self,
        blobs: &dyn BlobStore,
        task_id: &str,
        now: Ts,
        grace_ms: i64,
    ) -> ApiResult<bool> {
        let Some(def) = self.expired_item(TASKS, task_id, SK_DEF, now).await? else {
            return Ok(false);
        };
        let status = self.load(task_id).await?;
        // (Where the stream delivers events, the outbox only shows the last write's.)
        if status
            .as_ref()
            .is_some_and(|(r, _)| r.sweep && !r.outbox.is_empty())
        {
            return Ok(false);
        }
        if !self
            .expire_artifacts_of(blobs, task_id, now.plus(-grace_ms))
            .await?
        {
            return Ok(false);
        }
        let status_version = status.as_ref().map(|(_, v)| *v);
        let group = def.data["taskGroupId"].as_str().unwrap_or_default();
        // The status only at the version checked above: a concurrent write (an event being
        // added) makes this pass fail, and a later one retry.
        match self
            .delete_partition(TASKS, task_id, keep_when_expiring, |i| {
                match (i.sk.as_str(), status_version) {
                    (SK_STATUS, Some(v)) => Cond::Version(v),
                    _ => Cond::None,
                }
            })
            .await
        {
            Ok(()) => {}
            Err(e) => {
                tracing::info!(task_id, error = %e, "task changed while expiring; next pass");
                return Ok(false);
            }
        }
        if !group.is_empty() {
            self.store
                .write(WriteOp::Delete {
                    table: TASK_GROUPS,
                    pk: group.to_string(),
                    sk: sk_member(task_id),
                    cond: Cond::None,
                })
                .await?;
        }
        // The edges to this task, in its dependencies' partitions (its own, for a task that
        // depends on itself). Each dependency's expiry leaves them for this.
        let deps: Vec<&str> = def.data["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_str())
            .collect();
        for chunk in deps.chunks(PARALLEL) {
            try_join_all(chunk.iter().map(|d| {
                self.store.write(WriteOp::Delete {
                    table: TASKS,
                    pk: d.to_string(),
                    sk: sk_dependent(task_id),
                    cond: Cond::None,
                })
            }))
            .await?;
        }
        // The definition never changes, so this only fails if another pass deleted it first.
        let deleted = self.delete_if_unchanged(TASKS, &def).await?;
        self.forget_def(task_id);
        Ok(deleted)
    }

    /// Deletes a dependency edge whose dependent has expired (edges written by earlier versions
    /// carry an entry in the `task-expiry` index).
    async fn expire_edge(&self, pk: &str, sk: &str, now: Ts) -> ApiResult<bool> {
        match self.expired_item(TASKS, pk, sk, now).await? {
            Some(edge) => self.delete_if_unchanged(TASKS, &edge).await,
            None => Ok(false),
        }
    }

    /// Deletes an expired group: what is left of its membership and counter, then the group
    /// item, on the version read (a task that revived the id meanwhile keeps it).
    pub async fn expire_group(&self, group_id: &str, now: Ts) -> ApiResult<bool> {
        let Some(group) = self
            .expired_item(TASK_GROUPS, group_id, SK_GROUP, now)
            .await?
        else {
            return Ok(false);
        };
        self.delete_partition(
            TASK_GROUPS,
            group_id,
            |sk| sk == SK_GROUP,
            |i| Cond::Version(i.version),
        )
        .await?;
        self.delete_if_unchanged(TASK_GROUPS, &group).await
    }
}
