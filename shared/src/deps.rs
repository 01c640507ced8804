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

use crate::error::{ApiError, ApiResult};
use crate::keys::{self, index};
use crate::model::{RunState, TaskRecord};
use crate::queue::{decode_token, encode_token, PageReq, Queue};
use crate::store::{Cond, IndexEntry, Item, SkRange, WriteOp, MAX_TRANSACTION_ITEMS};
use crate::time::Ts;
use futures_util::future::try_join_all;
use serde_json::{json, Value};

/// Most dependencies a task may have.
pub const MAX_DEPENDENCIES: usize = 10_000;
/// Store reads or transactions in flight at once while handling many edges.
const PARALLEL: usize = 16;
/// Attempts at satisfying one edge under contention on the dependent's status.
const SATISFY_ATTEMPTS: usize = 50;

/// `requires` of a task definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requires {
    /// Every dependency must resolve `completed` (the default).
    AllCompleted,
    /// Every dependency must resolve, in any way.
    AllResolved,
}

impl Requires {
    /// Reads `requires` from a definition (absent means all-completed).
    pub fn of(def: &Value) -> Requires {
        match def["requires"].as_str() {
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

fn edge_item(
    dependency: &str,
    dependent: &TaskRecord,
    requires: Requires,
    satisfied: bool,
) -> Item {
    let sk = keys::sk_dependent(&dependent.task_id);
    let data = json!({
        "requires": requires.as_str(),
        "satisfied": satisfied,
        "expires": dependent.expires,
    });
    let indexes = edge_indexes(dependency, &sk, &data);
    Item::new(dependency, sk, data, indexes)
}

/// An edge expires with its dependent, whichever task's partition it sits in.
fn edge_indexes(dependency: &str, sk: &str, data: &Value) -> Vec<IndexEntry> {
    data["expires"]
        .as_str()
        .and_then(Ts::parse)
        .map(|t| keys::task_expiry_entry(t, dependency, sk))
        .into_iter()
        .collect()
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
        let deps = crate::model::string_list(&def["dependencies"]);
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
        let mut found: Vec<(String, Option<TaskRecord>)> = Vec::with_capacity(deps.len());
        for chunk in deps.chunks(PARALLEL) {
            found.extend(
                try_join_all(chunk.iter().map(|d| self.load_dependency(task_id, d, now))).await?,
            );
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

    /// A listed dependency (`None` for the task itself); 400 if it does not exist or expired.
    async fn load_dependency(
        &self,
        task_id: &str,
        dep: &str,
        now: Ts,
    ) -> ApiResult<(String, Option<TaskRecord>)> {
        if dep == task_id {
            return Ok((dep.to_string(), None));
        }
        match self.load(dep).await? {
            Some((rec, _)) if rec.expires > now => Ok((dep.to_string(), Some(rec))),
            _ => Err(ApiError::input(format!(
                "Task {task_id} depends on task {dep}, which does not exist"
            ))),
        }
    }

    /// Looks at a dependency again after its edge was written; satisfies the edge if met.
    async fn recheck_edge(
        &self,
        dependency: &str,
        dependent: &str,
        requires: Requires,
        now: Ts,
    ) -> ApiResult<bool> {
        match self.load(dependency).await? {
            Some((dep, _)) if requires.met_by(&dep) => {
                self.satisfy_edge(dependency, dependent, now).await
            }
            _ => Ok(false),
        }
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
        for chunk in items.chunks(MAX_TRANSACTION_ITEMS) {
            let ops = chunk
                .iter()
                .map(|item| WriteOp::Put {
                    table: keys::TASKS,
                    item: item.clone(),
                    cond: Cond::NotExists,
                })
                .collect();
            match self.store.transact(ops).await {
                Ok(()) => {}
                // Some already exist (a repeated createTask): write the others one by one.
                Err(e) if e.is_condition_failed() => {
                    for item in chunk {
                        let op = WriteOp::Put {
                            table: keys::TASKS,
                            item: item.clone(),
                            cond: Cond::NotExists,
                        };
                        match self.store.write(op).await {
                            Ok(_) => {}
                            Err(e) if e.is_condition_failed() => {}
                            Err(e) => return Err(ApiError::internal(e)),
                        }
                    }
                }
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        let dependent_id = dependent.task_id.as_str();
        let todo: Vec<&str> = plan
            .edges
            .iter()
            .filter(|e| !e.satisfied && e.dependency != dependent_id)
            .map(|e| e.dependency.as_str())
            .collect();
        for chunk in todo.chunks(PARALLEL) {
            try_join_all(
                chunk
                    .iter()
                    .map(|d| self.recheck_edge(d, dependent_id, plan.requires, now)),
            )
            .await?;
        }
        Ok(())
    }

    /// Marks the edge `dependency → dependent` satisfied and counts it on the dependent, in
    /// one transaction. False if the edge was already satisfied (or is gone).
    pub async fn satisfy_edge(
        &self,
        dependency: &str,
        dependent: &str,
        now: Ts,
    ) -> ApiResult<bool> {
        let sk = keys::sk_dependent(dependent);
        for attempt in 0..SATISFY_ATTEMPTS {
            let Some(edge) = self
                .store
                .get(keys::TASKS, dependency, &sk)
                .await
                .map_err(ApiError::internal)?
            else {
                return Ok(false);
            };
            if edge.data["satisfied"] == json!(true) {
                return Ok(false);
            }
            let Some((mut rec, version)) = self.load(dependent).await? else {
                return Ok(false); // the dependent expired
            };
            rec.requirement_satisfied(now);
            let mut data = edge.data.clone();
            data["satisfied"] = json!(true);
            let indexes = edge_indexes(dependency, &sk, &data);
            let ops = vec![
                WriteOp::Put {
                    table: keys::TASKS,
                    item: Item::new(dependency, sk.clone(), data, indexes),
                    cond: Cond::Version(edge.version),
                },
                WriteOp::Put {
                    table: keys::TASKS,
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
                Err(e) if e.is_condition_failed() => crate::queue::backoff(attempt).await,
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "Task {dependent} is changing too fast to count dependency {dependency}; try again"
        )))
    }

    /// The dependency worker, one task: if it resolved and its dependents have not been
    /// looked at since, satisfies every edge its resolution meets and clears the mark.
    /// Returns how many edges it satisfied.
    pub async fn resolve_dependents(&self, task_id: &str, now: Ts) -> ApiResult<usize> {
        let Some(loaded) = self.load(task_id).await? else {
            return Ok(0);
        };
        self.resolve_dependents_of(loaded, now).await
    }

    /// [`Queue::resolve_dependents`] for a status record at `version` that was handed over
    /// (a stream image) rather than read. It may be older than the stored one: only a write
    /// conditioned on its version rests on it, and a lost one reads the task again.
    pub async fn resolve_dependents_of(
        &self,
        (dep, version): (TaskRecord, u64),
        now: Ts,
    ) -> ApiResult<usize> {
        let task_id = dep.task_id.clone();
        let task_id = task_id.as_str();
        let Some(due) = dep.dependents_due else {
            return Ok(0);
        };
        let mut satisfied = 0;
        let mut after = None;
        let range = SkRange {
            prefix: Some(keys::SK_DEPENDENT_PREFIX.to_string()),
            ..Default::default()
        };
        loop {
            let page = self
                .store
                .query(
                    keys::TASKS,
                    task_id,
                    &range,
                    after.as_ref(),
                    crate::queue::MAX_PAGE,
                )
                .await
                .map_err(ApiError::internal)?;
            let todo: Vec<&str> = page
                .items
                .iter()
                .filter_map(|edge| {
                    let dependent = edge.sk.strip_prefix(keys::SK_DEPENDENT_PREFIX)?;
                    let requires = Requires::of(&edge.data);
                    (dependent != task_id
                        && edge.data["satisfied"] != json!(true)
                        && requires.met_by(&dep))
                    .then_some(dependent)
                })
                .collect();
            for chunk in todo.chunks(PARALLEL) {
                let done =
                    try_join_all(chunk.iter().map(|d| self.satisfy_edge(task_id, d, now))).await?;
                satisfied += done.into_iter().filter(|d| *d).count();
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
        Ok(satisfied)
    }

    /// Leaves a resolution the stream handed over, which could not be handled, to the
    /// scheduled pass: marks the task for the `resolved` index (see [`TaskRecord::sweep`]).
    pub async fn hold_resolution(&self, task_id: &str) -> ApiResult<()> {
        match self
            .mutate(task_id, |rec| {
                if rec.dependents_due.is_some() {
                    rec.sweep = true;
                }
                Ok(())
            })
            .await
        {
            Err(e) if e.code == crate::error::ErrorCode::ResourceNotFound => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// One pass of the dependency worker over every shard of the `resolved` index; returns
    /// how many edges it satisfied.
    pub async fn resolve_dependents_once(&self, now: Ts, batch: usize) -> ApiResult<usize> {
        let due = self.due(index::RESOLVED, now, batch).await?;
        let mut n = 0;
        // Resolutions are independent of each other: handle a few at once.
        for chunk in due.chunks(PARALLEL) {
            let done =
                try_join_all(chunk.iter().map(|i| self.resolve_dependents(&i.pk, now))).await?;
            n += done.into_iter().sum::<usize>();
        }
        Ok(n)
    }

    /// `{task, status}` of a task that has not expired, as the list endpoints show it.
    pub(crate) async fn task_and_status(&self, task_id: &str, now: Ts) -> ApiResult<Option<Value>> {
        let (Some((rec, _)), Some(mut def)) =
            (self.load(task_id).await?, self.load_def(task_id).await?)
        else {
            return Ok(None);
        };
        if rec.expires <= now {
            return Ok(None);
        }
        def["priority"] = json!(rec.priority.as_str());
        Ok(Some(json!({ "task": def, "status": rec.status_json() })))
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
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let range = SkRange {
            prefix: Some(keys::SK_DEPENDENT_PREFIX.to_string()),
            ..Default::default()
        };
        let res = self
            .store
            .query(keys::TASKS, task_id, &range, after.as_ref(), page.limit)
            .await
            .map_err(ApiError::internal)?;
        let ids: Vec<&str> = res
            .items
            .iter()
            .filter_map(|e| e.sk.strip_prefix(keys::SK_DEPENDENT_PREFIX))
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(PARALLEL) {
            let found = try_join_all(chunk.iter().map(|id| self.task_and_status(id, now))).await?;
            // An edge whose dependent is gone (expired) is skipped.
            out.extend(found.into_iter().flatten());
        }
        Ok((out, res.next.as_ref().map(encode_token)))
    }
}
