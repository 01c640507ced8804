//! One binary for every Lambda function (`src/bin/lambda.rs`). Release builds link with LTO,
//! which costs about 80 s per binary; shipping one artifact that every function of the SAM
//! template points at pays that once. Each function says what it is through its `Handler`
//! (which `provided.al2023` passes on as `_HANDLER`): a queue endpoint's name from the route
//! table, `auth`, `publisher`, a scheduled job's name, a task-graph scheduler endpoint's
//! name prefixed with `scheduler` (`schedulerCreateTaskGraph`), or `taskGraphConsumer`.

use crate::lambda::{serve_job, serve_publisher, serve_task_graph_consumer, Job, Target};
use lambda_http::http::Method;
use lambda_http::{Request, RequestExt};
use shared::api::routes::{Route, AUTH_ROUTES, ROUTES, SCHEDULER_ROUTES};
use shared::api::{AUTH_PREFIX, PREFIX, SCHEDULER_PREFIX};
use shared::time::Ts;
use std::sync::Arc;

type Error = lambda_runtime::Error;

/// What one function serves.
#[derive(Debug, Clone, Copy)]
pub enum Handler {
    /// One queue endpoint, named as in the route table.
    Endpoint(&'static str),
    /// Every route of the auth service.
    Auth,
    /// The DynamoDB-stream publisher.
    Publisher,
    /// A scheduled job of [`Job`].
    Job(Job),
    /// The scheduled artifact expiry pass.
    ArtifactReaper,
    /// One task-graph scheduler endpoint, named as in its route table.
    SchedulerEndpoint(&'static str),
    /// The task-graph scheduler's consumer of resolution messages (Amazon MQ events).
    TaskGraphConsumer,
}

/// The task-graph scheduler's endpoints: handler name (the route's name prefixed with
/// `scheduler`, as several route names are the queue's too), route name. Functions are named
/// by [`kebab`]: `scheduler-create-task-graph`.
pub const SCHEDULER_HANDLERS: &[(&str, &str)] = &[
    ("schedulerPing", "ping"),
    ("schedulerLbheartbeat", "lbheartbeat"),
    ("schedulerVersion", "version"),
    ("schedulerHeartbeat", "heartbeat"),
    ("schedulerCreateTaskGraph", "createTaskGraph"),
    ("schedulerExtendTaskGraph", "extendTaskGraph"),
    ("schedulerStatus", "status"),
    ("schedulerInfo", "info"),
    ("schedulerInspect", "inspect"),
    ("schedulerInspectTask", "inspectTask"),
];

/// Handler names that are not routes, with what they serve.
pub const NON_HTTP_HANDLERS: &[(&str, Handler)] = &[
    ("auth", Handler::Auth),
    ("publisher", Handler::Publisher),
    ("claimReaper", Handler::Job(Job::ClaimReaper)),
    ("deadlineReaper", Handler::Job(Job::DeadlineReaper)),
    ("outboxSweeper", Handler::Job(Job::OutboxSweeper)),
    ("dependencyResolver", Handler::Job(Job::DependencyResolver)),
    ("expiryReaper", Handler::Job(Job::ExpiryReaper)),
    ("artifactReaper", Handler::ArtifactReaper),
    ("taskGraphConsumer", Handler::TaskGraphConsumer),
];

/// Resolves a handler name. Queue endpoints are looked up in the route table itself, so a
/// new route needs no edit here.
pub fn resolve(name: &str) -> Option<Handler> {
    if let Some((_, h)) = NON_HTTP_HANDLERS.iter().find(|(n, _)| *n == name) {
        return Some(*h);
    }
    if let Some((_, route)) = SCHEDULER_HANDLERS.iter().find(|(n, _)| *n == name) {
        return SCHEDULER_ROUTES
            .iter()
            .find(|r| r.name == *route)
            .map(|r| Handler::SchedulerEndpoint(r.name));
    }
    ROUTES
        .iter()
        .find(|r| r.name == name)
        .map(|r| Handler::Endpoint(r.name))
}

/// `claimWork` -> `claim-work`: the binaries' and functions' naming.
pub fn kebab(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every handler name: the non-HTTP ones, each queue route once, then the scheduler's.
pub fn handler_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = NON_HTTP_HANDLERS.iter().map(|(n, _)| *n).collect();
    for r in ROUTES {
        if !names.contains(&r.name) {
            names.push(r.name);
        }
    }
    names.extend(SCHEDULER_HANDLERS.iter().map(|(n, _)| *n));
    names
}

/// The handler for a function name such as `claim-work` or `mystack-claim-work`, for runs
/// without `_HANDLER` (the test harness, a hand-made function). The longest match wins, so
/// `x-latest-artifact` is `latestArtifact`, not `artifact`.
pub fn resolve_function_name(function_name: &str) -> Option<Handler> {
    handler_names()
        .into_iter()
        .map(|n| (n, kebab(n)))
        .filter(|(_, k)| {
            function_name == k
                || function_name
                    .strip_suffix(k.as_str())
                    .is_some_and(|head| head.ends_with('-'))
        })
        .max_by_key(|(_, k)| k.len())
        .and_then(|(n, _)| resolve(n))
}

/// The handler this process is: `_HANDLER`, else the function's name.
pub fn from_env() -> Result<Handler, Error> {
    if let Ok(h) = std::env::var("_HANDLER") {
        return resolve(&h).ok_or_else(|| format!("unknown handler {h:?} (_HANDLER)").into());
    }
    let f = std::env::var("AWS_LAMBDA_FUNCTION_NAME")
        .map_err(|_| "neither _HANDLER nor AWS_LAMBDA_FUNCTION_NAME is set")?;
    resolve_function_name(&f)
        .ok_or_else(|| format!("no handler matches function name {f:?}").into())
}

/// Runs the handler until the Lambda runtime stops it.
pub async fn run(handler: Handler) -> Result<(), Error> {
    match handler {
        Handler::Endpoint(name) => serve_http(Target::Queue(name)).await,
        Handler::Auth => serve_http(Target::Auth).await,
        Handler::SchedulerEndpoint(name) => serve_http(Target::Scheduler(name)).await,
        Handler::Publisher => serve_publisher().await,
        Handler::Job(job) => serve_job(job).await,
        Handler::ArtifactReaper => serve_artifact_reaper().await,
        Handler::TaskGraphConsumer => serve_task_graph_consumer().await,
    }
}

/// Serves one queue endpoint, the auth service or one scheduler endpoint behind an API
/// Gateway HTTP API, with the path made canonical first (see [`gateway_path`]).
pub async fn serve_http(only: Target<'static>) -> Result<(), Error> {
    crate::init_tracing();
    let api = Arc::new(crate::lambda::api_from_env().await?);
    lambda_http::run(lambda_http::service_fn(move |req: Request| {
        let api = api.clone();
        async move { Ok::<_, Error>(crate::lambda::handle_for(&api, only, req).await) }
    }))
    .await
}

/// The request with its raw path replaced by [`gateway_path`]'s, when that finds a route.
pub fn canonical_request(req: Request) -> Request {
    let raw = req.raw_http_path();
    let path = if raw.is_empty() {
        req.uri().path()
    } else {
        raw
    };
    match gateway_path(req.method(), path) {
        Some(p) => req.with_raw_http_path(p),
        None => req,
    }
}

/// URL parameters that may hold `/` (the route table's splats and the auth service's
/// client and role ids).
fn spans_slashes(param: &str) -> bool {
    param.starts_with("<*") || param == "<clientId>" || param == "<roleId>"
}

/// Matches `path` (under the prefix, already split) against a pattern whose one
/// slash-holding parameter may take any number of segments; returns every parameter's
/// segments joined back, still as given (encoded or not).
fn match_loose(pattern: &str, segs: &[&str]) -> Option<Vec<(String, String)>> {
    let pat: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
    let splat = pat.iter().position(|p| spans_slashes(p));
    let (head, tail) = match splat {
        Some(i) if segs.len() >= pat.len() => (i, pat.len() - i - 1),
        None if segs.len() == pat.len() => (pat.len(), 0),
        _ => return None,
    };
    let mut out = Vec::new();
    let mut bind = |p: &str, v: String| match p.strip_prefix('<').and_then(|p| p.strip_suffix('>'))
    {
        Some(name) if !v.is_empty() => {
            out.push((name.trim_start_matches('*').to_string(), v));
            true
        }
        Some(_) => false,
        None => p == v,
    };
    let ok = pat[..head]
        .iter()
        .zip(segs)
        .all(|(p, s)| bind(p, s.to_string()))
        && pat[pat.len() - tail..]
            .iter()
            .zip(&segs[segs.len() - tail..])
            .all(|(p, s)| bind(p, s.to_string()))
        && splat.is_none_or(|i| bind(pat[i], segs[head..segs.len() - tail].join("/")));
    ok.then_some(out)
}

/// Percent-encodes all but RFC 3986's unreserved characters, as the official clients
/// encode URL parameters (`/` becomes `%2F`).
fn encode_param(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode_param(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(x)) => {
                out.push(x);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path as the official clients send and sign it. An API Gateway HTTP API hands the
/// function a *decoded* `rawPath` (`%2F` arrives as `/`), which would break both the
/// matching of parameters such as `clientId` and the Hawk MAC, computed by the client over
/// the encoded path. So the path is matched loosely (a slash-holding parameter takes any
/// number of segments) and rebuilt with every parameter encoded the clients' way. An
/// already encoded path comes back unchanged. `None`: no route matches.
pub fn gateway_path(method: &Method, path: &str) -> Option<String> {
    let (prefix, table): (&str, &[Route]) = if path.starts_with(&format!("{PREFIX}/")) {
        (PREFIX, ROUTES)
    } else if path.starts_with(&format!("{AUTH_PREFIX}/")) {
        (AUTH_PREFIX, AUTH_ROUTES)
    } else if path.starts_with(&format!("{SCHEDULER_PREFIX}/")) {
        (SCHEDULER_PREFIX, SCHEDULER_ROUTES)
    } else {
        return None;
    };
    let segs: Vec<&str> = path[prefix.len()..]
        .trim_start_matches('/')
        .split('/')
        .collect();
    table
        .iter()
        .filter(|r| r.method == method)
        .find_map(|r| match_loose(r.pattern, &segs).map(|params| (r, params)))
        .map(|(r, params)| {
            let mut out = prefix.to_string();
            for p in r.pattern.trim_start_matches('/').split('/') {
                out.push('/');
                let name = p
                    .trim_start_matches('<')
                    .trim_start_matches('*')
                    .trim_end_matches('>');
                match params.iter().find(|(n, _)| p.starts_with('<') && n == name) {
                    Some((_, v)) => out.push_str(&encode_param(&decode_param(v))),
                    None => out.push_str(p),
                }
            }
            out
        })
}

/// The artifact expiry pass, per EventBridge event: S3 objects first, then the rows, each
/// only if unchanged (see [`shared::queue::Queue::expire_artifacts`]).
pub async fn serve_artifact_reaper() -> Result<(), Error> {
    crate::init_tracing();
    let grace = std::env::var("TCQ_ARTIFACT_EXPIRY_GRACE_MS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(shared::artifacts::EXPIRY_GRACE_MS);
    // The API carries the queue and the S3 blob store, both built once per cold start.
    let api = Arc::new(crate::lambda::api_from_env().await?);
    lambda_runtime::run(lambda_runtime::service_fn(
        move |_event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let api = api.clone();
            async move {
                let n = api
                    .queue
                    .expire_artifacts(api.blobs.as_ref(), Ts::now(), grace)
                    .await?;
                tracing::info!(deleted = n, "artifact expiry pass");
                Ok::<_, Error>(serde_json::json!({ "job": "ArtifactReaper", "deleted": n }))
            }
        },
    ))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_resolve_by_name_and_by_function_name() {
        assert!(matches!(
            resolve("claimWork"),
            Some(Handler::Endpoint("claimWork"))
        ));
        assert!(matches!(resolve("auth"), Some(Handler::Auth)));
        assert!(resolve("nope").is_none());
        assert!(matches!(
            resolve_function_name("tcq-latest-artifact"),
            Some(Handler::Endpoint("latestArtifact"))
        ));
        assert!(matches!(
            resolve_function_name("artifact"),
            Some(Handler::Endpoint("artifact"))
        ));
        assert!(matches!(
            resolve_function_name("stack-reclaim-task"),
            Some(Handler::Endpoint("reclaimTask"))
        ));
        assert!(matches!(
            resolve_function_name("claim-reaper"),
            Some(Handler::Job(Job::ClaimReaper))
        ));
        assert!(resolve_function_name("xclaim-work").is_none());
        assert!(matches!(
            resolve_function_name("stack-scheduler-status"),
            Some(Handler::SchedulerEndpoint("status"))
        ));
        assert!(matches!(
            resolve_function_name("stack-status"),
            Some(Handler::Endpoint("status"))
        ));
        assert!(matches!(
            resolve_function_name("scheduler-inspect-task"),
            Some(Handler::SchedulerEndpoint("inspectTask"))
        ));
        assert!(matches!(
            resolve_function_name("task-graph-consumer"),
            Some(Handler::TaskGraphConsumer)
        ));
    }

    #[test]
    fn every_scheduler_route_has_one_handler() {
        for r in SCHEDULER_ROUTES {
            let handlers: Vec<_> = SCHEDULER_HANDLERS
                .iter()
                .filter(|(_, route)| *route == r.name)
                .collect();
            assert_eq!(handlers.len(), 1, "{}", r.name);
            assert!(matches!(
                resolve(handlers[0].0),
                Some(Handler::SchedulerEndpoint(n)) if n == r.name
            ));
        }
        assert_eq!(SCHEDULER_HANDLERS.len(), SCHEDULER_ROUTES.len());
        let names = handler_names();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "handler names collide");
    }

    #[test]
    fn decoded_gateway_paths_become_what_the_clients_signed() {
        let cases = [
            (Method::POST, "/api/queue/v1/claim-work/prov%2Fwt"),
            (Method::GET, "/api/queue/v1/task-queues/prov%2Fwt/counts"),
            (
                Method::GET,
                "/api/queue/v1/task/abc/runs/0/artifacts/public%2Fbuild%2Fa%20b.tgz",
            ),
            (Method::POST, "/api/auth/v1/clients/my%2Fworker/reset"),
            (
                Method::DELETE,
                "/api/auth/v1/roles/repo%3Agithub.com%2Fo%2F%2A",
            ),
            (Method::GET, "/api/queue/v1/task/abc"),
            (Method::GET, "/api/auth/v1/clients/"),
            (
                Method::GET,
                "/api/scheduler/v1/task-graph/fN1SbArXTPSVFNUvaOlinQ/inspect/eN1SbArXTPSVFNUvaOlinQ",
            ),
            (
                Method::PUT,
                "/api/scheduler/v1/task-graph/fN1SbArXTPSVFNUvaOlinQ",
            ),
        ];
        for (m, encoded) in cases {
            let decoded = decode_param(encoded);
            assert_eq!(
                gateway_path(&m, &decoded).as_deref(),
                Some(encoded),
                "{decoded}"
            );
            assert_eq!(gateway_path(&m, encoded).as_deref(), Some(encoded));
        }
        assert_eq!(gateway_path(&Method::GET, "/api/queue/v1/nope"), None);
        assert_eq!(gateway_path(&Method::GET, "/elsewhere/task/abc"), None);
    }
}
