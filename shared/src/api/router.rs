//! The one route matcher, for the local server and behind API Gateway alike. A route's
//! `<param>` takes one path segment and `<*param>` one or more (so it may hold `/`, raw or
//! as `%2F`); values are percent-decoded, then checked against their patterns.
//!
//! API Gateway's HTTP API hands a function the path *decoded* (`%2F` arrives as `/`), which
//! would break both parameter matching and the Hawk MAC, computed by the client over the
//! encoded path. [`canonical_path`] rebuilds the path the official clients send and sign:
//! every parameter encoded their way.

use super::declare::{Endpoint, Service};
use crate::error::{ApiError, ApiResult};
use crate::ids::check_key_part;
use crate::ids::{is_identifier, parse_run_id, TaskId, TaskQueueId};
use http::Method;
use std::collections::HashMap;

/// A matched request: the service, the endpoint and its parameters as they appear in the
/// path (still percent-encoded).
#[derive(Debug)]
pub struct Matched {
    /// The service whose prefix the path starts with.
    pub service: &'static Service,
    /// The endpoint.
    pub endpoint: &'static Endpoint,
    /// `(name, raw value)` of each parameter, in route order.
    pub raw: Vec<(&'static str, String)>,
}

/// Percent-decodes one path segment (or a joined run of them).
pub fn decode(raw: &str) -> String {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

/// Percent-encodes all but RFC 3986's unreserved characters, as the official clients encode
/// URL parameters (`/` becomes `%2F`).
pub fn encode_param(v: &str) -> String {
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

/// The name of a pattern segment that is a parameter, and whether it may span segments.
fn param_of(p: &'static str) -> Option<(&'static str, bool)> {
    let name = p.strip_prefix('<')?.strip_suffix('>')?;
    Some(match name.strip_prefix('*') {
        Some(n) => (n, true),
        None => (name, false),
    })
}

/// Whether a literal pattern segment matches a raw path segment.
fn literal_matches(p: &str, raw: &str) -> bool {
    p == raw || (raw.contains('%') && p == decode(raw))
}

/// Matches the segments of a path under the prefix against one route.
fn match_route(route: &'static str, segs: &[&str]) -> Option<Vec<(&'static str, String)>> {
    let route = route.trim_start_matches('/');
    // Most routes tried differ in their first segment: refuse those before allocating.
    let first = route.split('/').next().unwrap_or_default();
    if param_of(first).is_none() && !literal_matches(first, segs.first()?) {
        return None;
    }
    let pat: Vec<&'static str> = route.split('/').collect();
    let spans = pat.iter().position(|p| param_of(p).is_some_and(|(_, s)| s));
    let (head, tail) = match spans {
        Some(i) if segs.len() >= pat.len() => (i, pat.len() - i - 1),
        None if segs.len() == pat.len() => (pat.len(), 0),
        _ => return None,
    };
    let mut out = Vec::new();
    let mut bind = |p: &'static str, raw: &str| match param_of(p) {
        Some((name, _)) if !raw.is_empty() => {
            out.push((name, raw.to_string()));
            true
        }
        Some(_) => false,
        None => literal_matches(p, raw),
    };
    let ok = pat[..head].iter().zip(segs).all(|(p, s)| bind(p, s))
        && pat[pat.len() - tail..]
            .iter()
            .zip(&segs[segs.len() - tail..])
            .all(|(p, s)| bind(p, s))
        && spans.is_none_or(|i| bind(pat[i], &segs[head..segs.len() - tail].join("/")));
    ok.then_some(out)
}

/// The endpoint of `service` for a method and the path under its prefix.
pub fn find_in(
    service: &'static Service,
    method: &Method,
    rest: &str,
) -> Option<(&'static Endpoint, Vec<(&'static str, String)>)> {
    let segs: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    let mut matches = service
        .endpoints()
        .filter(|e| e.verb.is(method))
        .filter_map(|e| match_route(e.route, &segs).map(|raw| (e, raw)));
    // A path a gateway decoded is ambiguous where a spanning parameter held `%2F`
    // (`task-queues/p/counts`: the counts of `p`, or the task queue `p/counts`): the first
    // route whose parameters are valid wins, else the first route (and its 400).
    let first = matches.next()?;
    if check_params(&first.1).is_ok() {
        return Some(first);
    }
    Some(
        matches
            .find(|(_, raw)| check_params(raw).is_ok())
            .unwrap_or(first),
    )
}

/// The service and endpoint for a method and a whole path, if any. As upstream's router, a
/// route matches with or without a trailing `/` (the PyPI client strips it from routes such
/// as `/clients/`); the path as given is tried first.
pub fn find(method: &Method, path: &str) -> Option<Matched> {
    find_either(method, path).map(|(m, _)| m)
}

/// [`find`], and whether the path matched as given (else with its trailing `/` toggled).
fn find_either(method: &Method, path: &str) -> Option<(Matched, bool)> {
    if let Some(m) = find_exact(method, path) {
        return Some((m, true));
    }
    find_exact(method, &toggle_slash(path)).map(|m| (m, false))
}

/// `path` with its trailing `/` dropped, or one added.
fn toggle_slash(path: &str) -> String {
    match path.strip_suffix('/') {
        Some(without) => without.to_string(),
        None => format!("{path}/"),
    }
}

fn find_exact(method: &Method, path: &str) -> Option<Matched> {
    super::SERVICES.iter().find_map(|service| {
        let rest = path.strip_prefix(service.prefix)?;
        if !rest.starts_with('/') {
            return None;
        }
        let (endpoint, raw) = find_in(service, method, rest)?;
        Some(Matched {
            service,
            endpoint,
            raw,
        })
    })
}

/// The path as the official clients send and sign it: the route with every parameter
/// encoded their way (an already encoded path comes back unchanged). `None`: no route.
pub fn canonical_path(method: &Method, path: &str) -> Option<String> {
    signed_paths(method, path).into_iter().next()
}

/// A path that came through a gateway which may have decoded it: the path to serve (the
/// canonical one, or `given` when no route matches) and the other spellings its client may
/// have signed (see [`signed_paths`]).
pub fn through_gateway(method: &Method, given: String) -> (String, Vec<String>) {
    let mut signed = signed_paths(method, &given).into_iter();
    let path = signed.next().unwrap_or(given);
    (path, signed.collect())
}

/// The spellings of `path` a client may have signed, once a gateway has decoded it: the
/// canonical one (every parameter encoded as the official clients encode it), then, if a
/// parameter that spans segments holds a `/`, the same with that `/` left as it is (as a
/// client that builds the URL by hand sends it). Empty: no route.
pub fn signed_paths(method: &Method, path: &str) -> Vec<String> {
    let Some((m, as_given)) = find_either(method, path) else {
        return vec![];
    };
    let build = |raw_slashes: bool| {
        let mut out = m.service.prefix.to_string();
        for p in m.endpoint.route.trim_start_matches('/').split('/') {
            out.push('/');
            match param_of(p).and_then(|(name, spans)| {
                let v = m.raw.iter().find(|(n, _)| *n == name)?;
                Some((spans, decode(&v.1)))
            }) {
                Some((true, v)) if raw_slashes => {
                    let segs: Vec<String> = v.split('/').map(encode_param).collect();
                    out.push_str(&segs.join("/"));
                }
                Some((_, v)) => out.push_str(&encode_param(&v)),
                None => out.push_str(p),
            }
        }
        out
    };
    let mut out = vec![build(false)];
    let other = build(true);
    if other != out[0] {
        out.push(other);
    }
    if !as_given {
        // The client added or dropped the route's trailing `/`, and signed the path so.
        out = out.iter().map(|p| toggle_slash(p)).collect();
    }
    out
}

/// Decodes every URL parameter and checks its pattern: `400 InvalidRequestArguments`
/// otherwise.
pub fn check_params(raw: &[(&'static str, String)]) -> ApiResult<HashMap<&'static str, String>> {
    let mut params = HashMap::with_capacity(raw.len());
    for (name, v) in raw {
        let v = decode(v);
        if matches!(*name, "clientId" | "roleId") {
            check_key_part(name, &v)?;
        }
        match *name {
            "taskId" | "taskGroupId" | "taskGraphId" => {
                TaskId::parse(&v)?;
            }
            "runId" => {
                parse_run_id(&v)?;
            }
            "taskQueueId" => {
                TaskQueueId::parse(&v)?;
            }
            "name" => crate::records::artifact::check_name(&v)?,
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
            "provisionerId" | "workerType" | "workerGroup" | "workerId" if !is_identifier(&v) => {
                return Err(ApiError::bad_argument(format!(
                    "{name} {v:?} must match ^[a-zA-Z0-9-_]{{1,38}}$"
                )));
            }
            _ => {}
        }
        params.insert(*name, v);
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(method: Method, path: &str) -> Option<&'static str> {
        find(&method, path).map(|m| m.endpoint.name)
    }

    fn param(method: Method, path: &str, p: &str) -> String {
        let m = find(&method, path).expect("a route");
        decode(&m.raw.iter().find(|(n, _)| *n == p).expect("param").1)
    }

    #[test]
    fn splats_accept_raw_and_encoded_slashes() {
        let q = "/api/queue/v1";
        assert_eq!(
            name(Method::POST, &format!("{q}/claim-work/prov/wt")),
            Some("claimWork")
        );
        assert_eq!(
            param(
                Method::POST,
                &format!("{q}/claim-work/prov%2Fwt"),
                "taskQueueId"
            ),
            "prov/wt"
        );
        assert_eq!(
            name(Method::GET, &format!("{q}/task-queues/prov%2fwt/counts")),
            Some("taskQueueCounts")
        );
        assert_eq!(
            param(
                Method::GET,
                &format!("{q}/task/T/runs/0/artifacts/public%2Fa/b%20c"),
                "name"
            ),
            "public/a/b c"
        );
    }

    #[test]
    fn methods_and_shapes_select_the_endpoint() {
        let q = "/api/queue/v1";
        assert_eq!(
            name(Method::PUT, &format!("{q}/task/abc")),
            Some("createTask")
        );
        assert_eq!(name(Method::GET, &format!("{q}/task/abc")), Some("task"));
        assert_eq!(
            name(Method::POST, &format!("{q}/task/abc/runs/0/claim")),
            Some("claimTask")
        );
        assert_eq!(
            name(Method::POST, &format!("{q}/tasks/status")),
            Some("statuses")
        );
        assert_eq!(name(Method::DELETE, &format!("{q}/task/abc")), None);
        assert_eq!(name(Method::GET, &format!("{q}/task/")), None);
        assert_eq!(
            name(Method::GET, &format!("{q}/task/T/runs/0/artifacts")),
            Some("listArtifacts")
        );
        // No empty artifact name: the trailing `/` is dropped, as upstream's router does.
        assert_eq!(
            name(Method::GET, &format!("{q}/task/T/runs/0/artifacts/")),
            Some("listArtifacts")
        );
        assert_eq!(
            name(Method::GET, &format!("{q}/task/T/artifact-info/x/y")),
            Some("latestArtifactInfo")
        );
        assert_eq!(
            name(Method::POST, &format!("{q}/task/T/runs/3/artifacts/x")),
            Some("createArtifact")
        );
        assert_eq!(
            param(Method::POST, "/api/auth/v1/clients/a%2Fb/reset", "clientId"),
            "a/b"
        );
        assert_eq!(
            name(Method::POST, "/api/auth/v1/clients/a%2Fb/reset"),
            Some("resetAccessToken")
        );
        assert_eq!(
            name(Method::GET, "/api/auth/v1/clients/"),
            Some("listClients")
        );
        assert_eq!(name(Method::GET, "/api/scheduler/v1/ping"), Some("ping"));
        assert_eq!(name(Method::GET, "/elsewhere/task/abc"), None);
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
            (Method::DELETE, "/api/auth/v1/roles/repo%3Agithub.com%2Fo%2F%2A"),
            (Method::GET, "/api/queue/v1/task/abc"),
            (Method::GET, "/api/auth/v1/clients/"),
            (
                Method::GET,
                "/api/scheduler/v1/task-graph/fN1SbArXTPSVFNUvaOlinQ/inspect/eN1SbArXTPSVFNUvaOlinQ",
            ),
            (Method::PUT, "/api/scheduler/v1/task-graph/fN1SbArXTPSVFNUvaOlinQ"),
        ];
        for (m, encoded) in cases {
            let decoded = decode(encoded);
            assert_eq!(
                canonical_path(&m, &decoded).as_deref(),
                Some(encoded),
                "{decoded}"
            );
            assert_eq!(canonical_path(&m, encoded).as_deref(), Some(encoded));
        }
        assert_eq!(canonical_path(&Method::GET, "/api/queue/v1/nope"), None);
        assert_eq!(canonical_path(&Method::GET, "/elsewhere/task/abc"), None);
    }

    #[test]
    fn a_decoded_path_goes_to_the_route_whose_parameters_are_valid() {
        // Found by fuzzing (fuzz/seeds/router): behind a gateway that decodes `%2F`, the task
        // queue `prov/counts` arrives as `task-queues/prov/counts` and was routed to the
        // counts of `prov`, an invalid taskQueueId (400).
        let q = "/api/queue/v1/task-queues";
        assert_eq!(
            name(Method::GET, &format!("{q}/prov/counts")),
            Some("getTaskQueue")
        );
        assert_eq!(
            canonical_path(&Method::GET, &format!("{q}/prov/counts")).as_deref(),
            Some("/api/queue/v1/task-queues/prov%2Fcounts")
        );
        assert_eq!(
            name(Method::GET, &format!("{q}/prov/wt/counts")),
            Some("taskQueueCounts")
        );
        // Nothing valid: the first route, whose parameter check answers 400.
        assert_eq!(
            name(Method::GET, &format!("{q}/p/q/r/counts")),
            Some("taskQueueCounts")
        );
    }

    #[test]
    fn a_name_signed_with_raw_slashes_is_also_offered() {
        let artifact = "/api/queue/v1/task/abc/runs/0/artifacts/public/build/a b.tgz";
        assert_eq!(
            signed_paths(&Method::GET, artifact),
            [
                "/api/queue/v1/task/abc/runs/0/artifacts/public%2Fbuild%2Fa%20b.tgz",
                "/api/queue/v1/task/abc/runs/0/artifacts/public/build/a%20b.tgz",
            ]
        );
        // No `/` in any spanning parameter: one spelling only.
        assert_eq!(
            signed_paths(&Method::GET, "/api/queue/v1/task/abc"),
            ["/api/queue/v1/task/abc"]
        );
        assert!(signed_paths(&Method::GET, "/api/queue/v1/nope").is_empty());
    }

    #[test]
    fn a_route_matches_with_or_without_its_trailing_slash_as_signed() {
        for (path, endpoint) in [
            ("/api/auth/v1/clients", "listClients"),
            ("/api/auth/v1/clients/", "listClients"),
            ("/api/auth/v1/roles", "listRoles"),
            ("/api/queue/v1/ping/", "ping"),
            ("/api/queue/v1/task/abc/", "task"),
        ] {
            let m = find(&Method::GET, path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(m.endpoint.name, endpoint, "{path}");
            assert_eq!(signed_paths(&Method::GET, path), [path], "signed as sent");
        }
        // A path that matches as given keeps its meaning (an artifact name may end in `/`).
        let m = find(&Method::GET, "/api/auth/v1/clients/a/").unwrap();
        assert_eq!(m.raw, [("clientId", "a/".to_string())]);
    }
}
