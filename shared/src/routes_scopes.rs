//! Upstream's scope expression for each endpoint, in one place.

use crate::model::{Priority, TaskRecord};
use crate::scopes::ScopeExpr::{self, AllOf, AnyOf};
use serde_json::Value;

fn s(x: String) -> ScopeExpr {
    ScopeExpr::Scope(x)
}

/// task: `queue:get-task:<taskId>`.
pub fn get_task(task_id: &str) -> ScopeExpr {
    s(format!("queue:get-task:{task_id}"))
}

/// status: `queue:status:<taskId>`.
pub fn status(task_id: &str) -> ScopeExpr {
    s(format!("queue:status:{task_id}"))
}

/// tasks / statuses: one scope per requested id.
pub fn many(ids: &[String], statuses: bool) -> ScopeExpr {
    AllOf(
        ids.iter()
            .map(|id| if statuses { status(id) } else { get_task(id) })
            .collect(),
    )
}

/// createTask (and defineTask). Needs the body; an unusable body is an input error.
pub fn create_task(body: &Value) -> Result<ScopeExpr, String> {
    let list = |k: &str| -> Vec<String> { crate::model::string_list(&body[k]) };
    let queue = match (
        body["taskQueueId"].as_str(),
        body["provisionerId"].as_str(),
        body["workerType"].as_str(),
    ) {
        (Some(q), _, _) => q.to_string(),
        (None, Some(p), Some(w)) => format!("{p}/{w}"),
        _ => return Err("A task needs a taskQueueId, or both provisionerId and workerType".into()),
    };
    let priority =
        Priority::parse(body["priority"].as_str().unwrap_or("lowest")).ok_or("unknown priority")?;
    let mut all: Vec<ScopeExpr> = list("scopes").into_iter().map(s).collect();
    all.extend(
        list("routes")
            .into_iter()
            .map(|r| s(format!("queue:route:{r}"))),
    );
    all.push(s(format!(
        "queue:create-task:project:{}",
        body["projectId"].as_str().unwrap_or("none")
    )));
    all.push(s(format!(
        "queue:scheduler-id:{}",
        body["schedulerId"].as_str().unwrap_or("-")
    )));
    // Any priority at or above the task's own will do.
    let any = Priority::ALL
        .into_iter()
        .filter(|p| p.rank() <= priority.rank())
        .map(|p| s(format!("queue:create-task:{}:{queue}", p.as_str())))
        .collect();
    all.push(AnyOf(any));
    Ok(AllOf(all))
}

/// scheduleTask / rerunTask / cancelTask (`verb` = schedule, rerun, cancel).
pub fn task_action(verb: &str, rec: &TaskRecord) -> ScopeExpr {
    AnyOf(vec![
        s(format!(
            "queue:{verb}-task:{}/{}/{}",
            rec.scheduler_id, rec.task_group_id, rec.task_id
        )),
        s(format!("queue:{verb}-task-in-project:{}", rec.project_id)),
        AllOf(vec![
            s(format!("queue:{verb}-task")),
            s(format!(
                "assume:scheduler-id:{}/{}",
                rec.scheduler_id, rec.task_group_id
            )),
        ]),
    ])
}

/// changeTaskPriority.
pub fn change_priority(task_id: &str, task_queue_id: &str) -> ScopeExpr {
    AnyOf(vec![
        s(format!("queue:change-task-priority:{task_id}")),
        s(format!(
            "queue:change-task-priority-in-queue:{task_queue_id}"
        )),
    ])
}

/// claimWork.
pub fn claim_work(task_queue_id: &str, worker_group: &str, worker_id: &str) -> ScopeExpr {
    AllOf(vec![
        s(format!("queue:claim-work:{task_queue_id}")),
        s(format!("queue:worker-id:{worker_group}/{worker_id}")),
    ])
}

/// claimTask (deprecated).
pub fn claim_task(task_queue_id: &str, worker_group: &str, worker_id: &str) -> ScopeExpr {
    AllOf(vec![
        s(format!("queue:claim-task:{task_queue_id}")),
        s(format!("queue:worker-id:{worker_group}/{worker_id}")),
    ])
}

/// reclaimTask.
pub fn reclaim_task(task_id: &str, run_id: u32) -> ScopeExpr {
    s(format!("queue:reclaim-task:{task_id}/{run_id}"))
}

/// reportCompleted / reportFailed / reportException.
pub fn resolve_task(task_id: &str, run_id: u32) -> ScopeExpr {
    s(format!("queue:resolve-task:{task_id}/{run_id}"))
}

/// pendingTasks.
pub fn pending_count(task_queue_id: &str) -> ScopeExpr {
    s(format!("queue:pending-count:{task_queue_id}"))
}

/// taskQueueCounts.
pub fn queue_counts(task_queue_id: &str) -> ScopeExpr {
    AllOf(vec![
        pending_count(task_queue_id),
        s(format!("queue:claimed-count:{task_queue_id}")),
    ])
}

/// listPendingTasks / listClaimedTasks.
pub fn list_queue(task_queue_id: &str, claimed: bool) -> ScopeExpr {
    let what = if claimed {
        "claimed-list"
    } else {
        "pending-list"
    };
    s(format!("queue:{what}:{task_queue_id}"))
}

/// getTaskGroup / listTaskGroup: `queue:list-task-group:<taskGroupId>`.
pub fn list_task_group(task_group_id: &str) -> ScopeExpr {
    s(format!("queue:list-task-group:{task_group_id}"))
}

/// sealTaskGroup: `queue:seal-task-group:<schedulerId>/<taskGroupId>`.
pub fn seal_task_group(scheduler_id: &str, task_group_id: &str) -> ScopeExpr {
    s(format!(
        "queue:seal-task-group:{scheduler_id}/{task_group_id}"
    ))
}

/// cancelTaskGroup: `queue:cancel-task-group:<schedulerId>/<taskGroupId>`.
pub fn cancel_task_group(scheduler_id: &str, task_group_id: &str) -> ScopeExpr {
    s(format!(
        "queue:cancel-task-group:{scheduler_id}/{task_group_id}"
    ))
}

/// changeTaskGroupPriority: `queue:change-task-group-priority:<schedulerId>/<taskGroupId>`.
pub fn change_task_group_priority(scheduler_id: &str, task_group_id: &str) -> ScopeExpr {
    s(format!(
        "queue:change-task-group-priority:{scheduler_id}/{task_group_id}"
    ))
}

/// listDependentTasks: `queue:list-dependent-tasks:<taskId>`.
pub fn list_dependents(task_id: &str) -> ScopeExpr {
    s(format!("queue:list-dependent-tasks:{task_id}"))
}

/// createArtifact: `queue:create-artifact:<taskId>/<runId>`.
pub fn create_artifact(task_id: &str, run_id: u32) -> ScopeExpr {
    s(format!("queue:create-artifact:{task_id}/{run_id}"))
}

/// getArtifact and friends, once per name reached (the requested one and every link target).
pub fn get_artifact(name: &str) -> ScopeExpr {
    s(format!("queue:get-artifact:{name}"))
}

/// listArtifacts / artifactInfo (`:<runId>` with a run, none for the latest-run variants).
pub fn list_artifacts(task_id: &str, run_id: Option<u32>) -> ScopeExpr {
    match run_id {
        Some(r) => s(format!("queue:list-artifacts:{task_id}:{r}")),
        None => s(format!("queue:list-artifacts:{task_id}")),
    }
}
