//! The route table: one declared line per endpoint (name, method, route, schemas), and the
//! matcher. `<*name>` is a splat that may span `/` (raw or `%2F`).

use crate::error::ApiError;
use crate::ids::{is_identifier, parse_run_id, TaskId, TaskQueueId};
use http::Method;
use std::collections::HashMap;

/// One endpoint's declaration.
#[derive(Debug)]
pub struct Route {
    /// Upstream's endpoint name (also the Lambda function it is served by).
    pub name: &'static str,
    /// HTTP method.
    pub method: Method,
    /// Route under the prefix, with `<param>` and `<*splat>`.
    pub pattern: &'static str,
    /// Input schema name.
    pub input: Option<&'static str>,
    /// Output schema name.
    pub output: Option<&'static str>,
}

macro_rules! route {
    ($name:literal, $m:ident, $p:literal, $in:expr, $out:expr) => {
        Route {
            name: $name,
            method: Method::$m,
            pattern: $p,
            input: $in,
            output: $out,
        }
    };
}

/// Every endpoint, in matching order.
pub static ROUTES: &[Route] = &[
    route!("ping", GET, "/ping", None, Some("ping-response")),
    route!("lbheartbeat", GET, "/__lbheartbeat__", None, None),
    route!("version", GET, "/__version__", None, None),
    route!("heartbeat", GET, "/__heartbeat__", None, None),
    route!(
        "tasks",
        POST,
        "/tasks",
        Some("tasks-request"),
        Some("tasks-response")
    ),
    route!(
        "statuses",
        POST,
        "/tasks/status",
        Some("tasks-request"),
        Some("tasks-statuses-response")
    ),
    route!("task", GET, "/task/<taskId>", None, Some("task")),
    route!(
        "status",
        GET,
        "/task/<taskId>/status",
        None,
        Some("task-status-response")
    ),
    route!(
        "createTask",
        PUT,
        "/task/<taskId>",
        Some("create-task-request"),
        Some("task-status-response")
    ),
    route!(
        "defineTask",
        POST,
        "/task/<taskId>/define",
        Some("create-task-request"),
        Some("task-status-response")
    ),
    route!(
        "scheduleTask",
        POST,
        "/task/<taskId>/schedule",
        None,
        Some("task-status-response")
    ),
    route!(
        "rerunTask",
        POST,
        "/task/<taskId>/rerun",
        None,
        Some("task-status-response")
    ),
    route!(
        "cancelTask",
        POST,
        "/task/<taskId>/cancel",
        None,
        Some("task-status-response")
    ),
    route!(
        "changeTaskPriority",
        POST,
        "/task/<taskId>/priority",
        Some("change-task-priority-request"),
        Some("task-status-response")
    ),
    route!(
        "claimWork",
        POST,
        "/claim-work/<*taskQueueId>",
        Some("claim-work-request"),
        Some("claim-work-response")
    ),
    route!(
        "claimTask",
        POST,
        "/task/<taskId>/runs/<runId>/claim",
        Some("task-claim-request"),
        Some("task-claim-response")
    ),
    route!(
        "reclaimTask",
        POST,
        "/task/<taskId>/runs/<runId>/reclaim",
        None,
        Some("task-reclaim-response")
    ),
    route!(
        "reportCompleted",
        POST,
        "/task/<taskId>/runs/<runId>/completed",
        None,
        Some("task-status-response")
    ),
    route!(
        "reportFailed",
        POST,
        "/task/<taskId>/runs/<runId>/failed",
        None,
        Some("task-status-response")
    ),
    route!(
        "reportException",
        POST,
        "/task/<taskId>/runs/<runId>/exception",
        Some("task-exception-request"),
        Some("task-status-response")
    ),
    route!(
        "pendingTasks",
        GET,
        "/pending/<*taskQueueId>",
        None,
        Some("pending-tasks-response")
    ),
    route!(
        "taskQueueCounts",
        GET,
        "/task-queues/<*taskQueueId>/counts",
        None,
        Some("task-queue-counts-response")
    ),
    route!(
        "listPendingTasks",
        GET,
        "/task-queues/<*taskQueueId>/pending",
        None,
        Some("list-pending-tasks-response")
    ),
    route!(
        "listClaimedTasks",
        GET,
        "/task-queues/<*taskQueueId>/claimed",
        None,
        Some("list-claimed-tasks-response")
    ),
    route!(
        "listDependentTasks",
        GET,
        "/task/<taskId>/dependents",
        None,
        Some("list-dependent-tasks-response")
    ),
    route!(
        "getTaskGroup",
        GET,
        "/task-group/<taskGroupId>",
        None,
        Some("task-group-response")
    ),
    route!(
        "listTaskGroup",
        GET,
        "/task-group/<taskGroupId>/list",
        None,
        Some("list-task-group-response")
    ),
    route!(
        "sealTaskGroup",
        POST,
        "/task-group/<taskGroupId>/seal",
        None,
        Some("task-group-response")
    ),
    route!(
        "cancelTaskGroup",
        POST,
        "/task-group/<taskGroupId>/cancel",
        None,
        Some("cancel-task-group-response")
    ),
    route!(
        "changeTaskGroupPriority",
        POST,
        "/task-group/<taskGroupId>/priority",
        Some("change-task-priority-request"),
        Some("task-group-priority-change-response")
    ),
    // Artifacts (handlers in artifact_handlers.rs).
    route!(
        "createArtifact",
        POST,
        "/task/<taskId>/runs/<runId>/artifacts/<*name>",
        Some("post-artifact-request"),
        Some("post-artifact-response")
    ),
    route!(
        "getArtifact",
        GET,
        "/task/<taskId>/runs/<runId>/artifacts/<*name>",
        None,
        Some("get-artifact-response")
    ),
    route!(
        "getLatestArtifact",
        GET,
        "/task/<taskId>/artifacts/<*name>",
        None,
        Some("get-artifact-response")
    ),
    route!(
        "listArtifacts",
        GET,
        "/task/<taskId>/runs/<runId>/artifacts",
        None,
        Some("list-artifacts-response")
    ),
    route!(
        "listLatestArtifacts",
        GET,
        "/task/<taskId>/artifacts",
        None,
        Some("list-artifacts-response")
    ),
    route!(
        "artifactInfo",
        GET,
        "/task/<taskId>/runs/<runId>/artifact-info/<*name>",
        None,
        Some("artifact-response")
    ),
    route!(
        "latestArtifactInfo",
        GET,
        "/task/<taskId>/artifact-info/<*name>",
        None,
        Some("artifact-response")
    ),
    route!(
        "artifact",
        GET,
        "/task/<taskId>/runs/<runId>/artifact-content/<*name>",
        None,
        Some("artifact-content-response")
    ),
    route!(
        "latestArtifact",
        GET,
        "/task/<taskId>/artifact-content/<*name>",
        None,
        Some("artifact-content-response")
    ),
];

/// Every endpoint of the task-graph scheduler (served under [`super::SCHEDULER_PREFIX`]).
pub static SCHEDULER_ROUTES: &[Route] = &[
    route!("ping", GET, "/ping", None, Some("ping-response")),
    route!("lbheartbeat", GET, "/__lbheartbeat__", None, None),
    route!("version", GET, "/__version__", None, None),
    route!("heartbeat", GET, "/__heartbeat__", None, None),
    route!(
        "createTaskGraph",
        PUT,
        "/task-graph/<taskGraphId>",
        Some("create-task-graph-request"),
        Some("task-graph-status-response")
    ),
    route!(
        "extendTaskGraph",
        POST,
        "/task-graph/<taskGraphId>/extend",
        Some("extend-task-graph-request"),
        Some("task-graph-status-response")
    ),
    route!(
        "status",
        GET,
        "/task-graph/<taskGraphId>/status",
        None,
        Some("task-graph-status-response")
    ),
    route!(
        "info",
        GET,
        "/task-graph/<taskGraphId>/info",
        None,
        Some("task-graph-info-response")
    ),
    route!(
        "inspect",
        GET,
        "/task-graph/<taskGraphId>/inspect",
        None,
        Some("inspect-task-graph-response")
    ),
    route!(
        "inspectTask",
        GET,
        "/task-graph/<taskGraphId>/inspect/<taskId>",
        None,
        Some("task-graph-task")
    ),
];

/// Every endpoint of the auth service (served under [`super::AUTH_PREFIX`]).
pub static AUTH_ROUTES: &[Route] = &[
    route!("ping", GET, "/ping", None, Some("ping-response")),
    route!("lbheartbeat", GET, "/__lbheartbeat__", None, None),
    route!("version", GET, "/__version__", None, None),
    route!("heartbeat", GET, "/__heartbeat__", None, None),
    route!(
        "listClients",
        GET,
        "/clients/",
        None,
        Some("list-clients-response")
    ),
    route!(
        "client",
        GET,
        "/clients/<clientId>",
        None,
        Some("get-client-response")
    ),
    route!(
        "createClient",
        PUT,
        "/clients/<clientId>",
        Some("create-client-request"),
        Some("create-client-response")
    ),
    route!(
        "resetAccessToken",
        POST,
        "/clients/<clientId>/reset",
        None,
        Some("create-client-response")
    ),
    route!(
        "enableClient",
        POST,
        "/clients/<clientId>/enable",
        None,
        Some("get-client-response")
    ),
    route!(
        "disableClient",
        POST,
        "/clients/<clientId>/disable",
        None,
        Some("get-client-response")
    ),
    route!("deleteClient", DELETE, "/clients/<clientId>", None, None),
    route!(
        "listRoles",
        GET,
        "/roles/",
        None,
        Some("list-roles-response")
    ),
    route!(
        "role",
        GET,
        "/roles/<roleId>",
        None,
        Some("get-role-response")
    ),
    route!(
        "createRole",
        PUT,
        "/roles/<roleId>",
        Some("create-role-request"),
        Some("get-role-response")
    ),
    route!("deleteRole", DELETE, "/roles/<roleId>", None, None),
    route!(
        "expandScopes",
        POST,
        "/scopes/expand",
        Some("scopeset"),
        Some("scopeset")
    ),
    route!(
        "currentScopes",
        GET,
        "/scopes/current",
        None,
        Some("scopeset")
    ),
    route!(
        "authenticateHawk",
        POST,
        "/authenticate-hawk",
        Some("authenticate-hawk-request"),
        Some("authenticate-hawk-response")
    ),
    route!(
        "testAuthenticate",
        POST,
        "/test-authenticate",
        Some("test-authenticate-request"),
        Some("test-authenticate-response")
    ),
    route!(
        "testAuthenticateGet",
        GET,
        "/test-authenticate-get/",
        None,
        Some("test-authenticate-response")
    ),
];

fn decode(seg: &str) -> String {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8_lossy()
        .into_owned()
}

/// Binds one pattern segment: a literal must be equal, a parameter must be non-empty.
fn bind(out: &mut HashMap<&'static str, String>, p: &'static str, v: String) -> bool {
    match p.strip_prefix('<').and_then(|p| p.strip_suffix('>')) {
        Some(name) if !v.is_empty() => {
            out.insert(name.trim_start_matches('*'), v);
            true
        }
        Some(_) => false,
        None => p == v,
    }
}

/// Matches a raw path (under the prefix) against one pattern.
fn match_route(pattern: &'static str, path: &str) -> Option<HashMap<&'static str, String>> {
    let pat: Vec<&'static str> = pattern.trim_start_matches('/').split('/').collect();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut out = HashMap::new();
    let Some(i) = pat.iter().position(|p| p.starts_with("<*")) else {
        if pat.len() != segs.len() {
            return None;
        }
        return pat
            .iter()
            .zip(&segs)
            .all(|(p, s)| bind(&mut out, p, decode(s)))
            .then_some(out);
    };
    let after = pat.len() - i - 1;
    if segs.len() < pat.len() {
        return None;
    }
    let head_ok = pat[..i]
        .iter()
        .zip(&segs[..i])
        .all(|(p, s)| bind(&mut out, p, decode(s)));
    let tail_ok = pat[i + 1..]
        .iter()
        .zip(&segs[segs.len() - after..])
        .all(|(p, s)| bind(&mut out, p, decode(s)));
    let middle = segs[i..segs.len() - after]
        .iter()
        .map(|s| decode(s))
        .collect::<Vec<_>>()
        .join("/");
    (head_ok && tail_ok && bind(&mut out, pat[i], middle)).then_some(out)
}

/// Finds the queue endpoint for a method and raw path.
pub fn find(
    method: &Method,
    path: &str,
) -> Option<(&'static Route, HashMap<&'static str, String>)> {
    find_in(ROUTES, method, path)
}

/// Finds the endpoint of `table` for a method and raw path.
pub fn find_in(
    table: &'static [Route],
    method: &Method,
    path: &str,
) -> Option<(&'static Route, HashMap<&'static str, String>)> {
    table
        .iter()
        .filter(|r| r.method == *method)
        .find_map(|r| match_route(r.pattern, path).map(|p| (r, p)))
}

/// Checks every URL parameter's pattern: `400 InvalidRequestArguments` otherwise.
pub fn check_params(
    _route: &Route,
    params: HashMap<&'static str, String>,
) -> Result<HashMap<&'static str, String>, ApiError> {
    for (name, v) in &params {
        match *name {
            "taskId" | "taskGroupId" | "taskGraphId" => {
                TaskId::parse(v)?;
            }
            "runId" => {
                parse_run_id(v)?;
            }
            "taskQueueId" => {
                TaskQueueId::parse(v)?;
            }
            "name" => crate::artifacts::check_name(v)?,
            // Upstream's clientId and roleId patterns.
            "clientId"
                if v.is_empty()
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!@/:.+|_-".contains(&b)) =>
            {
                return Err(ApiError::bad_argument(format!(
                    "clientId {v:?} must match ^[A-Za-z0-9!@/:.+|_-]+$"
                )));
            }
            "roleId" if v.is_empty() || !v.bytes().all(|b| (0x20..0x7f).contains(&b)) => {
                return Err(ApiError::bad_argument(format!(
                    "roleId {v:?} must match ^[\\x20-\\x7e]+$"
                )));
            }
            "provisionerId" | "workerType" | "workerGroup" | "workerId" if !is_identifier(v) => {
                return Err(ApiError::bad_argument(format!(
                    "{name} {v:?} must match ^[a-zA-Z0-9-_]{{1,38}}$"
                )));
            }
            _ => {}
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splats_accept_raw_and_encoded_slashes() {
        let (r, p) = find(&Method::POST, "/claim-work/prov/wt").unwrap();
        assert_eq!(r.name, "claimWork");
        assert_eq!(p["taskQueueId"], "prov/wt");
        let (_, p) = find(&Method::POST, "/claim-work/prov%2Fwt").unwrap();
        assert_eq!(p["taskQueueId"], "prov/wt");
        let (r, p) = find(&Method::GET, "/task-queues/prov%2fwt/counts").unwrap();
        assert_eq!(r.name, "taskQueueCounts");
        assert_eq!(p["taskQueueId"], "prov/wt");
    }

    #[test]
    fn methods_and_shapes_select_the_endpoint() {
        assert_eq!(
            find(&Method::PUT, "/task/abc").unwrap().0.name,
            "createTask"
        );
        assert_eq!(find(&Method::GET, "/task/abc").unwrap().0.name, "task");
        assert_eq!(
            find(&Method::POST, "/task/abc/runs/0/claim")
                .unwrap()
                .0
                .name,
            "claimTask"
        );
        assert_eq!(
            find(&Method::POST, "/tasks/status").unwrap().0.name,
            "statuses"
        );
        assert!(find(&Method::DELETE, "/task/abc").is_none());
        let (r, p) = find_in(AUTH_ROUTES, &Method::POST, "/clients/a%2Fb/reset").unwrap();
        assert_eq!(
            (r.name, p["clientId"].as_str()),
            ("resetAccessToken", "a/b")
        );
        assert_eq!(
            find_in(AUTH_ROUTES, &Method::GET, "/clients/")
                .unwrap()
                .0
                .name,
            "listClients"
        );
        assert!(find(&Method::GET, "/task/").is_none());
    }
}
