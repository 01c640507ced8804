//! One function per endpoint: parse, authorise (upstream's exact scope expression), call the
//! service, render. No behaviour lives here.

use super::{Api, Call};
use crate::error::{ApiError, ApiResult};
use crate::ids::{parse_run_id, TaskId, TaskQueueId};
use crate::model::{string_list, Priority, ReasonResolved, TaskRecord};
use crate::routes_scopes::*;
use crate::time::Ts;
use serde_json::{json, Value};

use super::routes::Route;

type Reply = ApiResult<(u16, Value)>;

fn ok(v: Value) -> Reply {
    Ok((200, v))
}

fn status_reply(rec: &TaskRecord) -> Reply {
    ok(json!({ "status": rec.status_json() }))
}

fn with_token(mut v: Value, token: Option<String>) -> Value {
    if let Some(t) = token {
        v["continuationToken"] = json!(t);
    }
    v
}

fn task_id(call: &Call) -> ApiResult<TaskId> {
    TaskId::parse(call.param("taskId"))
}

fn run_id(call: &Call) -> ApiResult<u32> {
    parse_run_id(call.param("runId"))
}

fn queue_id(call: &Call) -> ApiResult<TaskQueueId> {
    TaskQueueId::parse(call.param("taskQueueId"))
}

fn body_str<'a>(call: &'a Call, key: &str) -> &'a str {
    call.body[key].as_str().unwrap_or_default()
}

/// Routes a matched call to its handler.
pub(super) async fn dispatch(api: &Api, route: &Route, call: Call) -> Reply {
    let q = &api.queue;
    if let Some(reply) = super::monitoring(api, route.name) {
        return ok(reply);
    }
    match route.name {
        "task" => {
            let id = task_id(&call)?;
            call.caller.authorize(&get_task(id.as_str()))?;
            ok(q.task(&id, call.now).await?)
        }
        "status" => {
            let id = task_id(&call)?;
            call.caller.authorize(&status(id.as_str()))?;
            status_reply(&q.status(&id, call.now).await?)
        }
        "tasks" | "statuses" => {
            let ids = string_list(&call.body["taskIds"]);
            let statuses = route.name == "statuses";
            call.caller.authorize(&many(&ids, statuses))?;
            let (items, token) = q.many(&ids, &call.page()?, statuses, call.now).await?;
            let key = if statuses { "statuses" } else { "tasks" };
            ok(with_token(json!({ key: items }), token))
        }
        "createTask" | "defineTask" => {
            let id = task_id(&call)?;
            let expr = create_task(&call.body).map_err(ApiError::input)?;
            call.caller.authorize(&expr)?;
            let rec = q
                .create_task(&id, call.body, route.name == "defineTask", call.now)
                .await?;
            status_reply(&rec)
        }
        "scheduleTask" | "rerunTask" | "cancelTask" => {
            let id = task_id(&call)?;
            // Upstream needs the task's schedulerId/projectId for the scopes: 404 comes first.
            let rec = q.status(&id, call.now).await?;
            let verb = match route.name {
                "scheduleTask" => "schedule",
                "rerunTask" => "rerun",
                _ => "cancel",
            };
            call.caller.authorize(&task_action(verb, &rec))?;
            let rec = match verb {
                "schedule" => q.schedule_task(&id, call.now).await?,
                "rerun" => q.rerun_task(&id, call.now).await?,
                _ => q.cancel_task(&id, call.now).await?,
            };
            status_reply(&rec)
        }
        "changeTaskPriority" => {
            let id = task_id(&call)?;
            let p = Priority::parse(body_str(&call, "newPriority")).ok_or_else(|| {
                ApiError::input(format!("unknown priority {:?}", call.body["newPriority"]))
            })?;
            let rec = q.status(&id, call.now).await?;
            call.caller
                .authorize(&change_priority(id.as_str(), &rec.task_queue_id))?;
            status_reply(&q.change_priority(&id, p, call.now).await?)
        }
        "claimWork" => {
            let tq = queue_id(&call)?;
            let (wg, wid) = (body_str(&call, "workerGroup"), body_str(&call, "workerId"));
            call.caller.authorize(&claim_work(tq.as_str(), wg, wid))?;
            let count = call.body["tasks"].as_u64().unwrap_or(1).clamp(1, 32) as usize;
            let claims = q.claim_work(&tq, wg, wid, count, &Ts::now).await?;
            ok(json!({ "tasks": claims.iter().map(|c| c.to_json()).collect::<Vec<_>>() }))
        }
        "claimTask" => {
            let (id, run) = (task_id(&call)?, run_id(&call)?);
            let (wg, wid) = (body_str(&call, "workerGroup"), body_str(&call, "workerId"));
            let rec = q.status(&id, call.now).await?;
            call.caller
                .authorize(&claim_task(&rec.task_queue_id, wg, wid))?;
            ok(q.claim_task(&id, run, wg, wid, call.now).await?.to_json())
        }
        "reclaimTask" => {
            let (id, run) = (task_id(&call)?, run_id(&call)?);
            call.caller.authorize(&reclaim_task(id.as_str(), run))?;
            let c = q.reclaim_task(&id, run, call.now).await?;
            let mut v = c.to_json();
            if let Some(o) = v.as_object_mut() {
                o.remove("task");
            }
            ok(v)
        }
        "reportCompleted" | "reportFailed" | "reportException" => {
            let (id, run) = (task_id(&call)?, run_id(&call)?);
            call.caller.authorize(&resolve_task(id.as_str(), run))?;
            let outcome = match route.name {
                // Legacy workers report failure as reportCompleted with {success: false}.
                "reportCompleted" if call.body["success"] == json!(false) => ReasonResolved::Failed,
                "reportCompleted" => ReasonResolved::Completed,
                "reportFailed" => ReasonResolved::Failed,
                _ => ReasonResolved::parse_worker_reason(body_str(&call, "reason")).ok_or_else(
                    || {
                        ApiError::input(format!(
                            "unknown exception reason {:?}",
                            call.body["reason"]
                        ))
                    },
                )?,
            };
            status_reply(&q.resolve(&id, run, outcome, call.now).await?)
        }
        "pendingTasks" => {
            let tq = queue_id(&call)?;
            call.caller.authorize(&pending_count(tq.as_str()))?;
            let n = q.pending_count(&tq).await?;
            ok(json!({
                "provisionerId": tq.provisioner_id(),
                "workerType": tq.worker_type(),
                "taskQueueId": tq.as_str(),
                "pendingTasks": n,
            }))
        }
        "taskQueueCounts" => {
            let tq = queue_id(&call)?;
            call.caller.authorize(&queue_counts(tq.as_str()))?;
            let (pending, claimed) = (q.pending_count(&tq).await?, q.claimed_count(&tq).await?);
            ok(json!({
                "taskQueueId": tq.as_str(),
                "provisionerId": tq.provisioner_id(),
                "workerType": tq.worker_type(),
                "pendingTasks": pending,
                "claimedTasks": claimed,
            }))
        }
        "listPendingTasks" | "listClaimedTasks" => {
            let tq = queue_id(&call)?;
            let claimed = route.name == "listClaimedTasks";
            call.caller.authorize(&list_queue(tq.as_str(), claimed))?;
            let (tasks, token) = q.list_queue(&tq, claimed, &call.page()?).await?;
            ok(with_token(json!({ "tasks": tasks }), token))
        }
        "listDependentTasks" => {
            let id = task_id(&call)?;
            call.caller.authorize(&list_dependents(id.as_str()))?;
            let (tasks, token) = q
                .list_dependents(id.as_str(), &call.page()?, call.now)
                .await?;
            ok(with_token(
                json!({ "taskId": id.as_str(), "tasks": tasks }),
                token,
            ))
        }
        "getTaskGroup" | "listTaskGroup" => {
            let gid = TaskId::parse(call.param("taskGroupId"))?;
            call.caller.authorize(&list_task_group(gid.as_str()))?;
            if route.name == "getTaskGroup" {
                return ok(q.task_group(gid.as_str(), call.now).await?);
            }
            let (v, token) = q
                .list_task_group(gid.as_str(), &call.page()?, call.now)
                .await?;
            ok(with_token(v, token))
        }
        "sealTaskGroup" | "cancelTaskGroup" | "changeTaskGroupPriority" => {
            let gid = TaskId::parse(call.param("taskGroupId"))?;
            let group = q.group_or_404(gid.as_str(), call.now).await?;
            let scheduler = group.data["schedulerId"].as_str().unwrap_or_default();
            let gid = gid.as_str();
            match route.name {
                "sealTaskGroup" => {
                    call.caller.authorize(&seal_task_group(scheduler, gid))?;
                    ok(q.seal_task_group(gid, call.now).await?)
                }
                "cancelTaskGroup" => {
                    // Upstream answers 409 for an unsealed group before it checks scopes.
                    if group.data.get("sealed").is_none_or(Value::is_null) {
                        return Err(ApiError::conflict(format!(
                            "Task group {gid} is not sealed; seal it before cancelling it"
                        )));
                    }
                    call.caller.authorize(&cancel_task_group(scheduler, gid))?;
                    ok(q.cancel_task_group(gid, call.now).await?)
                }
                _ => {
                    let p = Priority::parse(body_str(&call, "newPriority")).ok_or_else(|| {
                        ApiError::input(format!("unknown priority {:?}", call.body["newPriority"]))
                    })?;
                    call.caller
                        .authorize(&change_task_group_priority(scheduler, gid))?;
                    ok(q.change_task_group_priority(gid, p, call.now).await?)
                }
            }
        }
        other => Err(ApiError::internal(format!("route {other} has no handler"))),
    }
}
