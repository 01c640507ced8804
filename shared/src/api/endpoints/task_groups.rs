//! Task groups: read, list, seal, cancel, change priority.

use super::{READ_GROUPS, WRITE_TASKS};
use crate::api::declare::{Call, Endpoint, Reply, Verb, PAGED};
use crate::api::Api;
use crate::error::{ApiError, ApiResult};
use crate::handler;
use crate::records::group::GroupRecord;
use crate::records::task::Priority;
use crate::scopes::{Params, Template};
use serde_json::{json, Value};

/// Reading a task group.
static LIST_SCOPES: Template = Template::Scope("queue:list-task-group:<taskGroupId>");

/// Task groups.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "getTaskGroup",
        Verb::Get,
        "/task-group/<taskGroupId>",
        handler!(get),
    )
    .title("A task group: schedulerId, expires, sealed")
    .scopes(LIST_SCOPES)
    .output("task-group-response")
    .needs(READ_GROUPS),
    Endpoint::new(
        "listTaskGroup",
        Verb::Get,
        "/task-group/<taskGroupId>/list",
        handler!(list),
    )
    .title("The tasks of a task group, in taskId order")
    .scopes(LIST_SCOPES)
    .output("list-task-group-response")
    .query(PAGED)
    .needs(READ_GROUPS),
    Endpoint::new(
        "sealTaskGroup",
        Verb::Post,
        "/task-group/<taskGroupId>/seal",
        handler!(seal),
    )
    .title("Let no more tasks join a task group")
    .scopes(Template::Scope(
        "queue:seal-task-group:<schedulerId>/<taskGroupId>",
    ))
    .output("task-group-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "cancelTaskGroup",
        Verb::Post,
        "/task-group/<taskGroupId>/cancel",
        handler!(cancel),
    )
    .title("Cancel every unresolved task of a sealed task group")
    .scopes(Template::Scope(
        "queue:cancel-task-group:<schedulerId>/<taskGroupId>",
    ))
    .output("cancel-task-group-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "changeTaskGroupPriority",
        Verb::Post,
        "/task-group/<taskGroupId>/priority",
        handler!(change_priority),
    )
    .title("Change the priority of every unresolved task of a task group")
    .scopes(Template::Scope(
        "queue:change-task-group-priority:<schedulerId>/<taskGroupId>",
    ))
    .input("change-task-priority-request")
    .output("task-group-priority-change-response")
    .needs(WRITE_TASKS),
];

fn group_params(group: &GroupRecord) -> Params {
    Params::new()
        .one("taskGroupId", group.task_group_id.as_str())
        .one("schedulerId", group.scheduler_id.as_str())
}

async fn get(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = call.task_group_id()?;
    call.authorize(&Params::new().one("taskGroupId", gid.as_str()))?;
    let group = api.queue.task_group(gid.as_str(), call.now).await?;
    let mut body = group.to_json();
    if let Some(change) = &group.change {
        // This queue's addition: a cancellation or priority change still under way.
        body.insert("change".into(), change.to_json());
    }
    Reply::ok(Value::Object(body))
}

async fn list(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = call.task_group_id()?;
    call.authorize(&Params::new().one("taskGroupId", gid.as_str()))?;
    let (group, tasks, token) = api
        .queue
        .list_task_group(gid.as_str(), &call.page()?, call.now)
        .await?;
    let mut body = group.to_json();
    body.insert("tasks".into(), json!(tasks));
    Reply::page(Value::Object(body), token)
}

async fn seal(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = call.task_group_id()?;
    let group = api.queue.task_group(gid.as_str(), call.now).await?;
    call.authorize(&group_params(&group))?;
    let sealed = api.queue.seal_task_group(gid.as_str(), call.now).await?;
    Reply::ok(Value::Object(sealed.to_json()))
}

async fn cancel(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = call.task_group_id()?;
    let group = api.queue.task_group(gid.as_str(), call.now).await?;
    // Upstream answers 409 for an unsealed group before it checks scopes.
    group.check_cancellable()?;
    call.authorize(&group_params(&group))?;
    Reply::ok(api.queue.cancel_task_group(gid.as_str(), call.now).await?)
}

async fn change_priority(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let gid = call.task_group_id()?;
    let group = api.queue.task_group(gid.as_str(), call.now).await?;
    let p = Priority::parse(call.body_str("newPriority")).ok_or_else(|| {
        ApiError::input(format!("unknown priority {:?}", call.body["newPriority"]))
    })?;
    call.authorize(&group_params(&group))?;
    Reply::ok(
        api.queue
            .change_task_group_priority(gid.as_str(), p, call.now)
            .await?,
    )
}
