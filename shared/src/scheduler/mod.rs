//! The task-graph scheduler (seed 001), on top of the queue.
//!
//! A client submits a graph of labelled tasks with `requires` between labels. Each task is
//! defined on the queue unscheduled (schedulerId = the scheduler's id, taskGroupId = the
//! graph's id) and scheduled once every task it requires has completed. The scheduler learns
//! of resolutions from the queue's own `task-completed`, `task-failed` and `task-exception`
//! messages ([`Scheduler::on_resolution`]); every step is idempotent, so a repeated message
//! changes nothing and a message is acknowledged only after its effects are stored.
//!
//! Storage ([`crate::records::graph`]): the graph item holds the state, the graph's leaves
//! (`requires`/`requiresLeft`: the tasks no other task requires, so the graph is finished when
//! they all completed) and an outbox of the scheduler's events, delivered by the queue's
//! publisher; one item per task holds its label, `requires`, `requiresLeft`, `dependents`
//! and reruns. Every update is a conditional write on the version read.
//!
//! TaskIds are derived from a random per-graph secret and the label, so that a repeated
//! createTaskGraph or extendTaskGraph (after a crash or a lost reply; the official clients
//! retry) finds the same tasks and completes what the first attempt left undone.

pub mod submission;

use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::TaskId;
use crate::queue::Queue;
use crate::records::graph::{
    node_state, sk_graph_task, state, GraphRecord, TaskNode, SK_GRAPH_TASK_PREFIX, SK_TASK_GRAPH,
    TASK_GRAPHS,
};
use crate::routing::Exchange;
use crate::store::{Cond, SkRange, Store, WriteOp};
use crate::time::Ts;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use submission::{digest_of, new_nodes, parse_entries, subs_labels, substitute, Entry, Submission};

/// The scheduler's default id (upstream's production scheduler).
pub const DEFAULT_SCHEDULER_ID: &str = "task-graph-scheduler";
/// Most reruns a task may ask for.
pub const MAX_RERUNS: u64 = 100;
/// Most tasks one createTaskGraph or extendTaskGraph call may add.
pub const MAX_TASKS_PER_CALL: usize = 1000;
/// Queue calls a graph operation makes at once.
const CONCURRENCY: usize = 16;
/// Optimistic-concurrency attempts before giving up.
const MAX_ATTEMPTS: usize = 50;

/// An extension checked against the graph as stored, ready to apply once authorised.
#[derive(Debug)]
pub struct Extension {
    graph: GraphRecord,
    existing: HashMap<String, TaskNode>,
    /// The new entries (a repeat's included).
    pub submission: Submission,
}

/// The task-graph scheduler.
pub struct Scheduler {
    /// The queue it creates tasks on (in process: the same library and tables).
    pub queue: Arc<Queue>,
    /// Its schedulerId.
    pub scheduler_id: String,
}

/// What the scheduler did with one message.
#[derive(Debug, PartialEq, Eq)]
pub enum Reaction {
    /// Not about one of this scheduler's tasks, or nothing left to do.
    Ignored,
    /// Handled (the effects are stored).
    Handled,
}

impl Scheduler {
    /// A scheduler over `queue` with id `scheduler_id`.
    pub fn new(queue: Arc<Queue>, scheduler_id: impl Into<String>) -> Self {
        Scheduler {
            queue,
            scheduler_id: scheduler_id.into(),
        }
    }

    fn store(&self) -> &dyn Store {
        self.queue.store.as_ref()
    }

    /// Reads and decodes one item of the graph's partition, with its version.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        gid: &str,
        sk: &str,
    ) -> ApiResult<Option<(T, u64)>> {
        match self.store().get(TASK_GRAPHS, gid, sk).await? {
            Some(item) => Ok(Some((item.data.decode()?, item.version))),
            None => Ok(None),
        }
    }

    async fn graph(&self, gid: &str) -> ApiResult<Option<(GraphRecord, u64)>> {
        self.read(gid, SK_TASK_GRAPH).await
    }

    async fn existing_graph(&self, gid: &str) -> ApiResult<(GraphRecord, u64)> {
        self.graph(gid)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("Task graph {gid} not found")))
    }

    async fn node(&self, gid: &str, task_id: &str) -> ApiResult<Option<(TaskNode, u64)>> {
        self.read(gid, &sk_graph_task(task_id)).await
    }

    fn node_op(gid: &str, node: &TaskNode, cond: Cond) -> ApiResult<WriteOp> {
        Ok(WriteOp::Put {
            table: TASK_GRAPHS,
            item: node.item(gid)?,
            cond,
        })
    }

    /// Read-modify-write of one node: `f` returns false when there is nothing to change.
    /// Returns the node as it stands afterwards (`None`: no such node).
    async fn update_node(
        &self,
        gid: &str,
        task_id: &str,
        f: impl Fn(&mut TaskNode) -> bool,
    ) -> ApiResult<Option<TaskNode>> {
        for _ in 0..MAX_ATTEMPTS {
            let Some((mut node, version)) = self.node(gid, task_id).await? else {
                return Ok(None);
            };
            if !f(&mut node) {
                return Ok(Some(node));
            }
            match self
                .store()
                .write(Self::node_op(gid, &node, Cond::Version(version))?)
                .await
            {
                Ok(_) => return Ok(Some(node)),
                Err(e) if e.is_condition_failed() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "task {task_id} of graph {gid} is changing too often; try again"
        )))
    }

    /// Read-modify-write of the graph item; `f` may refuse (an error) or change nothing
    /// (false). Any event `f` emits is written with the change.
    async fn update_graph(
        &self,
        gid: &str,
        f: impl Fn(&mut GraphRecord) -> ApiResult<bool>,
    ) -> ApiResult<GraphRecord> {
        for _ in 0..MAX_ATTEMPTS {
            let (mut graph, version) = self.existing_graph(gid).await?;
            if !f(&mut graph)? {
                return Ok(graph);
            }
            match self
                .store()
                .write(WriteOp::Put {
                    table: TASK_GRAPHS,
                    item: graph.item()?,
                    cond: Cond::Version(version),
                })
                .await
            {
                Ok(_) => {
                    self.events_written();
                    return Ok(graph);
                }
                Err(e) if e.is_condition_failed() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "task graph {gid} is changing too often; try again"
        )))
    }

    /// Tells this process's observer that a graph holds new events.
    fn events_written(&self) {
        self.queue.observer.graph_written();
    }

    /// The queue definition of an entry's task: `$subs` replaced, and schedulerId,
    /// taskGroupId and the graph's route set.
    fn task_definition(&self, graph: &GraphRecord, e: &Entry) -> ApiResult<Value> {
        let mut task = e.task.clone();
        // A rule on the body, not a URL argument: InputError.
        substitute(&mut task, &|label| Some(graph.task_id(label))).map_err(ApiError::input)?;
        let Some(m) = task.as_object_mut() else {
            return Err(ApiError::input(format!(
                "task {:?}: task must be an object",
                e.label
            )));
        };
        m.insert("schedulerId".into(), json!(self.scheduler_id));
        m.insert("taskGroupId".into(), json!(graph.task_graph_id));
        let mut routes = crate::json::string_list(&task["routes"]);
        let route = crate::routing::task_graph_route(
            &self.scheduler_id,
            &graph.task_graph_id,
            &graph.routing,
        );
        if !routes.contains(&route) {
            routes.push(route);
        }
        task["routes"] = json!(routes);
        crate::schema::validate_input("create-task-request", &mut task).map_err(|err| {
            ApiError::new(
                ErrorCode::InputValidationError,
                format!("task {:?}: {}", e.label, err.message),
            )
        })?;
        Ok(task)
    }

    /// Checks a createTaskGraph body; what authorising it takes is in the result.
    pub fn submission(body: &Value) -> ApiResult<Submission> {
        Ok(Submission {
            entries: parse_entries(&body["tasks"], &|_| false)?,
        })
    }

    /// createTaskGraph, once the caller is authorised for `submission` (of `body`).
    pub async fn create_task_graph(
        &self,
        gid: &TaskId,
        body: &Value,
        submission: &Submission,
        now: Ts,
    ) -> ApiResult<GraphRecord> {
        let gid = gid.as_str();
        let entries = &submission.entries;
        let digest = digest_of(body);

        // The graph first: it fixes the secret the taskIds derive from.
        let graph = match self.graph(gid).await? {
            Some((g, _)) => g,
            None => {
                let required: BTreeSet<&str> = entries
                    .iter()
                    .flat_map(|e| e.requires.iter().map(String::as_str))
                    .collect();
                let salt = crate::ids::new_slugid() + &crate::ids::new_slugid();
                let mut g = GraphRecord {
                    unknown: Default::default(),
                    task_graph_id: gid.to_string(),
                    scheduler_id: self.scheduler_id.clone(),
                    state: state::RUNNING.into(),
                    routing: body["routing"].as_str().unwrap_or_default().to_string(),
                    requires: vec![],
                    requires_left: vec![],
                    metadata: body.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    tags: body.get("tags").cloned().unwrap_or_else(|| json!({})),
                    salt,
                    digest: digest.clone(),
                    created: now,
                    outbox: vec![],
                    sweep: !self.queue.cfg.events_from_stream,
                    held_since: None,
                };
                let leaves: Vec<String> = entries
                    .iter()
                    .filter(|e| !required.contains(e.label.as_str()))
                    .map(|e| g.task_id(&e.label))
                    .collect();
                g.requires = leaves.clone();
                g.requires_left = leaves;
                // Checked before anything is written, so bad input leaves nothing behind.
                for e in entries {
                    self.task_definition(&g, e)?;
                }
                g.emit(Exchange::TaskGraphRunning);
                match self
                    .store()
                    .write(WriteOp::Put {
                        table: TASK_GRAPHS,
                        item: g.item()?,
                        cond: Cond::NotExists,
                    })
                    .await
                {
                    Ok(_) => {
                        self.events_written();
                        g
                    }
                    // Created concurrently: continue with whichever graph won.
                    Err(e) if e.is_condition_failed() => self.existing_graph(gid).await?.0,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if graph.digest != digest {
            return Err(ApiError::conflict(format!(
                "Task graph {gid} already exists with a different definition"
            )));
        }
        let nodes = new_nodes(&graph, entries);
        // Tasks before nodes: a node exists only once its task can be scheduled.
        self.define_tasks(&graph, entries, now).await?;
        self.put_new_nodes(gid, &nodes).await?;
        // Roots now; on a repeat, whatever the first attempt had not scheduled yet.
        let ready: Vec<String> = nodes
            .iter()
            .filter(|n| n.requires.is_empty())
            .map(|n| n.task_id.clone())
            .collect();
        self.schedule_ready(gid, &ready, now).await?;
        Ok(self.existing_graph(gid).await?.0)
    }

    async fn define_tasks(&self, graph: &GraphRecord, entries: &[Entry], now: Ts) -> ApiResult<()> {
        let mut work = Vec::with_capacity(entries.len());
        for e in entries {
            let def = self.task_definition(graph, e)?;
            let id = TaskId::parse(&graph.task_id(&e.label))?;
            work.push((id, def));
        }
        for chunk in work.chunks(CONCURRENCY) {
            futures_util::future::try_join_all(
                chunk
                    .iter()
                    .map(|(id, def)| self.queue.create_task(id, def.clone(), true, now)),
            )
            .await?;
        }
        Ok(())
    }

    /// Writes nodes that do not exist yet (a repeat finds the first attempt's, possibly
    /// already advanced, and leaves them).
    async fn put_new_nodes(&self, gid: &str, nodes: &[TaskNode]) -> ApiResult<()> {
        for chunk in nodes.chunks(CONCURRENCY) {
            let ops = chunk
                .iter()
                .map(|n| Self::node_op(gid, n, Cond::NotExists))
                .collect::<ApiResult<Vec<_>>>()?;
            let results =
                futures_util::future::join_all(ops.into_iter().map(|op| self.store().write(op)))
                    .await;
            for r in results {
                match r {
                    Ok(_) => {}
                    Err(e) if e.is_condition_failed() => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Schedules each task whose node has nothing left to wait for, then records it.
    async fn schedule_ready(&self, gid: &str, task_ids: &[String], now: Ts) -> ApiResult<()> {
        for id in task_ids {
            let Some((node, _)) = self.node(gid, id).await? else {
                continue;
            };
            if node.requires_left.is_empty() && node.state == node_state::UNSCHEDULED {
                self.schedule(gid, id, now).await?;
            }
        }
        Ok(())
    }

    /// scheduleTask on the queue (idempotent there), then the node's state. A task past its
    /// deadline cannot be scheduled: the queue resolves it as exception and that message
    /// blocks the graph.
    async fn schedule(&self, gid: &str, task_id: &str, now: Ts) -> ApiResult<()> {
        let id = TaskId::parse(task_id)?;
        match self.queue.schedule_task(&id, now).await {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::RequestConflict => {
                tracing::info!(task_id, error = %e, "scheduler: task cannot be scheduled");
            }
            Err(e) => return Err(e),
        }
        self.update_node(gid, task_id, |n| {
            if n.state == node_state::UNSCHEDULED {
                n.state = node_state::SCHEDULED.into();
                true
            } else {
                false
            }
        })
        .await?;
        Ok(())
    }

    /// Checks an extendTaskGraph body against the graph as stored (404 for an unknown graph);
    /// what authorising it takes is in the result's submission.
    pub async fn prepare_extension(&self, gid: &TaskId, body: &Value) -> ApiResult<Extension> {
        let gid = gid.as_str();
        let (graph, _) = self.existing_graph(gid).await?;
        // Which labels the graph already has, and their nodes.
        let mut named = BTreeSet::new();
        if let Some(m) = body["tasks"].as_object() {
            for (label, node) in m {
                named.insert(label.clone());
                named.extend(crate::json::string_list(&node["requires"]));
                subs_labels(&node["task"], &mut named);
            }
        }
        let mut existing: HashMap<String, TaskNode> = HashMap::new();
        for label in &named {
            if let Some((node, _)) = self.node(gid, &graph.task_id(label)).await? {
                existing.insert(label.clone(), node);
            }
        }
        let submitted: BTreeSet<String> = body["tasks"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        // A label already in the graph: the same entry again is a repeat of this call.
        let known = |l: &str| existing.contains_key(l) && !submitted.contains(l);
        let entries = parse_entries(&body["tasks"], &known)?;
        Ok(Extension {
            graph,
            existing,
            submission: Submission { entries },
        })
    }

    /// extendTaskGraph (seed operation A), once the caller is authorised for `ext`.
    pub async fn extend_task_graph(&self, ext: Extension, now: Ts) -> ApiResult<GraphRecord> {
        let Extension {
            graph,
            existing,
            submission,
        } = ext;
        let entries = submission.entries;
        let gid = graph.task_graph_id.clone();
        let gid = gid.as_str();
        for e in &entries {
            if let Some(n) = existing.get(&e.label) {
                if n.digest != e.digest {
                    return Err(ApiError::conflict(format!(
                        "Task graph {gid} already has a task labelled {:?}",
                        e.label
                    )));
                }
            }
            self.task_definition(&graph, e)?;
        }
        let new_ids: BTreeSet<String> = entries.iter().map(|e| graph.task_id(&e.label)).collect();
        let required_in_ext: BTreeSet<&str> = entries
            .iter()
            .flat_map(|e| e.requires.iter().map(String::as_str))
            .collect();
        let leaves: Vec<String> = entries
            .iter()
            .filter(|e| !required_in_ext.contains(e.label.as_str()))
            .map(|e| graph.task_id(&e.label))
            .collect();
        // Existing tasks the extension requires, with the new tasks that require each.
        let mut gains: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for e in &entries {
            for r in &e.requires {
                let rid = graph.task_id(r);
                if !new_ids.contains(&rid) {
                    gains.entry(rid).or_default().push(graph.task_id(&e.label));
                }
            }
        }

        // 1. The graph: new leaves join, existing tasks that gained dependents stop being
        //    leaves. Only a running graph can grow.
        let leaves_ref = &leaves;
        let gains_ref = &gains;
        self.update_graph(gid, |g| {
            if g.state != state::RUNNING {
                return Err(ApiError::conflict(format!(
                    "Task graph {gid} is {}; only a running graph can be extended",
                    g.state
                )));
            }
            let before = (g.requires.clone(), g.requires_left.clone());
            g.requires.retain(|t| !gains_ref.contains_key(t));
            g.requires_left.retain(|t| !gains_ref.contains_key(t));
            for l in leaves_ref {
                if !g.requires.contains(l) {
                    g.requires.push(l.clone());
                    g.requires_left.push(l.clone());
                }
            }
            let changed = before != (g.requires.clone(), g.requires_left.clone());
            if changed {
                g.emit(Exchange::TaskGraphExtended);
            }
            Ok(changed)
        })
        .await?;
        // 2. The existing tasks learn of their new dependents (a completion from now on
        //    visits them; one that came earlier is caught in step 5).
        for (rid, deps) in &gains {
            self.update_node(gid, rid, |n| {
                let mut changed = false;
                for d in deps {
                    if !n.dependents.contains(d) {
                        n.dependents.push(d.clone());
                        changed = true;
                    }
                }
                changed
            })
            .await?;
        }
        // 3. The tasks on the queue, 4. their nodes.
        self.define_tasks(&graph, &entries, now).await?;
        let nodes = new_nodes(&graph, &entries);
        self.put_new_nodes(gid, &nodes).await?;
        // 5. Requirements already completed are met; what is left with none is scheduled.
        let mut completed = BTreeSet::new();
        for rid in gains.keys() {
            if let Some((n, _)) = self.node(gid, rid).await? {
                if n.state == node_state::COMPLETED {
                    completed.insert(rid.clone());
                }
            }
        }
        let mut ready = vec![];
        for n in &nodes {
            let after = self
                .update_node(gid, &n.task_id, |node| {
                    let before = node.requires_left.len();
                    node.requires_left.retain(|r| !completed.contains(r));
                    node.requires_left.len() != before
                })
                .await?;
            if after.is_some_and(|a| a.requires_left.is_empty()) {
                ready.push(n.task_id.clone());
            }
        }
        self.schedule_ready(gid, &ready, now).await?;
        Ok(self.existing_graph(gid).await?.0)
    }

    /// The graph's status (404 if unknown).
    pub async fn status(&self, gid: &str) -> ApiResult<GraphRecord> {
        Ok(self.existing_graph(gid).await?.0)
    }

    /// Every task node of the graph, in taskId order.
    pub async fn nodes(&self, gid: &str) -> ApiResult<Vec<TaskNode>> {
        let range = SkRange {
            prefix: Some(SK_GRAPH_TASK_PREFIX.to_string()),
            upto: None,
        };
        let mut out = vec![];
        let mut after = None;
        loop {
            let page = self
                .store()
                .query(TASK_GRAPHS, gid, &range, after.as_ref(), 1000)
                .await?;
            for item in page.items {
                out.push(item.data.decode()?);
            }
            match page.next {
                Some(c) => after = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// One task node (404 if the graph or the task is unknown).
    pub async fn node_of(&self, gid: &str, task_id: &str) -> ApiResult<TaskNode> {
        self.existing_graph(gid).await?;
        self.node(gid, task_id)
            .await?
            .map(|(n, _)| n)
            .ok_or_else(|| ApiError::not_found(format!("Task {task_id} is not in graph {gid}")))
    }

    /// Reacts to one of the queue's `task-completed`, `task-failed` or `task-exception`
    /// messages (seed operations B, C and D). The message's own status says which: only a
    /// resolved task whose resolved run is its last is acted on. Idempotent: each step checks
    /// what is stored before it writes, so a repeated message finishes what an interrupted
    /// one began and changes nothing else.
    pub async fn on_resolution(&self, message: &Value, now: Ts) -> ApiResult<Reaction> {
        let status = &message["status"];
        if status["schedulerId"].as_str() != Some(self.scheduler_id.as_str()) {
            return Ok(Reaction::Ignored);
        }
        let (Some(gid), Some(task_id), Some(run_id)) = (
            status["taskGroupId"].as_str(),
            status["taskId"].as_str(),
            message["runId"].as_u64(),
        ) else {
            return Ok(Reaction::Ignored);
        };
        let run_id = run_id as u32;
        let runs = status["runs"].as_array().map(Vec::len).unwrap_or(0);
        if runs != run_id as usize + 1 {
            // A later run exists: this message is stale.
            return Ok(Reaction::Ignored);
        }
        let Some((node, _)) = self.node(gid, task_id).await? else {
            return Ok(Reaction::Ignored);
        };
        match status["state"].as_str() {
            Some("completed") => self.completed(gid, node, run_id, now).await,
            Some("failed") | Some("exception") => self.failed(gid, node, run_id, now).await,
            // An exception the queue retries itself (a new run is pending).
            _ => Ok(Reaction::Ignored),
        }
    }

    /// [`Scheduler::on_resolution`] for a consumer that must not be blocked by one message:
    /// an error that repeating cannot cure (a client error other than a conflict, such as a
    /// task that expired meanwhile) is logged and the message counts as ignored; anything
    /// else is returned, so the message is delivered again.
    pub async fn consume(&self, message: &Value, now: Ts) -> ApiResult<Reaction> {
        match self.on_resolution(message, now).await {
            Err(e) if e.status() < 500 && e.code != ErrorCode::RequestConflict => {
                tracing::warn!(error = %e, "scheduler: message skipped; repeating it cannot help");
                Ok(Reaction::Ignored)
            }
            other => other,
        }
    }

    /// Operation B.
    async fn completed(
        &self,
        gid: &str,
        node: TaskNode,
        run_id: u32,
        now: Ts,
    ) -> ApiResult<Reaction> {
        let Some(node) = self
            .update_node(gid, &node.task_id, |n| {
                if n.state == node_state::COMPLETED {
                    return false;
                }
                n.state = node_state::COMPLETED.into();
                n.handled_run = Some(run_id);
                true
            })
            .await?
        else {
            return Ok(Reaction::Ignored);
        };
        // Dependents, from the node as written (a concurrent extension's dependents included).
        let mut ready = vec![];
        for d in &node.dependents {
            let after = self
                .update_node(gid, d, |dep| {
                    let before = dep.requires_left.len();
                    dep.requires_left.retain(|r| r != &node.task_id);
                    dep.requires_left.len() != before
                })
                .await?;
            // A dependent not written yet is caught by its extension's last step.
            if after.is_some_and(|a| a.requires_left.is_empty()) {
                ready.push(d.clone());
            }
        }
        self.schedule_ready(gid, &ready, now).await?;
        if node.dependents.is_empty() {
            let tid = node.task_id.clone();
            self.update_graph(gid, |g| {
                if !g.requires_left.contains(&tid) {
                    return Ok(false);
                }
                g.requires_left.retain(|t| t != &tid);
                if g.requires_left.is_empty() && g.state == state::RUNNING {
                    g.state = state::FINISHED.into();
                    g.emit(Exchange::TaskGraphFinished);
                }
                Ok(true)
            })
            .await?;
        }
        Ok(Reaction::Handled)
    }

    /// Operations C and D.
    async fn failed(&self, gid: &str, node: TaskNode, run_id: u32, now: Ts) -> ApiResult<Reaction> {
        if node.state == node_state::COMPLETED {
            return Ok(Reaction::Ignored);
        }
        let fresh = node.handled_run.is_none_or(|h| h < run_id);
        let node = if fresh {
            let Some(n) = self
                .update_node(gid, &node.task_id, |n| {
                    if n.handled_run.is_some_and(|h| h >= run_id) {
                        return false;
                    }
                    n.handled_run = Some(run_id);
                    if n.reruns_left > 0 {
                        n.reruns_left -= 1;
                    } else {
                        n.state = node_state::FAILED.into();
                    }
                    true
                })
                .await?
            else {
                return Ok(Reaction::Ignored);
            };
            n
        } else {
            node
        };
        if node.state != node_state::FAILED {
            // C: a rerun, unless the queue already has a run after this one.
            let id = TaskId::parse(&node.task_id)?;
            let current = self.queue.status(&id, now).await?;
            if current.runs.len() == run_id as usize + 1 && !current.is_unresolved() {
                match self.queue.rerun_task(&id, now).await {
                    Ok(_) => return Ok(Reaction::Handled),
                    // Past its deadline (or out of runs): the task has failed for good.
                    Err(e) if e.code == ErrorCode::RequestConflict => {
                        self.update_node(gid, &node.task_id, |n| {
                            let change = n.state != node_state::FAILED;
                            n.state = node_state::FAILED.into();
                            change
                        })
                        .await?;
                    }
                    Err(e) => return Err(e),
                }
            } else {
                return Ok(Reaction::Handled);
            }
        }
        // D: the graph is blocked.
        self.update_graph(gid, |g| {
            if g.state != state::RUNNING {
                return Ok(false);
            }
            g.state = state::BLOCKED.into();
            g.emit(Exchange::TaskGraphBlocked);
            Ok(true)
        })
        .await?;
        Ok(Reaction::Handled)
    }
}

/// The scheduler as an event sink: the local server adds it to its publisher, so the
/// scheduler consumes the queue's resolution messages in process. An event leaves its outbox
/// only after every sink took it, so a message is "acknowledged" only once the scheduler
/// stored its reaction; a failure leaves it to be delivered again.
pub struct SchedulerSink(pub Arc<Scheduler>);

/// True for the exchanges the scheduler consumes.
pub fn is_resolution_exchange(exchange: &str) -> bool {
    exchange
        .rsplit('/')
        .next()
        .and_then(Exchange::named)
        .is_some_and(Exchange::is_resolution)
}

#[async_trait::async_trait]
impl crate::events::EventSink for SchedulerSink {
    async fn publish(
        &self,
        events: &[crate::events::Event],
    ) -> Result<(), crate::events::SinkError> {
        for e in events
            .iter()
            .filter(|e| is_resolution_exchange(&e.exchange))
        {
            self.0
                .consume(&e.payload, Ts::now())
                .await
                .map_err(|err| crate::events::SinkError::new(format!("scheduler: {err}")))?;
        }
        Ok(())
    }
}
