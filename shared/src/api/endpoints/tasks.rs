//! Tasks: create, define and read them.

use super::{READ_TASKS, WRITE_TASKS};
use crate::api::declare::{Call, Endpoint, Reply, Verb, PAGED};
use crate::api::Api;
use crate::error::{ApiError, ApiResult};
use crate::handler;
use crate::ids::TaskId;
use crate::json::string_list;
use crate::records::task::{Priority, TaskRecord};
use crate::scopes::{Params, Template};
use serde_json::{json, Value};

/// createTask's scopes (also what the scheduler needs for each task of a graph).
pub(crate) static CREATE_TASK_SCOPES: Template = Template::AllOf(&[
    Template::For {
        var: "scope",
        in_: "scopes",
        each: "<scope>",
    },
    Template::For {
        var: "route",
        in_: "routes",
        each: "queue:route:<route>",
    },
    Template::Scope("queue:create-task:project:<projectId>"),
    Template::Scope("queue:scheduler-id:<schedulerId>"),
    // Any priority at or above the task's own will do.
    Template::AnyOf(&[Template::For {
        var: "priority",
        in_: "priorities",
        each: "queue:create-task:<priority>:<taskQueueId>",
    }]),
]);

/// Tasks: read one or many, create, define.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new("tasks", Verb::Post, "/tasks", handler!(tasks))
        .title("The definitions of many tasks")
        .scopes(Template::For {
            var: "taskId",
            in_: "taskIds",
            each: "queue:get-task:<taskId>",
        })
        .input("tasks-request")
        .output("tasks-response")
        .query(PAGED)
        .needs(READ_TASKS),
    Endpoint::new("statuses", Verb::Post, "/tasks/status", handler!(statuses))
        .title("The statuses of many tasks")
        .scopes(Template::For {
            var: "taskId",
            in_: "taskIds",
            each: "queue:status:<taskId>",
        })
        .input("tasks-request")
        .output("tasks-statuses-response")
        .query(PAGED)
        .needs(READ_TASKS),
    Endpoint::new("task", Verb::Get, "/task/<taskId>", handler!(task))
        .title("A task's definition")
        .scopes(Template::Scope("queue:get-task:<taskId>"))
        .output("task")
        .needs(READ_TASKS),
    Endpoint::new(
        "status",
        Verb::Get,
        "/task/<taskId>/status",
        handler!(status),
    )
    .title("A task's status")
    .scopes(Template::Scope("queue:status:<taskId>"))
    .output("task-status-response")
    .needs(READ_TASKS),
    Endpoint::new(
        "createTask",
        Verb::Put,
        "/task/<taskId>",
        handler!(create_task),
    )
    .title("Create a task (pending once its dependencies are met)")
    .scopes(CREATE_TASK_SCOPES)
    .input("create-task-request")
    .output("task-status-response")
    .needs(WRITE_TASKS)
    .long_running(),
    Endpoint::new(
        "defineTask",
        Verb::Post,
        "/task/<taskId>/define",
        handler!(define_task),
    )
    .title("Create a task that stays unscheduled until scheduleTask")
    .scopes(CREATE_TASK_SCOPES)
    .input("create-task-request")
    .output("task-status-response")
    .needs(WRITE_TASKS)
    .long_running(),
];

/// `{status}`: what every call that changes a task answers.
pub(crate) fn status_reply(rec: &TaskRecord) -> ApiResult<Reply> {
    Reply::ok(crate::json::object([("status", rec.status_json())]))
}

async fn task(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let id = call.task_id()?;
    call.authorize(&Params::new().one("taskId", id.as_str()))?;
    Reply::ok(api.queue.task(&id, call.now).await?)
}

async fn status(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let id = call.task_id()?;
    call.authorize(&Params::new().one("taskId", id.as_str()))?;
    status_reply(&api.queue.status(&id, call.now).await?)
}

async fn tasks(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    many(api, call, false).await
}

async fn statuses(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    many(api, call, true).await
}

/// `tasks` and `statuses`.
async fn many(api: &Api, call: &mut Call, statuses: bool) -> ApiResult<Reply> {
    let ids = string_list(&call.body["taskIds"]);
    call.authorize(&Params::new().many("taskIds", ids.clone()))?;
    let (items, token) = api
        .queue
        .many(&ids, &call.page()?, statuses, call.now)
        .await?;
    let key = if statuses { "statuses" } else { "tasks" };
    Reply::page(json!({ key: items }), token)
}

/// createTask's scope parameters, from a task definition (a createTask body, or a task of a
/// graph); an unusable body is an input error.
pub(crate) fn create_task_params(body: &Value) -> ApiResult<Params> {
    let queue = match (
        body["taskQueueId"].as_str(),
        body["provisionerId"].as_str(),
        body["workerType"].as_str(),
    ) {
        (Some(q), _, _) => q.to_string(),
        (None, Some(p), Some(w)) => format!("{p}/{w}"),
        _ => {
            return Err(ApiError::input(
                "A task needs a taskQueueId, or both provisionerId and workerType",
            ))
        }
    };
    let priority = Priority::parse(body["priority"].as_str().unwrap_or("lowest"))
        .ok_or_else(|| ApiError::input("unknown priority"))?;
    let at_or_above = Priority::ALL
        .into_iter()
        .filter(|p| p.rank() <= priority.rank())
        .map(|p| p.as_str().to_string())
        .collect();
    Ok(Params::new()
        .many("scopes", string_list(&body["scopes"]))
        .many("routes", string_list(&body["routes"]))
        .one("projectId", body["projectId"].as_str().unwrap_or("none"))
        .one("schedulerId", body["schedulerId"].as_str().unwrap_or("-"))
        .many("priorities", at_or_above)
        .one("taskQueueId", queue))
}

async fn create_task(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    create_or_define(api, call, false).await
}

async fn define_task(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    create_or_define(api, call, true).await
}

/// `createTask` and `defineTask`.
async fn create_or_define(api: &Api, call: &mut Call, define_only: bool) -> ApiResult<Reply> {
    let id: TaskId = call.task_id()?;
    call.authorize(&create_task_params(&call.body)?)?;
    let body = std::mem::take(&mut call.body);
    status_reply(
        &api.queue
            .create_task(&id, body, define_only, call.now)
            .await?,
    )
}

/// Dependencies: the tasks that depend on one.
pub static DEPENDENTS: &[Endpoint] = &[Endpoint::new(
    "listDependentTasks",
    Verb::Get,
    "/task/<taskId>/dependents",
    handler!(list_dependents),
)
.title("The tasks that list a task among their dependencies")
.scopes(Template::Scope("queue:list-dependent-tasks:<taskId>"))
.output("list-dependent-tasks-response")
.query(PAGED)
.needs(READ_TASKS)];

async fn list_dependents(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let id = call.task_id()?;
    call.authorize(&Params::new().one("taskId", id.as_str()))?;
    let (tasks, token) = api
        .queue
        .list_dependents(id.as_str(), &call.page()?, call.now)
        .await?;
    Reply::page(json!({ "taskId": id.as_str(), "tasks": tasks }), token)
}
