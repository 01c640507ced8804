//! What a deployment publishes about itself, in upstream's reference formats, so that tools
//! that read references and schemas work: `/schemas/<service>/v1/<name>.json` (each schema
//! with `$id` set to that URL), `/references/<service>/v1/api.json` (generated from the
//! endpoint declarations), `/references/<service>/v1/exchanges.json` (from the exchange
//! definitions of [`crate::routing`]), `/references/manifest.json` listing them, and each
//! service's OpenAPI document at `/api/<service>/v1/openapi.json` ([`super::openapi`]).

use super::declare::{Scopes, Service};
use crate::routing::{Exchange, Subject};
use serde_json::{json, Value};

/// True if `path` is where a published document would be (answered to anyone, before any
/// route is matched).
pub fn is_document_path(path: &str) -> bool {
    path.starts_with("/schemas/")
        || path.starts_with("/references/")
        || super::openapi::service_at(path).is_some()
}

/// The document at `path` (under the root URL), for a deployment at `root_url`; `None` if
/// there is none.
pub fn document(path: &str, root_url: &str) -> Option<Value> {
    let root = root_url.trim_end_matches('/');
    if path == "/references/manifest.json" {
        return Some(manifest());
    }
    if let Some(rest) = path.strip_prefix("/schemas/") {
        let (service, file) = rest.split_once("/v1/")?;
        super::SERVICES.iter().find(|s| s.name == service)?;
        let name = file.strip_suffix(".json")?;
        let mut doc = crate::schema::document(name)?;
        doc["$id"] = json!(format!("{root}/schemas/{service}/v1/{name}.json#"));
        return Some(doc);
    }
    if let Some(svc) = super::openapi::service_at(path) {
        return Some(super::openapi::document(svc, root));
    }
    let rest = path.strip_prefix("/references/")?;
    let (service, file) = rest.split_once("/v1/")?;
    let svc = super::SERVICES.iter().find(|s| s.name == service)?;
    match file {
        "api.json" => Some(api(svc)),
        "exchanges.json" => svc
            .exchanges
            .as_ref()
            .map(|x| exchanges(service, x.prefix, x.list)),
        _ => None,
    }
}

fn manifest() -> Value {
    let mut refs = vec![];
    for s in super::SERVICES {
        refs.push(format!("/references/{}/v1/api.json", s.name));
        if s.exchanges.is_some() {
            refs.push(format!("/references/{}/v1/exchanges.json", s.name));
        }
    }
    json!({ "$schema": "/schemas/common/manifest-v3.json#", "references": refs })
}

/// `<param>` for every `<param>` and `<*param>` of a route, and the parameters' names.
pub(super) fn route_and_args(route: &str) -> (String, Vec<String>) {
    let mut args = vec![];
    let segs: Vec<String> = route
        .split('/')
        .map(
            |seg| match seg.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
                Some(p) => {
                    let p = p.trim_start_matches('*');
                    args.push(p.to_string());
                    format!("<{p}>")
                }
                None => seg.to_string(),
            },
        )
        .collect();
    (segs.join("/"), args)
}

/// The API reference of `service`.
pub fn api(service: &Service) -> Value {
    let entries: Vec<Value> = service
        .endpoints()
        .map(|e| {
            let (route, args) = route_and_args(e.route);
            let mut entry = json!({
                "type": "function",
                "method": e.verb.method().as_str().to_ascii_lowercase(),
                "route": route,
                "args": args,
                "name": e.name,
                "stability": "stable",
                "category": service.name,
                "title": e.title,
                "description": e.title,
            });
            if !e.query.is_empty() {
                entry["query"] = json!(e.query);
            }
            match &e.scopes {
                Scopes::Template(t) => entry["scopes"] = t.to_json(),
                Scopes::None | Scopes::Dynamic(_) => {}
            }
            if let Some(i) = e.input {
                entry["input"] = json!(format!("v1/{i}.json#"));
            }
            if let Some(o) = e.output {
                entry["output"] = json!(format!("v1/{o}.json#"));
            }
            entry
        })
        .collect();
    json!({
        "$schema": "/schemas/common/api-reference-v0.json#",
        "apiVersion": "v1",
        "serviceName": service.name,
        "title": format!("The {} service", service.name),
        "description": format!("Every endpoint of the {} service, under {}.", service.name, service.prefix),
        "entries": entries,
    })
}

/// One routing-key word.
fn word(name: &str, summary: &str, required: bool) -> Value {
    json!({ "name": name, "summary": summary, "multipleWords": false, "required": required })
}

fn routing_key(words: &[(&str, &str, bool)]) -> Vec<Value> {
    let mut out = vec![json!({
        "name": "routingKeyKind",
        "summary": "Always `primary` for the message's own routing key (CC'ed task routes start with `route`).",
        "constant": "primary",
        "multipleWords": false,
        "required": true,
    })];
    out.extend(words.iter().map(|(n, s, r)| word(n, s, *r)));
    out.push(json!({
        "name": "reserved",
        "summary": "Space reserved for future words: bind with `#`.",
        "multipleWords": true,
        "required": false,
    }));
    out
}

/// The exchanges reference of `service`, with its default prefix.
fn exchanges(service: &str, prefix: &str, list: &[Exchange]) -> Value {
    let task = [
        ("taskId", "The task's taskId.", true),
        ("runId", "The run's runId, or `_`.", false),
        ("workerGroup", "The run's workerGroup, or `_`.", false),
        ("workerId", "The run's workerId, or `_`.", false),
        (
            "provisionerId",
            "The provisionerId half of the task queue.",
            true,
        ),
        ("workerType", "The workerType half of the task queue.", true),
        ("schedulerId", "The task's schedulerId.", true),
        ("taskGroupId", "The task's taskGroupId.", true),
    ];
    let group = [
        ("taskGroupId", "The task group's taskGroupId.", true),
        ("schedulerId", "The task group's schedulerId.", true),
    ];
    let graph = [
        ("taskId", "Always `_`.", false),
        ("runId", "Always `_`.", false),
        ("workerGroup", "Always `_`.", false),
        ("workerId", "Always `_`.", false),
        ("provisionerId", "Always `_`.", false),
        ("workerType", "Always `_`.", false),
        ("schedulerId", "The graph's schedulerId.", true),
        ("taskGraphId", "The graph's taskGraphId.", true),
        ("routing", "The graph's routing.", true),
    ];
    let entries: Vec<Value> = list
        .iter()
        .map(|exchange| {
            let short = exchange.name();
            let words: &[(&str, &str, bool)] = match exchange.subject() {
                Subject::TaskGraph => &graph,
                Subject::TaskGroup => &group,
                Subject::Task => &task,
            };
            json!({
                "type": "topic-exchange",
                "exchange": short,
                "name": camel(short),
                "title": format!("The {short} message"),
                "description": format!("Published as `{prefix}{short}`."),
                "routingKey": routing_key(words),
                "schema": format!("v1/{short}-message.json#"),
            })
        })
        .collect();
    json!({
        "$schema": "/schemas/common/exchanges-reference-v0.json#",
        "apiVersion": "v1",
        "serviceName": service,
        "title": format!("The {service} service's exchanges"),
        "description": format!("Every exchange the {service} service publishes to."),
        "exchangePrefix": prefix,
        "entries": entries,
    })
}

/// `task-group-resolved` → `taskGroupResolved`.
fn camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut up = false;
    for c in s.chars() {
        if c == '-' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_cover_every_endpoint_exchange_and_schema_they_name() {
        let root = "https://tc.example.com";
        let manifest = document("/references/manifest.json", root).unwrap();
        let refs = manifest["references"].as_array().unwrap();
        assert_eq!(refs.len(), 6, "four APIs, two exchange sets");
        for r in refs {
            let doc = document(r.as_str().unwrap(), root).unwrap_or_else(|| panic!("{r}"));
            let service = doc["serviceName"].as_str().unwrap();
            for e in doc["entries"].as_array().unwrap() {
                for key in ["input", "output", "schema"] {
                    if let Some(s) = e[key].as_str() {
                        let path = format!("/schemas/{service}/{}", s.trim_end_matches('#'));
                        let schema = document(&path, root).unwrap_or_else(|| panic!("{path}"));
                        assert_eq!(schema["$id"], format!("{root}{path}#"));
                    }
                }
            }
        }
        let api = document("/references/queue/v1/api.json", root).unwrap();
        let task = api["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "getArtifact")
            .unwrap();
        assert_eq!(
            task["route"],
            "/task/<taskId>/runs/<runId>/artifacts/<name>"
        );
        assert_eq!(task["args"], json!(["taskId", "runId", "name"]));
        assert_eq!(camel("task-group-resolved"), "taskGroupResolved");
        assert!(document("/references/auth/v1/exchanges.json", root).is_none());
        assert!(document("/schemas/queue/v1/nope.json", root).is_none());
    }
}
