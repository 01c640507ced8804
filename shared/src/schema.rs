//! Our JSON Schemas (`schemas/`), compiled once and used to validate every request body,
//! every response and every message.

use crate::error::{ApiError, ErrorCode};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

include!(concat!(env!("OUT_DIR"), "/schema_files.rs"));

/// The `$id` base under which every schema is registered.
pub const SCHEMA_BASE: &str = "https://taskcluster-queue.invalid/schemas/queue/v1/";

struct Registry {
    docs: HashMap<&'static str, Value>,
    /// Every schema by `$id`, shared by all validators for resolving `$ref`s.
    refs: jsonschema::Registry<'static>,
    /// Compiled on first use, so a process compiles only the schemas it validates against.
    validators: HashMap<&'static str, OnceLock<jsonschema::Validator>>,
    /// Each schema's defaults, found on first use rather than by a walk of its document per
    /// request (and, like the validators, only for the schemas a process fills).
    defaults: HashMap<&'static str, OnceLock<Defaults>>,
}

/// The defaults of an object schema's properties, and of those nested inline objects that have
/// any: what [`fill_defaults`] adds. Properties with neither are left out.
#[derive(Debug, Default)]
struct Defaults(Vec<(String, Option<Value>, Defaults)>);

impl Defaults {
    fn of(schema: &Value) -> Defaults {
        let props = schema.get("properties").and_then(Value::as_object);
        Defaults(
            props
                .into_iter()
                .flatten()
                .map(|(key, prop)| {
                    (
                        key.clone(),
                        prop.get("default").cloned(),
                        Defaults::of(prop),
                    )
                })
                .filter(|(_, default, nested)| default.is_some() || !nested.0.is_empty())
                .collect(),
        )
    }

    /// Adds each missing property's default to `value`, and goes into the present ones.
    fn fill(&self, value: &mut Value) {
        let Some(obj) = value.as_object_mut() else {
            return;
        };
        for (key, default, nested) in &self.0 {
            match obj.get_mut(key) {
                None => {
                    if let Some(d) = default {
                        obj.insert(key.clone(), d.clone());
                    }
                }
                Some(child) => nested.fill(child),
            }
        }
    }
}

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let mut docs = HashMap::new();
        for (name, text) in SCHEMA_FILES {
            // The files are compiled in and checked by tests, so a broken one is a build bug.
            let doc: Value = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("schema {name} is not JSON: {e}"));
            docs.insert(*name, doc);
        }
        let resources = docs.iter().map(|(name, doc)| {
            let res = jsonschema::Resource::from_contents(doc.clone());
            (format!("{SCHEMA_BASE}{name}.json"), res)
        });
        let refs = jsonschema::Registry::new()
            .extend(resources)
            .and_then(|b| b.prepare())
            .unwrap_or_else(|e| panic!("schema registry: {e}"));
        let validators = docs.keys().map(|n| (*n, OnceLock::new())).collect();
        let defaults = docs.keys().map(|n| (*n, OnceLock::new())).collect();
        Registry {
            docs,
            refs,
            validators,
            defaults,
        }
    })
}

fn validator(name: &str) -> Option<&'static jsonschema::Validator> {
    let reg = registry();
    let (key, slot) = reg.validators.get_key_value(name)?;
    Some(slot.get_or_init(|| {
        jsonschema::options()
            .should_validate_formats(true)
            .with_registry(&reg.refs)
            .build(&reg.docs[key])
            .unwrap_or_else(|e| panic!("schema {key} does not compile: {e}"))
    }))
}

/// Schema `name` as its file holds it.
pub fn document(name: &str) -> Option<Value> {
    registry().docs.get(name).cloned()
}

/// Names of every embedded schema.
pub fn names() -> Vec<&'static str> {
    SCHEMA_FILES.iter().map(|(n, _)| *n).collect()
}

/// Validates `value` against schema `name`; returns one line per violation, naming the field
/// and quoting the value (for a caller's own input).
pub fn check(name: &str, value: &Value) -> Result<(), Vec<String>> {
    check_with(name, value, |at, e| format!("{at}: {e}"))
}

/// [`check`] naming the failing keyword but never the value: for what the queue itself
/// produced (an answer may hold credentials, and the error is logged).
pub fn check_quietly(name: &str, value: &Value) -> Result<(), Vec<String>> {
    check_with(name, value, |at, e| {
        format!("{at} fails {}", e.schema_path())
    })
}

fn check_with(
    name: &str,
    value: &Value,
    line: impl Fn(&str, &jsonschema::ValidationError<'_>) -> String,
) -> Result<(), Vec<String>> {
    let Some(v) = validator(name) else {
        return Err(vec![format!("no schema named {name}")]);
    };
    // The common case (valid) skips building error values.
    if v.is_valid(value) {
        return Ok(());
    }
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| {
            let path = e.instance_path().to_string();
            let at = if path.is_empty() {
                "(body)".to_string()
            } else {
                path
            };
            line(&at, &e)
        })
        .take(20)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// [`validate_input_at`], citing the schema by its registered `$id`.
pub fn validate_input(name: &str, body: &mut Value) -> Result<(), ApiError> {
    validate_input_at(name, body, || SCHEMA_BASE.to_string())
}

/// Validates a request body: fills defaults from the schema, then checks it.
/// A violation is `400 InputValidationError` naming each failing field and citing the schema
/// under `base()` (where the deployment serves it: `<rootUrl>/schemas/<service>/v1/`), which
/// is built only for a violation.
pub fn validate_input_at(
    name: &str,
    body: &mut Value,
    base: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    fill_defaults(name, body);
    check(name, body).map_err(|errs| {
        ApiError::new(
            ErrorCode::InputValidationError,
            format!(
                "Request payload must match schema {}{name}.json\n{}",
                base(),
                errs.join("\n")
            ),
        )
    })
}

/// Fills missing properties that have a `default` (top level and nested inline objects), as
/// ajv's `useDefaults` does upstream.
pub fn fill_defaults(name: &str, body: &mut Value) {
    let reg = registry();
    if let Some((key, slot)) = reg.defaults.get_key_value(name) {
        slot.get_or_init(|| Defaults::of(&reg.docs[key])).fill(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_schema_compiles() {
        assert!(names().len() > 20);
        for n in names() {
            assert!(validator(n).is_some(), "{n}");
        }
    }

    #[test]
    fn defaults_are_filled_and_normal_priority_is_rejected() {
        let mut body = json!({
            "provisionerId": "p", "workerType": "w",
            "created": "2026-01-01T00:00:00.000Z", "deadline": "2026-01-01T01:00:00.000Z",
            "payload": {}, "metadata": {"name": "n", "description": "d", "owner": "o", "source": "https://x"}
        });
        validate_input("create-task-request", &mut body).unwrap();
        assert_eq!(body["priority"], "lowest");
        assert_eq!(body["retries"], 5);
        assert_eq!(body["schedulerId"], "-");
        body["priority"] = json!("normal");
        let err = validate_input("create-task-request", &mut body).unwrap_err();
        assert_eq!(err.code, ErrorCode::InputValidationError);
        assert!(err.message.contains("/priority"), "{}", err.message);
    }

    /// The defaults found once fill what a walk of the schema's document fills (ajv's
    /// `useDefaults`), for every schema, on an empty body and on one whose inline objects are
    /// present and empty.
    #[test]
    fn the_defaults_found_once_are_the_documents() {
        fn walk(schema: &Value, value: &mut Value) {
            let (Some(props), Some(obj)) = (
                schema.get("properties").and_then(Value::as_object),
                value.as_object_mut(),
            ) else {
                return;
            };
            for (key, prop) in props {
                match obj.get_mut(key) {
                    None => {
                        if let Some(d) = prop.get("default") {
                            obj.insert(key.clone(), d.clone());
                        }
                    }
                    Some(child) => walk(prop, child),
                }
            }
        }
        for name in names() {
            let doc = document(name).unwrap();
            let objects: serde_json::Map<String, Value> = doc
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(_, p)| p.get("properties").is_some())
                .map(|(k, _)| (k.clone(), json!({})))
                .collect();
            for body in [json!({}), Value::Object(objects)] {
                let (mut expected, mut filled) = (body.clone(), body);
                walk(&doc, &mut expected);
                fill_defaults(name, &mut filled);
                assert_eq!(filled, expected, "{name}");
            }
        }
        let filled = registry().defaults["create-task-request"].get();
        assert!(filled.is_some_and(|d| d.0.len() >= 5));
    }
}
