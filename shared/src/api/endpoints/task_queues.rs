//! Task queues: what waits and what runs in each.

use super::{READ_TASKS, READ_TASKS_AND_WORKERS};
use crate::api::declare::{Call, Endpoint, Reply, Verb, PAGED};
use crate::api::Api;
use crate::error::ApiResult;
use crate::handler;
use crate::scopes::{Params, Template};
use serde_json::json;

/// Counts and listings of a task queue.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "pendingTasks",
        Verb::Get,
        "/pending/<*taskQueueId>",
        handler!(pending_tasks),
    )
    .title("How many runs of a task queue are pending")
    .scopes(Template::Scope("queue:pending-count:<taskQueueId>"))
    .output("pending-tasks-response")
    .needs(READ_TASKS),
    Endpoint::new(
        "taskQueueCounts",
        Verb::Get,
        "/task-queues/<*taskQueueId>/counts",
        handler!(counts),
    )
    .title("How many runs of a task queue are pending and claimed")
    .scopes(Template::AllOf(&[
        Template::Scope("queue:pending-count:<taskQueueId>"),
        Template::Scope("queue:claimed-count:<taskQueueId>"),
    ]))
    .output("task-queue-counts-response")
    .needs(READ_TASKS),
    Endpoint::new(
        "taskQueueFigures",
        Verb::Get,
        "/task-queues/<*taskQueueId>/figures",
        handler!(figures),
    )
    .title("A task queue's pending and claimed runs, its oldest pending run and its workers (not upstream's)")
    .scopes(Template::AllOf(&[
        Template::Scope("queue:pending-count:<taskQueueId>"),
        Template::Scope("queue:claimed-count:<taskQueueId>"),
        Template::Scope("queue:list-workers:<taskQueueId>"),
    ]))
    .output("task-queue-figures-response")
    .needs(READ_TASKS_AND_WORKERS),
    Endpoint::new(
        "listPendingTasks",
        Verb::Get,
        "/task-queues/<*taskQueueId>/pending",
        handler!(list_pending),
    )
    .title("The pending runs of a task queue, in claim order")
    .scopes(Template::Scope("queue:pending-list:<taskQueueId>"))
    .output("list-pending-tasks-response")
    .query(PAGED)
    .needs(READ_TASKS),
    Endpoint::new(
        "listClaimedTasks",
        Verb::Get,
        "/task-queues/<*taskQueueId>/claimed",
        handler!(list_claimed),
    )
    .title("The claimed runs of a task queue")
    .scopes(Template::Scope("queue:claimed-list:<taskQueueId>"))
    .output("list-claimed-tasks-response")
    .query(PAGED)
    .needs(READ_TASKS),
];

async fn pending_tasks(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let tq = call.task_queue_id()?;
    call.authorize(&Params::new().one("taskQueueId", tq.as_str()))?;
    let n = api.queue.pending_count(&tq).await?;
    Reply::ok(json!({
        "provisionerId": tq.provisioner_id(),
        "workerType": tq.worker_type(),
        "taskQueueId": tq.as_str(),
        "pendingTasks": n,
    }))
}

/// The figures the metrics give per task queue (`queueMetrics`), for one queue.
async fn figures(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let tq = call.task_queue_id()?;
    call.authorize(&Params::new().one("taskQueueId", tq.as_str()))?;
    let f = api.queue.queue_figures(&tq, call.now).await?;
    Reply::ok(f.to_json(&tq, call.now, api.queue.cfg.priority_aging_ms))
}

async fn counts(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let tq = call.task_queue_id()?;
    call.authorize(&Params::new().one("taskQueueId", tq.as_str()))?;
    let (q, tqr) = (&api.queue, &tq);
    let (pending, claimed) = (q.pending_count(tqr).await?, q.claimed_count(tqr).await?);
    Reply::ok(json!({
        "taskQueueId": tq.as_str(),
        "provisionerId": tq.provisioner_id(),
        "workerType": tq.worker_type(),
        "pendingTasks": pending,
        "claimedTasks": claimed,
    }))
}

/// `listPendingTasks`.
async fn list_pending(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    list(api, call, false).await
}

/// `listClaimedTasks`.
async fn list_claimed(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    list(api, call, true).await
}

/// A page of a task queue's pending or claimed runs.
async fn list(api: &Api, call: &mut Call, claimed: bool) -> ApiResult<Reply> {
    let tq = call.task_queue_id()?;
    call.authorize(&Params::new().one("taskQueueId", tq.as_str()))?;
    let (tasks, token) = api.queue.list_queue(&tq, claimed, &call.page()?).await?;
    Reply::page(json!({ "tasks": tasks }), token)
}
