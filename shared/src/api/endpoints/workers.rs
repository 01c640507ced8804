//! Worker metadata: the task queues, provisioners, worker types and workers that claims
//! show, and quarantine. Every scope is filled from the URL alone, so it is checked before
//! any lookup (403 before 404), as upstream's.

use super::{READ_WORKERS, WRITE_WORKERS};
use crate::api::declare::{Call, Endpoint, Reply, Verb, PAGED};
use crate::api::Api;
use crate::error::{ApiError, ApiResult};
use crate::handler;
use crate::ids::TaskQueueId;
use crate::queue::workers::WorkerKey;
use crate::scopes::{Params, Template};
use crate::time::Ts;
use serde_json::json;

const WORKER_ROUTE: &str =
    "/provisioners/<provisionerId>/worker-types/<workerType>/workers/<workerGroup>/<workerId>";

/// Provisioners, worker types and workers (upstream's deprecated but still used names).
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "listProvisioners",
        Verb::Get,
        "/provisioners",
        handler!(list_provisioners),
    )
    .title("The provisioners of the task queues that live")
    .scopes(Template::Scope("queue:list-provisioners"))
    .output("list-provisioners-response")
    .query(PAGED)
    .needs(READ_WORKERS),
    Endpoint::new(
        "getProvisioner",
        Verb::Get,
        "/provisioners/<provisionerId>",
        handler!(get_provisioner),
    )
    .title("A provisioner, from its task queues")
    .scopes(Template::Scope("queue:get-provisioner:<provisionerId>"))
    .output("provisioner-response")
    .needs(READ_WORKERS),
    Endpoint::new(
        "listWorkerTypes",
        Verb::Get,
        "/provisioners/<provisionerId>/worker-types",
        handler!(list_worker_types),
    )
    .title("The worker types of a provisioner (its task queues)")
    .scopes(Template::Scope("queue:list-worker-types:<provisionerId>"))
    .output("list-workertypes-response")
    .query(PAGED)
    .needs(READ_WORKERS),
    Endpoint::new(
        "getWorkerType",
        Verb::Get,
        "/provisioners/<provisionerId>/worker-types/<workerType>",
        handler!(get_worker_type),
    )
    .title("A worker type (a task queue)")
    .scopes(Template::Scope(
        "queue:get-worker-type:<provisionerId>/<workerType>",
    ))
    .output("workertype-response")
    .needs(READ_WORKERS),
    Endpoint::new(
        "listWorkers",
        Verb::Get,
        "/provisioners/<provisionerId>/worker-types/<workerType>/workers",
        handler!(list_workers),
    )
    .title("The workers seen on a task queue, quarantined or not")
    .scopes(Template::Scope(
        "queue:list-workers:<provisionerId>/<workerType>",
    ))
    .output("list-workers-response")
    .query(&["continuationToken", "limit", "quarantined"])
    .needs(READ_WORKERS),
    Endpoint::new("getWorker", Verb::Get, WORKER_ROUTE, handler!(get_worker))
        .title("A worker: when it was seen, what it claimed lately, its quarantine")
        .scopes(Template::Scope(
            "queue:get-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
        ))
        .output("worker-response")
        .needs(READ_WORKERS),
    Endpoint::new(
        "quarantineWorker",
        Verb::Put,
        WORKER_ROUTE,
        handler!(quarantine_worker),
    )
    .title("Quarantine a worker (it claims nothing) until a time; a past time lifts it")
    .scopes(Template::Scope(
        "queue:quarantine-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>",
    ))
    .input("quarantine-worker-request")
    .output("worker-response")
    .needs(WRITE_WORKERS),
    Endpoint::new(
        "declareWorker",
        Verb::Put,
        "/provisioners/<provisionerId>/worker-types/<workerType>/<workerGroup>/<workerId>",
        handler!(declare_worker),
    )
    .title("Declare a worker (and its task queue) alive until a time")
    .scopes(Template::For {
        var: "property",
        in_: "properties",
        each:
            "queue:declare-worker:<provisionerId>/<workerType>/<workerGroup>/<workerId>#<property>",
    })
    .input("update-worker-request")
    .output("worker-response")
    .needs(WRITE_WORKERS),
];

/// The task queues themselves (declared after the other `/task-queues/...` routes, which
/// getTaskQueue's spanning parameter would otherwise take).
pub static TASK_QUEUES: &[Endpoint] = &[
    Endpoint::new(
        "listTaskQueues",
        Verb::Get,
        "/task-queues",
        handler!(list_task_queues),
    )
    .title("The task queues that live")
    .scopes(Template::Scope("queue:list-task-queues"))
    .output("list-taskqueues-response")
    .query(PAGED)
    .needs(READ_WORKERS),
    Endpoint::new(
        "getTaskQueue",
        Verb::Get,
        "/task-queues/<*taskQueueId>",
        handler!(get_task_queue),
    )
    .title("A task queue")
    .scopes(Template::Scope("queue:get-task-queue:<taskQueueId>"))
    .output("taskqueue-response")
    .needs(READ_WORKERS),
];

/// The URL's parameters, for the scopes and the lookups.
fn url_params(call: &Call) -> Params {
    let mut p = Params::new();
    for name in ["provisionerId", "workerType", "workerGroup", "workerId"] {
        p = p.one(name, call.param(name));
    }
    p
}

fn task_queue_of(call: &Call) -> ApiResult<TaskQueueId> {
    TaskQueueId::from_parts(call.param("provisionerId"), call.param("workerType"))
}

fn worker_key<'a>(call: &'a Call, tq: &'a TaskQueueId) -> WorkerKey<'a> {
    (
        tq.as_str(),
        call.param("workerGroup"),
        call.param("workerId"),
    )
}

async fn list_provisioners(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&Params::new())?;
    let (provisioners, token) = api
        .queue
        .provisioners(None, &call.page()?, call.now)
        .await?;
    Reply::page(json!({ "provisioners": provisioners }), token)
}

async fn get_provisioner(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&url_params(call))?;
    let id = call.param("provisionerId");
    let page = crate::page::PageReq {
        limit: 1,
        token: None,
    };
    let (mut found, _) = api.queue.provisioners(Some(id), &page, call.now).await?;
    match found.pop() {
        Some(p) => Reply::ok(p),
        None => Err(ApiError::not_found(format!("Provisioner {id} not found"))),
    }
}

async fn list_worker_types(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&url_params(call))?;
    let prov = call.param("provisionerId");
    let (queues, token) = api
        .queue
        .list_task_queues(Some(prov), &call.page()?, call.now)
        .await?;
    let types: Vec<_> = queues.iter().map(|q| q.worker_type_json()).collect();
    Reply::page(json!({ "workerTypes": types }), token)
}

async fn get_worker_type(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&url_params(call))?;
    let tq = task_queue_of(call)?;
    match api.queue.task_queue(tq.as_str(), call.now).await? {
        Some(q) => Reply::ok(q.worker_type_json()),
        None => Err(ApiError::not_found(format!(
            "Worker type {} of provisioner {} not found",
            tq.worker_type(),
            tq.provisioner_id()
        ))),
    }
}

async fn list_workers(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&url_params(call))?;
    let quarantined = match call.query_arg("quarantined") {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(ApiError::bad_argument(format!(
                "quarantined {other:?} must match ^(true|false)$"
            )))
        }
    };
    let tq = task_queue_of(call)?;
    let (workers, token) = api
        .queue
        .list_workers(tq.as_str(), quarantined, &call.page()?, call.now)
        .await?;
    Reply::page(json!({ "workers": workers }), token)
}

async fn get_worker(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&url_params(call))?;
    let tq = task_queue_of(call)?;
    let w = api
        .queue
        .get_worker(worker_key(call, &tq), call.now)
        .await?;
    Reply::ok(w.to_json())
}

async fn quarantine_worker(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&url_params(call))?;
    let tq = task_queue_of(call)?;
    let until = call.body_str("quarantineUntil");
    let until = Ts::parse(until)
        .ok_or_else(|| ApiError::input(format!("quarantineUntil {until:?} is not a date")))?;
    let info = call.body["quarantineInfo"]
        .as_str()
        .unwrap_or("[unspecified]");
    let client = call.caller.client_id.clone().unwrap_or_default();
    let w = api
        .queue
        .quarantine_worker(worker_key(call, &tq), until, info, &client, call.now)
        .await?;
    Reply::ok(w.to_json())
}

async fn declare_worker(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let properties: Vec<String> = call
        .body
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    call.authorize(&url_params(call).many("properties", properties))?;
    let tq = task_queue_of(call)?;
    let expires = call.body_str("expires");
    let expires = Ts::parse(expires)
        .ok_or_else(|| ApiError::input(format!("expires {expires:?} is not a date")))?;
    let w = api
        .queue
        .declare_worker(worker_key(call, &tq), expires, call.now)
        .await?;
    Reply::ok(w.to_json())
}

async fn list_task_queues(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&Params::new())?;
    let (queues, token) = api
        .queue
        .list_task_queues(None, &call.page()?, call.now)
        .await?;
    let queues: Vec<_> = queues.iter().map(|q| q.to_json()).collect();
    Reply::page(json!({ "taskQueues": queues }), token)
}

async fn get_task_queue(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let tq = call.task_queue_id()?;
    call.authorize(&Params::new().one("taskQueueId", tq.as_str()))?;
    match api.queue.task_queue(tq.as_str(), call.now).await? {
        Some(q) => Reply::ok(q.to_json()),
        None => Err(ApiError::not_found(format!("Task queue {tq} not found"))),
    }
}
