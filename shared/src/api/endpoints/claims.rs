//! Claims: workers take pending runs and keep them.

use super::WRITE_TASKS;
use crate::api::declare::{Call, Endpoint, Reply, Reservation, Verb};
use crate::api::Api;
use crate::error::ApiResult;
use crate::handler;
use crate::queue::Claim;
use crate::scopes::{Params, Template};
use crate::time::Ts;
use serde_json::Value;

/// claimWork's deployment: each waiting call holds an instance, so its concurrency is
/// reserved by the template parameter `ClaimWorkConcurrency`, at 128 MB (it waits, mostly;
/// docs/deploying.md's cost table gives the measurement).
pub const CLAIM_WORK: Reservation = Reservation {
    parameter: "ClaimWorkConcurrency",
    memory_mb: 128,
};

/// Claiming and reclaiming runs.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "claimWork",
        Verb::Post,
        "/claim-work/<*taskQueueId>",
        handler!(claim_work),
    )
    .title("Claim pending runs of a task queue, waiting up to 20 s for one")
    .scopes(Template::AllOf(&[
        Template::Scope("queue:claim-work:<taskQueueId>"),
        Template::Scope("queue:worker-id:<workerGroup>/<workerId>"),
    ]))
    .input("claim-work-request")
    .output("claim-work-response")
    .needs(WRITE_TASKS)
    .reserved(CLAIM_WORK)
    .claim_route(),
    Endpoint::new(
        "claimTask",
        Verb::Post,
        "/task/<taskId>/runs/<runId>/claim",
        handler!(claim_task),
    )
    .title("Claim one pending run (deprecated)")
    .scopes(Template::AllOf(&[
        Template::Scope("queue:claim-task:<taskQueueId>"),
        Template::Scope("queue:worker-id:<workerGroup>/<workerId>"),
    ]))
    .input("task-claim-request")
    .output("task-claim-response")
    .needs(WRITE_TASKS)
    .claim_route(),
    Endpoint::new(
        "reclaimTask",
        Verb::Post,
        "/task/<taskId>/runs/<runId>/reclaim",
        handler!(reclaim_task),
    )
    .title("Extend a claim, with fresh credentials")
    .scopes(Template::Scope("queue:reclaim-task:<taskId>/<runId>"))
    .output("task-reclaim-response")
    .needs(WRITE_TASKS)
    .claim_route(),
];

fn worker_params(call: &Call, task_queue_id: &str) -> Params {
    Params::new()
        .one("taskQueueId", task_queue_id)
        .one("workerGroup", call.body_str("workerGroup"))
        .one("workerId", call.body_str("workerId"))
}

async fn claim_work(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let tq = call.task_queue_id()?;
    call.authorize(&worker_params(call, tq.as_str()))?;
    let (wg, wid) = (call.body_str("workerGroup"), call.body_str("workerId"));
    let count = call.body["tasks"].as_u64().unwrap_or(1).clamp(1, 32) as usize;
    let claims = api.queue.claim_work(&tq, wg, wid, count, &Ts::now).await?;
    let tasks = claims.into_iter().map(Claim::into_json).collect();
    Reply::ok(crate::json::object([("tasks", Value::Array(tasks))]))
}

async fn claim_task(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (id, run) = (call.task_id()?, call.run_id()?);
    let rec = api.queue.status(&id, call.now).await?;
    call.authorize(&worker_params(call, &rec.task_queue_id))?;
    let (wg, wid) = (call.body_str("workerGroup"), call.body_str("workerId"));
    let tq = &rec.task_queue_id;
    let claim = api
        .queue
        .claim_task(&id, run, tq, wg, wid, call.now)
        .await?;
    Reply::ok(claim.into_json())
}

async fn reclaim_task(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (id, run) = (call.task_id()?, call.run_id()?);
    call.authorize(
        &Params::new()
            .one("taskId", id.as_str())
            .one("runId", run.to_string()),
    )?;
    let mut v = api
        .queue
        .reclaim_task(&id, run, call.now)
        .await?
        .into_json();
    if let Some(o) = v.as_object_mut() {
        o.remove("task");
    }
    Reply::ok(v)
}
