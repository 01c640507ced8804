//! Task dependencies.
//!
//! Each dependency is one edge item in the dependency's partition of the `tasks` table
//! (`dependent#<taskId>`), carrying whether it has been satisfied. The dependent's status
//! holds a counter of unsatisfied requirements. Satisfying an edge is one transaction over
//! exactly two items — the edge (unsatisfied → satisfied, on its version) and the dependent's
//! status (counter − 1, on its version) — so each edge costs O(1) and is counted at most once,
//! however many workers race.
//!
//! Resolution runs off the request path: a task that resolves is marked (`dependentsDue`,
//! the sparse `resolved` index) in the same write that resolves it; [`Queue::resolve_dependents_once`]
//! walks that index, satisfies the matching edges and clears the mark. Locally a background
//! loop runs it; in AWS a scheduled or stream-triggered function runs the same pass.
//!
//! Creation writes the status first (with the counter of dependencies not yet satisfied
//! when it looked), then the edges, then looks at those dependencies once more: a dependency
//! that resolved before its edge existed is caught by that second look, one that resolves
//! later by the worker. The edge's version makes the two agree on a single decrement.
//!
//! A task may list itself: that requirement is never satisfied by an edge, so the task waits
//! for scheduleTask (or its deadline).

use super::core::{backoff, chunked, Pass, Queue, PARALLEL};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::page::{encode_token, PageReq, MAX_PAGE};
use crate::records::edge::{
    dependent_of, edge_item, is_satisfied, satisfied_edge, sk_dependent, Requires,
    SK_DEPENDENT_PREFIX,
};
use crate::records::task::{index, TaskRecord, TASKS};
use crate::store::shard::Shards;
use crate::store::{Cond, Item, SkRange, WriteOp};
use crate::time::{Budget, Pace, Ts};
use futures_util::future::try_join_all;
use serde_json::Value;

/// Edge writes in flight at once for one dependent.
const EDGE_WRITES: usize = 32;

/// Most dependencies a task may have.
pub const MAX_DEPENDENCIES: usize = 10_000;
/// Attempts at satisfying one edge under contention on the dependent's status.
const SATISFY_ATTEMPTS: usize = 50;

/// What one go at a resolved task's dependents did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// Edges it satisfied.
    pub satisfied: usize,
    /// False if the budget ran out first: the resolution is still marked, and the next go
    /// goes on from the edges left.
    pub finished: bool,
}

impl Release {
    /// Nothing left to do: the task is gone, or its resolution was handled already.
    const NOTHING: Release = Release {
        satisfied: 0,
        finished: true,
    };
}

/// One dependency of a task being created, as found when it was checked.
#[derive(Debug, Clone)]
pub struct PlannedEdge {
    /// The dependency's taskId.
    pub dependency: String,
    /// Already satisfied when checked.
    pub satisfied: bool,
}

/// The dependencies of a task being created, checked and counted.
#[derive(Debug, Clone)]
pub struct DependencyPlan {
    /// What the dependent requires.
    pub requires: Requires,
    /// One per listed dependency (the task itself included, as an edge that never counts).
    pub edges: Vec<PlannedEdge>,
    /// Requirements not met yet: unsatisfied dependencies, plus one for a self-dependency.
    pub unsatisfied: u32,
}

impl Queue {
    /// Checks the dependencies of a task about to be created (every one exists and lives at
    /// least until `deadline`; no duplicates; at most [`MAX_DEPENDENCIES`]) and counts those
    /// not yet met. Writes nothing, so a failure leaves nothing behind.
    pub async fn plan_dependencies(
        &self,
        task_id: &str,
        def: &Value,
        deadline: Ts,
        now: Ts,
    ) -> ApiResult<DependencyPlan> {
        let deps = crate::json::string_list(&def["dependencies"]);
        let requires = Requires::of(def);
        if deps.len() > MAX_DEPENDENCIES {
            return Err(ApiError::input(format!(
                "A task may have at most {MAX_DEPENDENCIES} dependencies, not {}",
                deps.len()
            )));
        }
        let mut seen = std::collections::HashSet::with_capacity(deps.len());
        if let Some(dup) = deps.iter().find(|d| !seen.insert(d.as_str())) {
            return Err(ApiError::input(format!(
                "Dependency {dup} is listed more than once"
            )));
        }
        // One batched read for all of them (the task itself, if listed, is not read).
        let others: Vec<&str> = deps
            .iter()
            .map(String::as_str)
            .filter(|d| *d != task_id)
            .collect();
        let mut loaded = self.load_many(&others).await?.into_iter();
        let mut found: Vec<(String, Option<TaskRecord>)> = Vec::with_capacity(deps.len());
        for dep in &deps {
            if dep == task_id {
                found.push((dep.clone(), None));
                continue;
            }
            match loaded.next().flatten() {
                Some(rec) if rec.expires > now => found.push((dep.clone(), Some(rec))),
                _ => {
                    return Err(ApiError::input(format!(
                        "Task {task_id} depends on task {dep}, which does not exist"
                    )))
                }
            }
        }
        let mut plan = DependencyPlan {
            requires,
            edges: Vec::with_capacity(found.len()),
            unsatisfied: 0,
        };
        for (dependency, rec) in found {
            let satisfied = match &rec {
                // The task itself: only scheduleTask lifts this requirement.
                None => false,
                Some(r) if r.expires < deadline => {
                    return Err(ApiError::input(format!(
                    "Dependency {dependency} expires at {}, before this task's deadline {deadline}",
                    r.expires
                )))
                }
                Some(r) => requires.met_by(r),
            };
            plan.unsatisfied += u32::from(!satisfied);
            plan.edges.push(PlannedEdge {
                dependency,
                satisfied,
            });
        }
        Ok(plan)
    }

    /// After the dependent's status exists: writes its edges, then looks once more at every
    /// dependency that was not yet met, to catch resolutions that happened before its edge
    /// existed. Safe to repeat (an existing edge is left as it is).
    pub async fn write_edges(
        &self,
        dependent: &TaskRecord,
        plan: &DependencyPlan,
        now: Ts,
    ) -> ApiResult<()> {
        let items: Vec<Item> = plan
            .edges
            .iter()
            .map(|e| edge_item(&e.dependency, dependent, plan.requires, e.satisfied))
            .collect();
        // One conditional put each, not transactions of many: they need no atomicity (a
        // repeat finds some in place and keeps them), and DynamoDB bills a transaction's
        // items and index entries twice.
        for chunk in items.chunks(EDGE_WRITES) {
            try_join_all(chunk.iter().map(|item| self.put_edge(item))).await?;
        }
        let dependent_id = dependent.task_id.as_str();
        let todo: Vec<&str> = plan
            .edges
            .iter()
            .filter(|e| !e.satisfied && e.dependency != dependent_id)
            .map(|e| e.dependency.as_str())
            .collect();
        let now_met: Vec<&str> = todo
            .iter()
            .zip(self.load_many(&todo).await?)
            .filter(|(_, rec)| rec.as_ref().is_some_and(|r| plan.requires.met_by(r)))
            .map(|(d, _)| *d)
            .collect();
        for chunk in now_met.chunks(PARALLEL) {
            try_join_all(
                chunk
                    .iter()
                    .map(|d| self.satisfy_edge(d, dependent_id, None, now)),
            )
            .await?;
        }
        Ok(())
    }

    /// Puts an edge unless it exists (a repeated createTask keeps what is there, satisfied
    /// or not).
    async fn put_edge(&self, item: &Item) -> ApiResult<()> {
        let op = WriteOp::Put {
            table: TASKS,
            item: item.clone(),
            cond: Cond::NotExists,
        };
        match self.store.write(op).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_condition_failed() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Marks the edge `dependency → dependent` satisfied and counts it on the dependent, in
    /// one transaction. False if the edge was already satisfied (or is gone). `read` is the
    /// edge as a query just found it, if one did: the first attempt takes it (the write is
    /// conditioned on its version) rather than reading it again.
    pub async fn satisfy_edge(
        &self,
        dependency: &str,
        dependent: &str,
        read: Option<&Item>,
        now: Ts,
    ) -> ApiResult<bool> {
        let sk = sk_dependent(dependent);
        for attempt in 0..SATISFY_ATTEMPTS {
            let edge = match read.filter(|_| attempt == 0) {
                Some(edge) => edge.clone(),
                None => match self.store.get(TASKS, dependency, &sk).await? {
                    Some(edge) => edge,
                    None => return Ok(false),
                },
            };
            if is_satisfied(&edge) {
                return Ok(false);
            }
            let Some((mut rec, version)) = self.load(dependent).await? else {
                return Ok(false); // the dependent expired
            };
            rec.requirement_satisfied(now);
            let ops = vec![
                WriteOp::Put {
                    table: TASKS,
                    item: satisfied_edge(&edge),
                    cond: Cond::Version(edge.version),
                },
                WriteOp::Put {
                    table: TASKS,
                    item: Self::status_item(&rec)?,
                    cond: Cond::Version(version),
                },
            ];
            match self.store.transact(ops).await {
                Ok(()) => {
                    // Every write bumps the version by one (the store port's promise).
                    self.after_write(&rec, version + 1);
                    return Ok(true);
                }
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {dependent} is changing too fast to count dependency {dependency}; try again"
        )))
    }

    /// The dependency worker, one task: if it resolved and its dependents have not been
    /// looked at since, satisfies every edge its resolution meets and clears the mark, while
    /// `budget` lasts (see [`Release`]).
    pub async fn resolve_dependents(
        &self,
        task_id: &str,
        now: Ts,
        budget: &Budget,
    ) -> ApiResult<Release> {
        let Some(loaded) = self.load(task_id).await? else {
            return Ok(Release::NOTHING);
        };
        self.resolve_dependents_of(loaded, now, budget).await
    }

    /// [`Queue::resolve_dependents`] for a status record at `version` that was handed over
    /// (a stream image) rather than read. It may be older than the stored one: only a write
    /// conditioned on its version rests on it, and a lost one reads the task again.
    ///
    /// The edges share the task's partition, so they are satisfied at most
    /// `dependents_per_sec` a second ([`DEPENDENTS_PER_SEC`]). A release too large for the
    /// budget stops between chunks with the mark still set, once the next chunk's time has
    /// come: the next go skips the edges already satisfied, at the same pace.
    ///
    /// [`DEPENDENTS_PER_SEC`]: super::DEPENDENTS_PER_SEC
    pub async fn resolve_dependents_of(
        &self,
        (dep, version): (TaskRecord, u64),
        now: Ts,
        budget: &Budget,
    ) -> ApiResult<Release> {
        let task_id = dep.task_id.clone();
        let task_id = task_id.as_str();
        let Some(due) = dep.dependents_due else {
            return Ok(Release::NOTHING);
        };
        let mut release = Release {
            satisfied: 0,
            finished: false,
        };
        // At least one chunk per go, so a go that starts late still gets somewhere.
        let mut went = false;
        let mut pace = Pace::new(self.cfg.dependents_per_sec);
        let mut after = None;
        let range = SkRange {
            prefix: Some(SK_DEPENDENT_PREFIX.to_string()),
            ..Default::default()
        };
        loop {
            let page = self
                .store
                .query(TASKS, task_id, &range, after.as_ref(), MAX_PAGE)
                .await?;
            let todo: Vec<(&str, &Item)> = page
                .items
                .iter()
                .filter_map(|edge| {
                    let dependent = dependent_of(edge)?;
                    let requires = Requires::of(&edge.data);
                    (dependent != task_id && !is_satisfied(edge) && requires.met_by(&dep))
                        .then_some((dependent, edge))
                })
                .collect();
            for chunk in todo.chunks(PARALLEL) {
                if went && !budget.left() {
                    // Until the next chunk's time: a go that takes over at once keeps the pace.
                    pace.before(0).await;
                    return Ok(release);
                }
                went = true;
                pace.before(chunk.len()).await;
                let done = try_join_all(
                    chunk
                        .iter()
                        .map(|(d, edge)| self.satisfy_edge(task_id, d, Some(edge), now)),
                )
                .await?;
                release.satisfied += done.into_iter().filter(|d| *d).count();
            }
            match page.next {
                Some(c) => after = Some(c),
                None => break,
            }
        }
        // Clear the mark on the record read above (re-read only if it changed meanwhile), and
        // take the task off its group's unresolved count.
        self.finish_resolution(task_id, dep, version, due, now)
            .await?;
        release.finished = true;
        Ok(release)
    }

    /// Leaves a resolution the stream handed over, which could not be handled, to the
    /// scheduled pass: marks the task for the `resolved` index (see [`TaskRecord::sweep`]).
    pub async fn hold_resolution(&self, task_id: &str) -> ApiResult<()> {
        match self
            .mutate(task_id, |rec| {
                if rec.dependents_due.is_some() {
                    rec.sweep = true;
                    rec.resolution_held = true;
                }
                Ok(())
            })
            .await
        {
            Err(e) if e.code == ErrorCode::ResourceNotFound => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// One pass of the dependency worker over every shard of the `resolved` index, while
    /// `budget` lasts: `done` counts the edges it satisfied.
    pub async fn resolve_dependents_once(
        &self,
        now: Ts,
        batch: usize,
        shards: Shards,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let due = self
            .due_in_shards(TASKS, index::RESOLVED, now, batch, shards)
            .await?;
        // Resolutions are independent of each other: handle a few at once. One cut short
        // keeps its `resolved` entry, and the next pass goes on with it.
        let (released, cut) = chunked(&due.items, budget, |i| {
            self.resolve_dependents(&i.pk, now, budget)
        })
        .await?;
        Ok(Pass {
            done: released.iter().map(|r| r.satisfied).sum(),
            more: due.more || cut || released.iter().any(|r| !r.finished),
        })
    }

    /// listDependentTasks: the tasks that list `task_id` among their dependencies.
    pub async fn list_dependents(
        &self,
        task_id: &str,
        page: &PageReq,
        now: Ts,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        if self.load(task_id).await?.is_none() {
            return Err(ApiError::not_found(format!("Task {task_id} not found")));
        }
        let after = page.cursor()?;
        let range = SkRange {
            prefix: Some(SK_DEPENDENT_PREFIX.to_string()),
            ..Default::default()
        };
        let res = self
            .store
            .query(TASKS, task_id, &range, after.as_ref(), page.limit)
            .await?;
        let ids: Vec<&str> = res.items.iter().filter_map(dependent_of).collect();
        let mut next = res.next.clone();
        let page = self.fill_task_page(&ids, now).await?;
        if let Some(last) = page.full_after {
            // Full: the next page starts just after the last edge taken.
            next = last.map(|l| (sk_dependent(l), task_id.to_string(), sk_dependent(l)));
        }
        Ok((page.tasks, next.as_ref().map(encode_token)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::IssuerCredentials;
    use crate::ids::{TaskId, TaskQueueId};
    use crate::queue::QueueConfig;
    use crate::records::task::{ReasonResolved, RunState};
    use crate::signal::LocalSignal;
    use crate::store::sqlite::SqliteStore;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Duration;

    fn def(deps: &[&TaskId], now: Ts) -> Value {
        let mut body = json!({
            "taskQueueId": "prov/release",
            "taskGroupId": "dSlITZ4yQgmvxxAi4A8fHQ",
            "created": now,
            "deadline": now.plus(3_600_000),
            "dependencies": deps.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            "payload": {},
            "metadata": {
                "name": "release", "description": "a release cut short",
                "owner": "tests@example.com", "source": "https://example.com/tests"
            }
        });
        crate::schema::validate_input("create-task-request", &mut body).unwrap();
        body
    }

    #[tokio::test]
    async fn a_release_cut_short_by_its_budget_keeps_its_mark_and_the_next_go_finishes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("q.db")).unwrap());
        let issuer = IssuerCredentials {
            client_id: "static/q".into(),
            access_token: "t".into(),
        };
        let cfg = QueueConfig::default();
        let queue = Queue::new(store, Arc::new(LocalSignal::default()), issuer, cfg);
        let now = Ts::now();
        let fresh = || TaskId::parse(&crate::ids::slugid_from(rand::random())).unwrap();
        let dep = fresh();
        queue
            .create_task(&dep, def(&[], now), false, now)
            .await
            .unwrap();
        let dependents: Vec<TaskId> = (0..40).map(|_| fresh()).collect();
        for d in &dependents {
            queue
                .create_task(d, def(&[&dep], now), false, now)
                .await
                .unwrap();
        }
        let tq = TaskQueueId::parse("prov/release").unwrap();
        let pass = queue.try_claim_work(&tq, "g", "w", 1, now).await.unwrap();
        assert_eq!(pass.claims[0].record.task_id, dep.as_str());
        queue
            .resolve(&dep, 0, ReasonResolved::Completed, now)
            .await
            .unwrap();

        // A budget already spent: one chunk per go, and the mark stays for the next.
        let spent = Budget::of(Duration::ZERO);
        for _ in 0..2 {
            let release = queue.resolve_dependents(dep.as_str(), now, &spent).await;
            let release = release.unwrap();
            assert_eq!((release.satisfied, release.finished), (PARALLEL, false));
            let (rec, _) = queue.load(dep.as_str()).await.unwrap().unwrap();
            assert!(rec.dependents_due.is_some(), "still marked");
        }
        let ample = Budget::of(Duration::from_secs(60));
        let release = queue.resolve_dependents(dep.as_str(), now, &ample).await;
        let release = release.unwrap();
        assert_eq!(
            (release.satisfied, release.finished),
            (40 - 2 * PARALLEL, true)
        );
        let (rec, _) = queue.load(dep.as_str()).await.unwrap().unwrap();
        assert_eq!(rec.dependents_due, None, "the mark is cleared at the end");
        // Once handled, a go (a stale index entry, a repeated record) finds nothing to do,
        // and says it finished: a pass does not come back for it.
        let again = queue.resolve_dependents(dep.as_str(), now, &spent).await;
        assert_eq!(again.unwrap(), Release::NOTHING);
        for d in &dependents {
            let (rec, _) = queue.load(d.as_str()).await.unwrap().unwrap();
            assert_eq!(rec.runs[0].state, RunState::Pending, "{d} released once");
        }
    }
}
