//! The task-graph scheduler's endpoints (`/api/scheduler/v1/`, seed 001), one Lambda
//! function each.

use super::declare::{Access, Call, Endpoint, Exchanges, Functions, Need, Reply, Service, Verb};
use super::endpoints::monitoring;
use super::endpoints::tasks::{create_task_params, CREATE_TASK_SCOPES};
use super::Api;
use crate::error::{ApiError, ApiResult};
use crate::handler;
use crate::records::graph::{GraphRecord, TASK_GRAPHS};
use crate::records::group::TASK_GROUPS;
use crate::records::task::TASKS;
use crate::routing::{Exchange, SCHEDULER_EXCHANGE_PREFIX};
use crate::scheduler::submission::Submission;
use crate::scopes::ScopeExpr;
use serde_json::Value;

/// Creates or extends a graph, defining and scheduling its tasks on the queue in process.
const WRITE_GRAPHS: &[Need] = &[
    Need::Table(TASK_GRAPHS, Access::Write),
    Need::Table(TASKS, Access::Write),
    Need::Table(TASK_GROUPS, Access::Write),
];
/// Reads graphs.
const READ_GRAPHS: &[Need] = &[Need::Table(TASK_GRAPHS, Access::Read)];

/// The scheduler's own endpoints.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "createTaskGraph",
        Verb::Put,
        "/task-graph/<taskGraphId>",
        handler!(create),
    )
    .title("Submit a task graph")
    .dynamic_scopes(
        "scheduler:create-task-graph, and createTask's scopes for each task of the graph",
    )
    .input("create-task-graph-request")
    .output("task-graph-status-response")
    .needs(WRITE_GRAPHS)
    .long_running(),
    Endpoint::new(
        "extendTaskGraph",
        Verb::Post,
        "/task-graph/<taskGraphId>/extend",
        handler!(extend),
    )
    .title("Add tasks to a running task graph")
    .dynamic_scopes(
        "scheduler:extend-task-graph:<taskGraphId>, and createTask's scopes for each new task",
    )
    .input("extend-task-graph-request")
    .output("task-graph-status-response")
    .needs(WRITE_GRAPHS)
    .long_running(),
    Endpoint::new(
        "status",
        Verb::Get,
        "/task-graph/<taskGraphId>/status",
        handler!(status),
    )
    .title("A task graph's status")
    .output("task-graph-status-response")
    .needs(READ_GRAPHS),
    Endpoint::new(
        "info",
        Verb::Get,
        "/task-graph/<taskGraphId>/info",
        handler!(info),
    )
    .title("A task graph's status, metadata and tags")
    .output("task-graph-info-response")
    .needs(READ_GRAPHS),
    Endpoint::new(
        "inspect",
        Verb::Get,
        "/task-graph/<taskGraphId>/inspect",
        handler!(inspect),
    )
    .title("A task graph and every task in it")
    .output("inspect-task-graph-response")
    .needs(READ_GRAPHS),
    Endpoint::new(
        "inspectTask",
        Verb::Get,
        "/task-graph/<taskGraphId>/inspect/<taskId>",
        handler!(inspect_task),
    )
    .title("One task of a task graph")
    .output("task-graph-task")
    .needs(READ_GRAPHS),
];

/// The task-graph scheduler: `/api/scheduler/v1/`, one function per endpoint, named
/// `scheduler-<endpoint>` (several names are the queue's too).
pub static SCHEDULER: Service = Service {
    name: "scheduler",
    title: "Task-graph scheduler",
    prefix: "/api/scheduler/v1",
    groups: &[monitoring::ENDPOINTS, ENDPOINTS],
    functions: Functions::PerEndpoint {
        prefix: "scheduler",
    },
    exchanges: Some(Exchanges {
        prefix: SCHEDULER_EXCHANGE_PREFIX,
        list: &Exchange::SCHEDULER,
    }),
    serves_documents: false,
    authority: false,
};

/// `own` and createTask's scopes for every task of `submission`.
fn graph_scopes(api: &Api, own: String, submission: &Submission) -> ApiResult<ScopeExpr> {
    let mut needed = vec![ScopeExpr::Scope(own)];
    for (label, body) in submission.task_bodies(&api.scheduler.scheduler_id) {
        let params = create_task_params(&body)
            .map_err(|e| ApiError::input(format!("task {label:?}: {}", e.message)))?;
        needed.push(
            CREATE_TASK_SCOPES
                .render(&params)
                .map_err(ApiError::internal)?,
        );
    }
    Ok(ScopeExpr::AllOf(needed))
}

fn graph_id(call: &Call) -> ApiResult<crate::ids::TaskId> {
    crate::ids::TaskId::parse(call.param("taskGraphId"))
}

/// `{status}`: what the calls that create, extend or read a graph answer.
fn status_reply(graph: &GraphRecord) -> ApiResult<Reply> {
    Reply::ok(crate::json::object([("status", graph.status_json())]))
}

async fn create(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = graph_id(call)?;
    let submission = crate::scheduler::Scheduler::submission(&call.body)?;
    let expr = graph_scopes(api, "scheduler:create-task-graph".into(), &submission)?;
    call.authorize_expr(&expr)?;
    let graph = api
        .scheduler
        .create_task_graph(&gid, &call.body, &submission, call.now)
        .await?;
    status_reply(&graph)
}

async fn extend(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = graph_id(call)?;
    let ext = api.scheduler.prepare_extension(&gid, &call.body).await?;
    let own = format!("scheduler:extend-task-graph:{gid}");
    let expr = graph_scopes(api, own, &ext.submission)?;
    call.authorize_expr(&expr)?;
    let graph = api.scheduler.extend_task_graph(ext, call.now).await?;
    status_reply(&graph)
}

async fn status(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let graph = api.scheduler.status(graph_id(call)?.as_str()).await?;
    status_reply(&graph)
}

async fn info(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let graph = api.scheduler.status(graph_id(call)?.as_str()).await?;
    Reply::ok(Value::Object(graph.info_json()))
}

async fn inspect(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = graph_id(call)?;
    let graph = api.scheduler.status(gid.as_str()).await?;
    let mut nodes = api.scheduler.nodes(gid.as_str()).await?;
    nodes.sort_by(|a, b| a.label.cmp(&b.label));
    let mut m = graph.info_json();
    m.insert(
        "tasks".into(),
        nodes.iter().map(|n| n.to_json()).collect::<Vec<_>>().into(),
    );
    Reply::ok(Value::Object(m))
}

async fn inspect_task(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = graph_id(call)?;
    let node = api
        .scheduler
        .node_of(gid.as_str(), call.param("taskId"))
        .await?;
    Reply::ok(node.to_json())
}
