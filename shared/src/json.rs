//! Small helpers for reading JSON values.

use serde_json::Value;

/// The strings of a JSON array (anything else gives an empty list).
pub fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Parses JSON from bytes, as `serde_json::from_slice` does, with the same result and errors;
/// `shared` parses every byte buffer through it.
/// Valid UTF-8 (all our stored items and nearly all bodies) is checked once, in one pass over
/// the whole text, and then parsed as a `str`. `from_slice` checks each string on its own:
/// about 42,000 instructions a life cycle in calls on short strings, of which checking once
/// saves about 24,000 (BENCHMARKS, instructions per life cycle).
pub fn from_bytes<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        // Not UTF-8: `from_slice` gives the error it always gave.
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// A JSON object of `fields`, each moved in. `json!` serializes every value it is given
/// through a reference, so a `Value` field (a definition, a status) is copied whole.
pub fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_bytes_reads_as_from_slice_does() {
        let cases: &[&[u8]] = &[
            br#"{"a":"b\u00e9","c":[1,2.5,null,true],"d":{"e":"\ud83d\ude00"}}"#,
            "{\"taskId\":\"caf\u{e9} \u{1f600}\"}".as_bytes(),
            b"{\"a\":\"\xff\"}",
            b"{\"a\":1,}",
            b"",
            b"[1, 2",
        ];
        for case in cases {
            let ours = from_bytes::<Value>(case).map_err(|e| e.to_string());
            let theirs = serde_json::from_slice::<Value>(case).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "on {:?}", String::from_utf8_lossy(case));
        }
    }

    #[test]
    fn object_is_what_json_makes() {
        let inner = serde_json::json!({"a": [1, {"b": null}], "c": "d"});
        assert_eq!(
            object([("x", inner.clone()), ("y", 2.into())]),
            serde_json::json!({"x": inner, "y": 2})
        );
    }
}
