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
