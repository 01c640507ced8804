//! Each service's OpenAPI 3.1 document, served at `<rootUrl>/api/<service>/v1/openapi.json`
//! and generated from what the router and the handlers use: the endpoint declarations (route
//! and parameters, the query arguments a handler reads, input and output schemas, scopes, what
//! a success answers and which error codes can come back) and our JSON schemas. The schemas
//! become components, their `definitions` split out and every `$ref` rewritten to point inside
//! the document, so that a tool needs nothing else to read it.

use super::declare::{Authn, Endpoint, Scopes, Service, Success, Verb};
use super::references::route_and_args;
use crate::error::ErrorCode;
use crate::store::MAX_KEY_PART_BYTES;
use serde_json::{json, Map, Value};

/// Where a component schema's `$ref` points.
const SCHEMAS: &str = "#/components/schemas/";

/// The file name of each service's document, under its prefix.
const FILE: &str = "/openapi.json";

/// The path (under the root URL) of `service`'s document.
pub fn path(service: &Service) -> String {
    format!("{}{FILE}", service.prefix)
}

/// The service whose document is at `path`, if any (checked on every GET, so without
/// allocating).
pub fn service_at(path: &str) -> Option<&'static Service> {
    super::SERVICES
        .iter()
        .find(|s| path.strip_prefix(s.prefix) == Some(FILE))
        .copied()
}

/// `service`'s document, for a deployment reached at `root_url`.
pub fn document(service: &Service, root_url: &str) -> Value {
    let root = root_url.trim_end_matches('/');
    let mut paths = Map::new();
    let mut roots = vec!["error"];
    for e in service.endpoints() {
        let (route, args) = route_and_args(e.route);
        let template = route.replace('<', "{").replace('>', "}");
        roots.extend(e.input.iter().chain(e.output.iter()));
        let item = paths.entry(template).or_insert_with(|| json!({}));
        let method = e.verb.method().as_str().to_ascii_lowercase();
        item[method] = operation(service, e, &args);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": format!("The {} service", service.name),
            "version": "v1",
            "description": format!(
                "Every endpoint of the {} service, as this deployment serves it under {}. \
                 Generated from the endpoint declarations; the same schemas are served under \
                 /schemas/{}/v1/ and the Taskcluster API reference at /references/{}/v1/api.json.",
                service.name, service.prefix, service.name, service.name
            ),
        },
        "servers": [{ "url": format!("{root}{}", service.prefix) }],
        "paths": paths,
        "components": {
            "schemas": components(&roots),
            "securitySchemes": {
                "hawk": {
                    "type": "http",
                    "scheme": "hawk",
                    "description": "A Hawk `Authorization` header (sha256) made with a \
                        Taskcluster clientId and accessToken, with `ext` carrying a \
                        certificate (temporary credentials) or authorizedScopes if any. \
                        Without credentials a request has the `anonymous` role's scopes.",
                },
                "bewit": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "bewit",
                    "description": "A Hawk bewit (a signed URL), for GET only; never with an \
                        `Authorization` header.",
                },
            },
        },
    })
}

/// One endpoint's operation.
fn operation(service: &Service, e: &Endpoint, args: &[String]) -> Value {
    let mut parameters: Vec<Value> = args
        .iter()
        .map(|a| {
            let spans = e.route.contains(&format!("<*{a}>"));
            let description = if spans {
                "May hold `/` (sent as `%2F`, or raw)."
            } else {
                "One path segment."
            };
            json!({
                "name": a, "in": "path", "required": true,
                "description": description, "schema": param_schema(a),
            })
        })
        .collect();
    parameters.extend(e.query.iter().map(
        |q| json!({ "name": q, "in": "query", "required": false, "schema": query_schema(q) }),
    ));
    let scopes = match e.scopes {
        Scopes::None => "No scopes required.".to_string(),
        Scopes::Template(t) => format!("Scopes: `{}`.", t.to_json()),
        Scopes::Dynamic(what) => format!("Scopes: {what}."),
    };
    let authn = match e.authn {
        Authn::Deployment => "",
        Authn::TestClient => " Authenticated against upstream's fixed test clients only.",
    };
    let mut op = json!({
        "operationId": e.name,
        "summary": e.title,
        "description": format!("{}. {scopes}{authn}", e.title),
        "tags": [service.name],
        "parameters": parameters,
        "responses": responses(service, e),
        "security": security(e.verb),
    });
    match e.scopes {
        Scopes::Template(t) => op["x-taskcluster-scopes"] = t.to_json(),
        Scopes::Dynamic(what) => op["x-taskcluster-scopes"] = json!(what),
        Scopes::None => {}
    }
    if let Some(input) = e.input {
        // No body is `{}` (as upstream), so it is optional when `{}` is valid.
        let mut empty = json!({});
        let required = crate::schema::validate_input(input, &mut empty).is_err();
        op["requestBody"] = json!({
            "required": required,
            "content": { "application/json": { "schema": schema_ref(input) } },
        });
    }
    op
}

/// Hawk, a bewit on GET, or nothing (the `anonymous` role).
fn security(verb: Verb) -> Value {
    if verb == Verb::Get {
        json!([{ "hawk": [] }, { "bewit": [] }, {}])
    } else {
        json!([{ "hawk": [] }, {}])
    }
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMAS}{name}") })
}

/// The values a path parameter takes: what [`super::router::check_params`] accepts.
fn param_schema(name: &str) -> Value {
    let common = |def: &str| schema_ref(&format!("common.{def}"));
    match name {
        "taskId" | "taskGroupId" | "taskGraphId" => common("slugid"),
        "runId" => common("runId"),
        "taskQueueId" => common("taskQueueId"),
        "provisionerId" => common("provisionerId"),
        "workerType" => common("workerType"),
        "workerGroup" | "workerId" => common("identifier"),
        "clientId" => json!({
            "type": "string", "maxLength": MAX_KEY_PART_BYTES, "pattern": "^[A-Za-z0-9!@/:.+|_-]+$",
        }),
        "roleId" => json!({
            "type": "string", "maxLength": MAX_KEY_PART_BYTES, "pattern": "^[\\x20-\\x7e]+$",
        }),
        // Printable ASCII, not starting with `/`, without a `..` segment.
        "name" => json!({
            "type": "string",
            "maxLength": MAX_KEY_PART_BYTES,
            "pattern": "^(\\.|\\.?[\\x20-\\x2d\\x30-\\x7e][\\x20-\\x2e\\x30-\\x7e]*|\\.\\.[\\x20-\\x2e\\x30-\\x7e]+)\
                        (/(\\.?([\\x20-\\x2d\\x30-\\x7e][\\x20-\\x2e\\x30-\\x7e]*)?|\\.\\.[\\x20-\\x2e\\x30-\\x7e]+))*$",
        }),
        _ => json!({ "type": "string" }),
    }
}

/// The values a query argument takes.
fn query_schema(name: &str) -> Value {
    match name {
        // Any digits (clamped to 1..1000).
        "limit" => json!({ "type": "integer", "minimum": 0 }),
        "quarantined" => json!({ "type": "string", "enum": ["true", "false"] }),
        "prefix" => json!({ "type": "string", "maxLength": MAX_KEY_PART_BYTES }),
        _ => json!({ "type": "string" }),
    }
}

/// The success reply (with its links) and every error reply `e` may give.
fn responses(service: &Service, e: &Endpoint) -> Value {
    let body = |desc: &str| {
        let schema = e
            .output
            .map(schema_ref)
            .unwrap_or(json!({ "type": "object" }));
        json!({ "description": desc, "content": { "application/json": { "schema": schema } } })
    };
    let mut out = Map::new();
    let redirect = || {
        let mut r = body("See Other: the bytes are at `Location` (the body says the same).");
        r["headers"] = json!({
            "Location": { "required": true, "schema": { "type": "string" } },
        });
        r
    };
    match e.success {
        Success::Ok => {
            out.insert("200".into(), body("OK"));
        }
        Success::NoContent => {
            out.insert("204".into(), json!({ "description": "No Content" }));
        }
        Success::Redirect => {
            out.insert("303".into(), redirect());
        }
        Success::ArtifactRedirect => {
            out.insert("303".into(), redirect());
            out.insert(
                "424".into(),
                json!({
                    "description": "Failed Dependency: an error artifact, with the reason \
                        and message its task gave.",
                    "content": { "application/json": { "schema": {
                        "type": "object",
                        "required": ["reason", "message"],
                        "properties": {
                            "reason": { "type": "string" },
                            "message": { "type": "string" },
                        },
                    } } },
                }),
            );
        }
    }
    let links = links(service, e);
    if !links.is_empty() {
        if let Some(success) = out.values_mut().next() {
            success["links"] = Value::Object(links);
        }
    }
    let codes = e.error_codes();
    for status in ErrorCode::ALL.map(ErrorCode::status) {
        let at: Vec<&str> = codes
            .iter()
            .filter(|c| c.status() == status)
            .map(|c| c.as_str())
            .collect();
        if at.is_empty() || out.contains_key(&status.to_string()) {
            continue;
        }
        out.insert(
            status.to_string(),
            json!({
                "description": format!("{}.", at.join(", ")),
                "content": { "application/json": { "schema": {
                    "allOf": [schema_ref("error")],
                    "properties": { "code": { "enum": at } },
                } } },
            }),
        );
    }
    Value::Object(out)
}

/// Where a reply with each output schema holds the parameters of other routes.
fn reply_params(output: &str) -> &'static [(&'static str, &'static str)] {
    match output {
        "task-status-response" => &[
            ("taskId", "/status/taskId"),
            ("taskGroupId", "/status/taskGroupId"),
            ("taskQueueId", "/status/taskQueueId"),
            ("provisionerId", "/status/provisionerId"),
            ("workerType", "/status/workerType"),
            ("runId", "/status/runs/0/runId"),
        ],
        "claim-work-response" => &[
            ("taskId", "/tasks/0/status/taskId"),
            ("taskGroupId", "/tasks/0/status/taskGroupId"),
            ("runId", "/tasks/0/runId"),
            ("workerGroup", "/tasks/0/workerGroup"),
            ("workerId", "/tasks/0/workerId"),
        ],
        "task-claim-response" => &[
            ("taskId", "/status/taskId"),
            ("runId", "/runId"),
            ("workerGroup", "/workerGroup"),
            ("workerId", "/workerId"),
        ],
        "task-graph-status-response" => &[("taskGraphId", "/status/taskGraphId")],
        _ => &[],
    }
}

/// Links from a call that creates or changes something to every other operation of its
/// service whose path parameters it provides (its own, and those its reply holds), so that a
/// tool can chain calls on things that exist (createTask, then claimWork on its task queue,
/// then reportCompleted of the claimed run; deleteRole, then role).
fn links(service: &Service, e: &Endpoint) -> Map<String, Value> {
    let mut out = Map::new();
    if e.verb == Verb::Get {
        return out;
    }
    let (_, own) = route_and_args(e.route);
    let mut provided: Vec<(String, String)> = own
        .into_iter()
        .map(|p| {
            let from = format!("$request.path.{p}");
            (p, from)
        })
        .collect();
    for (p, at) in e.output.map(reply_params).unwrap_or_default() {
        if !provided.iter().any(|(q, _)| q == p) {
            provided.push((p.to_string(), format!("$response.body#{at}")));
        }
    }
    for t in service.endpoints().filter(|t| !std::ptr::eq(*t, e)) {
        let (_, args) = route_and_args(t.route);
        let from = |a: &String| provided.iter().find(|(p, _)| p == a).map(|(_, f)| f);
        if args.is_empty() || !args.iter().all(|a| from(a).is_some()) {
            continue;
        }
        let parameters: Map<String, Value> = args
            .iter()
            .filter_map(|a| Some((a.clone(), json!(from(a)?))))
            .collect();
        out.insert(
            t.name.to_string(),
            json!({ "operationId": t.name, "parameters": parameters }),
        );
    }
    out
}

/// Every schema `roots` reach, as components: a schema file `x.json` becomes `x`, each of its
/// `definitions` `x.<name>`, and every `$ref` (`y.json`, `y.json#/definitions/z`,
/// `#/definitions/z`) points at those.
fn components(roots: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut todo: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        // A name without a schema is left dangling, which the tests catch.
        let Some(Value::Object(mut doc)) = crate::schema::document(&name) else {
            continue;
        };
        doc.remove("$schema");
        doc.remove("$id");
        let defs = doc.remove("definitions");
        let mut main = Value::Object(doc);
        rewrite(&mut main, &name, &mut todo);
        if let Some(Value::Object(defs)) = defs {
            for (k, mut d) in defs {
                rewrite(&mut d, &name, &mut todo);
                out.insert(format!("{name}.{k}"), d);
            }
        }
        out.insert(name, main);
    }
    out
}

/// Points every `$ref` in `v` (part of schema file `file`) into the components; the files it
/// names go to `todo`.
fn rewrite(v: &mut Value, file: &str, todo: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x {
                    Value::String(r) if k == "$ref" => {
                        let (doc, fragment) = r.split_once('#').unwrap_or((r.as_str(), ""));
                        let target = match doc.strip_suffix(".json") {
                            Some(other) => {
                                todo.push(other.to_string());
                                other
                            }
                            None => file,
                        };
                        *r = match fragment.strip_prefix("/definitions/") {
                            Some(def) => format!("{SCHEMAS}{target}.{def}"),
                            None => format!("{SCHEMAS}{target}"),
                        };
                    }
                    _ => rewrite(x, file, todo),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rewrite(x, file, todo)),
        _ => {}
    }
}

/// Every `$ref` in `v` (a document, or part of one).
pub fn refs(v: &Value) -> Vec<&str> {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match x.as_str() {
                        Some(r) if k == "$ref" => out.push(r),
                        _ => walk(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = vec![];
    walk(v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ref_resolves_and_every_endpoint_is_there_once() {
        for service in super::super::SERVICES {
            let doc = document(service, "https://tc.example.com/");
            assert_eq!(
                doc["servers"][0]["url"],
                format!("https://tc.example.com{}", service.prefix)
            );
            let schemas = doc["components"]["schemas"].as_object().unwrap();
            let all = refs(&doc);
            assert!(all.len() > 10, "{}", service.name);
            for r in all {
                let name = r.strip_prefix(SCHEMAS).unwrap_or_else(|| panic!("{r}"));
                assert!(schemas.contains_key(name), "{}: {r} dangles", service.name);
            }
            let mut ids = vec![];
            for (template, item) in doc["paths"].as_object().unwrap() {
                for (method, op) in item.as_object().unwrap() {
                    let id = op["operationId"].as_str().unwrap();
                    let e = service.endpoint(id).unwrap();
                    assert_eq!(e.verb.method().as_str().to_ascii_lowercase(), *method);
                    // Each `{param}` of the template is declared, and nothing else in the path.
                    let declared: Vec<&str> = op["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|p| p["in"] == "path")
                        .map(|p| p["name"].as_str().unwrap())
                        .collect();
                    let used: Vec<&str> = template
                        .split('/')
                        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                        .collect();
                    assert_eq!(declared, used, "{template}");
                    ids.push(id);
                }
            }
            let mut want: Vec<&str> = service.endpoints().map(|e| e.name).collect();
            ids.sort();
            want.sort();
            assert_eq!(ids, want, "{}", service.name);
        }
    }

    #[test]
    fn error_replies_name_their_codes_by_status() {
        let doc = document(&super::super::endpoints::QUEUE, "http://h");
        let op = &doc["paths"]["/task/{taskId}/runs/{runId}/artifacts/{name}"]["get"];
        assert_eq!(op["operationId"], "getArtifact");
        let r = op["responses"].as_object().unwrap();
        let mut statuses: Vec<&str> = r.keys().map(String::as_str).collect();
        statuses.sort();
        assert_eq!(
            statuses,
            ["303", "400", "401", "403", "404", "410", "413", "424"]
        );
        assert_eq!(
            r["403"]["content"]["application/json"]["schema"]["properties"]["code"]["enum"],
            json!(["InsufficientScopes"])
        );
        let ping = &doc["paths"]["/ping"]["get"]["responses"];
        assert!(ping.get("403").is_none() && ping.get("404").is_none());
        assert_eq!(
            ping["400"]["content"]["application/json"]["schema"]["properties"]["code"]["enum"],
            json!(["MalformedPayload", "InvalidRequestArguments", "InputError"])
        );
    }

    #[test]
    fn the_name_pattern_is_check_name() {
        let re = regex_lite(param_schema("name")["pattern"].as_str().unwrap());
        for name in [
            "a",
            "public/a b.txt",
            ".",
            "...",
            "a/..b",
            "a/",
            "a//b",
            ".a",
            "a/.",
            "..a",
        ] {
            assert!(re(name), "{name} should match");
            crate::records::artifact::check_name(name).unwrap();
        }
        for name in ["", "/a", "..", "a/..", "a/../b", "é", "a\tb"] {
            assert!(!re(name), "{name} should not match");
            assert!(crate::records::artifact::check_name(name).is_err());
        }
    }

    /// Full-string matching with the regex engine our schemas are validated with.
    fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
        let schema = json!({ "type": "string", "pattern": pattern });
        let v = jsonschema::validator_for(&schema).unwrap();
        move |s| v.is_valid(&json!(s))
    }
}
