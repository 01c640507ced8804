//! Each service's OpenAPI 3.1 document (`<rootUrl>/api/<service>/v1/openapi.json`, anonymous):
//! its shape, every declared endpoint exactly once, real requests answered as it says; and
//! schemathesis run from it against a server, bounded (the longer run is
//! `scripts/schemathesis.sh`).

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use shared::api::declare::Service;
use shared::api::SERVICES;

/// A service's document, fetched without credentials.
async fn document(app: &TestServer, service: &Service) -> Value {
    let url = format!("{}{}", app.root_url(), shared::api::openapi::path(service));
    let (status, doc) = raw_url_with(&url, "GET", None, None, None).await;
    assert_eq!(status, 200, "{url}: {doc}");
    doc
}

/// The value a local `$ref` (`#/a/b`) points at.
fn resolve<'a>(doc: &'a Value, r: &str) -> Option<&'a Value> {
    doc.pointer(r.strip_prefix('#')?)
}

const METHODS: [&str; 4] = ["get", "put", "post", "delete"];

/// OpenAPI 3.1's required structure, as far as our documents use it.
fn assert_openapi_shape(doc: &Value, service: &Service, root: &str) {
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"] == "v1");
    assert_eq!(
        doc["servers"],
        json!([{ "url": format!("{root}{}", service.prefix) }])
    );
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["hawk"]["type"], "http");
    assert_eq!(schemes["hawk"]["scheme"], "hawk");
    assert_eq!(schemes["bewit"]["in"], "query");
    for r in shared::api::openapi::refs(doc) {
        assert!(
            r.starts_with("#/components/schemas/") && resolve(doc, r).is_some(),
            "{}: {r} does not resolve",
            service.name
        );
    }
    let mut erased = std::collections::BTreeSet::new();
    for (template, item) in doc["paths"].as_object().expect("paths") {
        assert!(template.starts_with('/'), "{template}");
        // Templates that differ only in their parameters' names would be the same path.
        let shape: Vec<&str> = template
            .split('/')
            .map(|s| if s.starts_with('{') { "{}" } else { s })
            .collect();
        assert!(erased.insert(shape.join("/")), "{template} twice");
        let params: Vec<&str> = template
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        for (method, op) in item.as_object().expect("path item") {
            assert!(METHODS.contains(&method.as_str()), "{method} {template}");
            let declared: Vec<&str> = op["parameters"]
                .as_array()
                .expect("parameters")
                .iter()
                .filter(|p| p["in"] == "path")
                .inspect(|p| assert_eq!(p["required"], true))
                .map(|p| p["name"].as_str().expect("name"))
                .collect();
            assert_eq!(declared, params, "{method} {template}");
            for p in op["parameters"].as_array().expect("parameters") {
                assert!(["path", "query"].contains(&p["in"].as_str().unwrap_or_default()));
                assert!(p["schema"].is_object(), "{p}");
            }
            let responses = op["responses"].as_object().expect("responses");
            assert!(!responses.is_empty());
            for (status, r) in responses {
                assert!(status.parse::<u16>().is_ok(), "{status}");
                assert!(r["description"].is_string(), "{method} {template} {status}");
            }
            if let Some(b) = op.get("requestBody") {
                assert!(b["content"]["application/json"]["schema"].is_object());
            }
        }
    }
}

/// Every declared endpoint appears exactly once, with its method, route and success status.
fn assert_every_endpoint_once(doc: &Value, service: &Service) {
    let mut seen = vec![];
    for (template, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let id = op["operationId"].as_str().expect("operationId");
            let e = service
                .endpoint(id)
                .unwrap_or_else(|| panic!("{id} is no endpoint of {}", service.name));
            assert_eq!(
                e.verb.method().as_str().to_ascii_lowercase(),
                *method,
                "{id}"
            );
            let route = e
                .route
                .replace("<*", "{")
                .replace(['<'], "{")
                .replace('>', "}");
            assert_eq!(*template, route, "{id}");
            seen.push(id);
        }
    }
    let mut want: Vec<&str> = service.endpoints().map(|e| e.name).collect();
    seen.sort();
    want.sort();
    assert_eq!(seen, want, "{}: each endpoint exactly once", service.name);
}

/// Sends a request and checks the answer against the document: its status is one the
/// operation lists, and its body matches that response's schema.
async fn answered_as_documented(
    doc: &Value,
    (method, template): (&str, &str),
    path: &str,
    body: Option<Value>,
    signed: bool,
) -> (u16, Value) {
    let url = format!(
        "{}{path}",
        doc["servers"][0]["url"].as_str().expect("server")
    );
    let bytes = body.map(|b| b.to_string().into_bytes());
    let ct = bytes.as_ref().map(|_| "application/json");
    let got = if signed {
        raw_url(&url, &method.to_ascii_uppercase(), ct, bytes).await
    } else {
        raw_url_with(&url, &method.to_ascii_uppercase(), ct, bytes, None).await
    };
    let op = &doc["paths"][template][method];
    let r = &op["responses"][got.0.to_string()];
    assert!(
        r.is_object(),
        "{method} {path}: {} is not documented for {}: {}",
        got.0,
        op["operationId"],
        got.1
    );
    if let Some(schema) = r["content"]["application/json"].get("schema") {
        let mut with_components = schema.clone();
        with_components["components"] = doc["components"].clone();
        let v = jsonschema::validator_for(&with_components).expect("schema compiles");
        let errors: Vec<String> = v.iter_errors(&got.1).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {}: {errors:?}\n{:#}",
            got.0,
            got.1
        );
    }
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn each_service_publishes_an_openapi_document_of_every_endpoint() {
    let app = spawn_app().await;
    let root = app.root_url();
    for service in SERVICES {
        let doc = document(&app, service).await;
        assert_openapi_shape(&doc, service, &root);
        assert_every_endpoint_once(&doc, service);
    }
    // And by an independent reader: the OpenAPI 3.1 meta-schema (as schemathesis ships it).
    let names: Vec<&str> = SERVICES.iter().map(|s| s.name).collect();
    if let Some(r) = run_python(&app, "openapi_valid.py", &[("SERVICES", names.join(","))]).await {
        assert_eq!(r, json!({ "documents": SERVICES.len(), "errors": [] }));
    }
    let url = format!("{root}/api/queue/v1/openapi.json");
    let (status, _) = raw_url_with(&url, "POST", None, None, None).await;
    assert_eq!(status, 404, "only GET serves documents");

    let queue = document(&app, &shared::api::endpoints::QUEUE).await;
    answered_as_documented(&queue, ("get", "/ping"), "/ping", None, false).await;
    let task = ("get", "/task/{taskId}");
    let missing = format!("/task/{}", slugid());
    let (s, _) = answered_as_documented(&queue, task, &missing, None, true).await;
    assert_eq!(s, 404);
    let (s, _) = answered_as_documented(&queue, task, &missing, None, false).await;
    assert_eq!(s, 403, "anonymous callers lack queue:get-task");
    let (s, _) = answered_as_documented(&queue, task, "/task/not-a-slug", None, true).await;
    assert_eq!(s, 400);
    let create = ("put", "/task/{taskId}");
    let (s, _) = answered_as_documented(&queue, create, &missing, Some(json!({})), true).await;
    assert_eq!(s, 400);
    let def = task_def(&task_queue_id());
    let (s, r) = answered_as_documented(&queue, create, &missing, Some(def), true).await;
    assert_eq!(s, 200);
    assert_eq!(r["status"]["state"], "pending");
    let list = ("get", "/task-queues");
    let (s, r) = answered_as_documented(&queue, list, "/task-queues?limit=1", None, true).await;
    assert_eq!(s, 200);
    assert!(
        r["taskQueues"].as_array().is_some_and(|q| q.len() <= 1),
        "{r}"
    );

    let auth = document(&app, &shared::api::auth_service::AUTH).await;
    let role = ("put", "/roles/{roleId}");
    let body = json!({ "description": "openapi", "scopes": ["queue:ping"] });
    let path = "/roles/openapi%3Atest";
    let (s, _) = answered_as_documented(&auth, role, path, Some(body), true).await;
    assert_eq!(s, 200);
    let delete = ("delete", "/roles/{roleId}");
    let (s, _) = answered_as_documented(&auth, delete, path, None, true).await;
    assert_eq!(s, 204);

    let scheduler = document(&app, &shared::api::scheduler::SCHEDULER).await;
    let status = ("get", "/task-graph/{taskGraphId}/status");
    let path = format!("/task-graph/{}/status", slugid());
    let (s, _) = answered_as_documented(&scheduler, status, &path, None, true).await;
    assert_eq!(s, 404);

    let object = document(&app, &shared::api::object_service::OBJECT).await;
    let metadata = ("get", "/metadata/{name}");
    let path = "/metadata/no%2Fsuch%2Fobject";
    let (s, _) = answered_as_documented(&object, metadata, path, None, true).await;
    assert_eq!(s, 404);
}

/// Schemathesis from each service's document against one server: every operation, a fixed
/// seed and a few examples each; no 5xx, every response as documented (status, content type,
/// headers, schema), schema-violating requests refused, every error body
/// `{code, message, requestInfo}` with a code of its status (tests/schemathesis.toml and
/// tests/python/schemathesis_hooks.py). The longer run: `scripts/schemathesis.sh`, which sets
/// `TCQ_SCHEMATHESIS_EXAMPLES` and `TCQ_SCHEMATHESIS_SEED`.
#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_nothing_on_any_service() {
    if blackbox::not_in_shape(
        "thousands of requests, each a function process there; the documents are checked above",
    ) {
        return;
    }
    let Some(python) = blackbox::schemathesis::python() else {
        return;
    };
    // claimWork answers after 200 ms when nothing is pending, so it does not dominate the run.
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 200).await;
    let budget = blackbox::schemathesis::Budget {
        max_examples: env_num("TCQ_SCHEMATHESIS_EXAMPLES", 5),
        seed: env_num("TCQ_SCHEMATHESIS_SEED", 20261126),
        // On DynamoDB, the phases whose requests reach the store: the coverage phase's
        // thousands of boundary cases are refused before it, as on the embedded backend.
        phases: if on_localstack() {
            "fuzzing,stateful"
        } else {
            "examples,coverage,fuzzing,stateful"
        },
    };
    let mut outcomes = vec![];
    for service in SERVICES {
        outcomes.push(blackbox::schemathesis::run(&python, &app.root_url(), service, budget).await);
    }
    eprintln!("{}", blackbox::schemathesis::print(&outcomes));
    for (o, service) in outcomes.iter().zip(SERVICES) {
        assert!(
            o.passed && o.failures == 0,
            "schemathesis found failures on {}:\n{}",
            o.service,
            o.output
        );
        let endpoints = service.endpoints().count() as u64;
        assert_eq!(
            o.operations, endpoints,
            "{}: every operation tested",
            o.service
        );
    }
}
