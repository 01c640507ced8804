//! The task-graph scheduler's endpoints (`/api/scheduler/v1/`): call the
//! [`crate::scheduler::Scheduler`], render. No behaviour lives here.

use super::routes::Route;
use super::{Api, Call};
use crate::error::{ApiError, ApiResult};
use crate::ids::TaskId;
use serde_json::{json, Value};

type Reply = ApiResult<(u16, Value)>;

pub(super) async fn dispatch(api: &Api, route: &Route, call: Call) -> Reply {
    let s = &api.scheduler;
    if let Some(reply) = super::monitoring(api, route.name) {
        return Ok((200, reply));
    }
    let gid = TaskId::parse(call.param("taskGraphId"))?;
    let status = |g: &crate::scheduler::GraphRecord| json!({ "status": g.status_json() });
    let reply = match route.name {
        "createTaskGraph" => status(
            &s.create_task_graph(&gid, call.body, &call.caller, call.now)
                .await?,
        ),
        "extendTaskGraph" => status(
            &s.extend_task_graph(&gid, call.body, &call.caller, call.now)
                .await?,
        ),
        "status" => status(&s.status(gid.as_str()).await?),
        "info" => Value::Object(crate::scheduler::info_json(&s.status(gid.as_str()).await?)),
        "inspect" => {
            let graph = s.status(gid.as_str()).await?;
            let mut nodes = s.nodes(gid.as_str()).await?;
            nodes.sort_by(|a, b| a.label.cmp(&b.label));
            let mut m = crate::scheduler::info_json(&graph);
            m.insert(
                "tasks".into(),
                nodes.iter().map(|n| n.to_json()).collect::<Vec<_>>().into(),
            );
            Value::Object(m)
        }
        "inspectTask" => s
            .node_of(gid.as_str(), call.param("taskId"))
            .await?
            .to_json(),
        other => return Err(ApiError::internal(format!("no handler for {other}"))),
    };
    Ok((200, reply))
}
