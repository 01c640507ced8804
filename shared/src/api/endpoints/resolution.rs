//! Changing a task's state: schedule, rerun, cancel, change priority, and the workers'
//! reports.

use super::tasks::status_reply;
use super::WRITE_TASKS;
use crate::api::declare::{Call, Endpoint, Reply, Verb};
use crate::api::Api;
use crate::error::{ApiError, ApiResult};
use crate::handler;
use crate::records::task::{Priority, ReasonResolved, TaskRecord};
use crate::scopes::{Params, Template};
use serde_json::json;

/// The scopes of scheduleTask, rerunTask and cancelTask, for one verb.
macro_rules! task_action {
    ($verb:literal) => {
        Template::AnyOf(&[
            Template::Scope(concat!(
                "queue:",
                $verb,
                "-task:<schedulerId>/<taskGroupId>/<taskId>"
            )),
            Template::Scope(concat!("queue:", $verb, "-task-in-project:<projectId>")),
            Template::AllOf(&[
                Template::Scope(concat!("queue:", $verb, "-task")),
                Template::Scope("assume:scheduler-id:<schedulerId>/<taskGroupId>"),
            ]),
        ])
    };
}

/// Resolving a run.
static RESOLVE_SCOPES: Template = Template::Scope("queue:resolve-task:<taskId>/<runId>");

/// Changes of a task's state.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "scheduleTask",
        Verb::Post,
        "/task/<taskId>/schedule",
        handler!(task_action),
    )
    .title("Make an unscheduled task pending")
    .scopes(task_action!("schedule"))
    .output("task-status-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "rerunTask",
        Verb::Post,
        "/task/<taskId>/rerun",
        handler!(task_action),
    )
    .title("Add a new pending run to a resolved task")
    .scopes(task_action!("rerun"))
    .output("task-status-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "cancelTask",
        Verb::Post,
        "/task/<taskId>/cancel",
        handler!(task_action),
    )
    .title("Resolve an unresolved task as exception (canceled)")
    .scopes(task_action!("cancel"))
    .output("task-status-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "changeTaskPriority",
        Verb::Post,
        "/task/<taskId>/priority",
        handler!(change_priority),
    )
    .title("Change an unresolved task's priority")
    .scopes(Template::AnyOf(&[
        Template::Scope("queue:change-task-priority:<taskId>"),
        Template::Scope("queue:change-task-priority-in-queue:<taskQueueId>"),
    ]))
    .input("change-task-priority-request")
    .output("task-status-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "reportCompleted",
        Verb::Post,
        "/task/<taskId>/runs/<runId>/completed",
        handler!(report),
    )
    .title("Resolve a run as completed")
    .scopes(RESOLVE_SCOPES)
    .output("task-status-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "reportFailed",
        Verb::Post,
        "/task/<taskId>/runs/<runId>/failed",
        handler!(report),
    )
    .title("Resolve a run as failed")
    .scopes(RESOLVE_SCOPES)
    .output("task-status-response")
    .needs(WRITE_TASKS),
    Endpoint::new(
        "reportException",
        Verb::Post,
        "/task/<taskId>/runs/<runId>/exception",
        handler!(report),
    )
    .title("Resolve a run as exception, with a reason")
    .scopes(RESOLVE_SCOPES)
    .input("task-exception-request")
    .output("task-status-response")
    .needs(WRITE_TASKS),
];

/// The scope parameters a task's own fields give.
fn task_params(rec: &TaskRecord) -> Params {
    Params::new()
        .one("taskId", rec.task_id.as_str())
        .one("schedulerId", rec.scheduler_id.as_str())
        .one("taskGroupId", rec.task_group_id.as_str())
        .one("projectId", rec.project_id.as_str())
        .one("taskQueueId", rec.task_queue_id.as_str())
}

/// `scheduleTask`, `rerunTask`, `cancelTask`.
async fn task_action(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (q, id) = (&api.queue, call.task_id()?);
    // The scopes name the task's schedulerId, group and project: 404 comes first, as upstream.
    let rec = q.status(&id, call.now).await?;
    call.authorize(&task_params(&rec))?;
    let rec = match call.endpoint.name {
        "scheduleTask" => q.schedule_task(&id, call.now).await?,
        "rerunTask" => q.rerun_task(&id, call.now).await?,
        _ => q.cancel_task(&id, call.now).await?,
    };
    status_reply(&rec)
}

async fn change_priority(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let id = call.task_id()?;
    let p = Priority::parse(call.body_str("newPriority")).ok_or_else(|| {
        ApiError::input(format!("unknown priority {:?}", call.body["newPriority"]))
    })?;
    let rec = api.queue.status(&id, call.now).await?;
    call.authorize(&task_params(&rec))?;
    status_reply(&api.queue.change_priority(&id, p, call.now).await?)
}

/// `reportCompleted`, `reportFailed`, `reportException`.
async fn report(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (id, run) = (call.task_id()?, call.run_id()?);
    call.authorize(
        &Params::new()
            .one("taskId", id.as_str())
            .one("runId", run.to_string()),
    )?;
    let outcome = match call.endpoint.name {
        // Legacy workers report failure as reportCompleted with {success: false}.
        "reportCompleted" if call.body["success"] == json!(false) => ReasonResolved::Failed,
        "reportCompleted" => ReasonResolved::Completed,
        "reportFailed" => ReasonResolved::Failed,
        _ => ReasonResolved::parse_worker_reason(call.body_str("reason")).ok_or_else(|| {
            ApiError::input(format!(
                "unknown exception reason {:?}",
                call.body["reason"]
            ))
        })?,
    };
    status_reply(&api.queue.resolve(&id, run, outcome, call.now).await?)
}
