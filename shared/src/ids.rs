//! Identifiers, parsed once at the edge so that the domain never holds an unchecked id.

use crate::error::{ApiError, ApiResult};
use crate::store::MAX_KEY_PART_BYTES;
use base64::Engine;
use std::fmt;

fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}

/// True if `s` matches the slugid v4 pattern that upstream uses for taskId and taskGroupId.
pub fn is_slugid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 22
        && b.iter().all(|&c| is_id_char(c))
        && (b'Q'..=b'T').contains(&b[8])
        && b"CGKOSWaeimquy26-".contains(&b[10])
        && b"AQgw".contains(&b[21])
}

/// A fresh "nice" slugid: a v4 UUID in URL-safe base64 whose first character is never `-`.
pub fn new_slugid() -> String {
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[0] &= 0x7f;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The "nice" slugid made from 16 given bytes (version and variant bits set as for a random
/// v4 UUID), for ids that must be derived again from the same secret.
pub fn slugid_from(bytes: [u8; 16]) -> String {
    let mut bytes = *uuid::Builder::from_random_bytes(bytes).as_uuid().as_bytes();
    bytes[0] &= 0x7f;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// True for provisionerId, workerGroup, workerId and the like: `^[a-zA-Z0-9-_]{1,38}$`.
pub fn is_identifier(s: &str) -> bool {
    (1..=38).contains(&s.len()) && s.bytes().all(is_id_char)
}

/// True for a workerType: `^[a-z]([-a-z0-9]{0,36}[a-z0-9])?$`.
pub fn is_worker_type(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 38 || !b[0].is_ascii_lowercase() {
        return false;
    }
    let body_ok = b[1..]
        .iter()
        .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    body_ok && (b.len() == 1 || b[b.len() - 1] != b'-')
}

macro_rules! slug_newtype {
    ($name:ident, $what:literal) => {
        #[doc = concat!("A checked ", $what, " (slugid v4).")]
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Parses a URL or body value; a bad one is `InvalidRequestArguments`.
            pub fn parse(s: &str) -> Result<Self, ApiError> {
                if is_slugid(s) {
                    Ok($name(s.to_string()))
                } else {
                    Err(ApiError::bad_argument(format!(
                        "{} {:?} is not a valid slugid",
                        $what, s
                    )))
                }
            }
            /// The id as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

slug_newtype!(TaskId, "taskId");
slug_newtype!(TaskGroupId, "taskGroupId");

/// `<provisionerId>/<workerType>`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskQueueId {
    full: String,
    split: usize,
}

impl TaskQueueId {
    /// Parses `<provisionerId>/<workerType>`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        match s.split_once('/') {
            Some((p, w)) if is_identifier(p) && is_worker_type(w) => Ok(TaskQueueId {
                full: s.to_string(),
                split: p.len(),
            }),
            _ => Err(ApiError::bad_argument(format!(
                "taskQueueId {s:?} must be <provisionerId>/<workerType>, matching \
                 ^[a-zA-Z0-9-_]{{1,38}}/[a-z]([-a-z0-9]{{0,36}}[a-z0-9])?$"
            ))),
        }
    }
    /// Builds one from the legacy pair.
    pub fn from_parts(provisioner_id: &str, worker_type: &str) -> Result<Self, ApiError> {
        Self::parse(&format!("{provisioner_id}/{worker_type}"))
    }
    /// The whole id.
    pub fn as_str(&self) -> &str {
        &self.full
    }
    /// The legacy provisionerId half.
    pub fn provisioner_id(&self) -> &str {
        &self.full[..self.split]
    }
    /// The legacy workerType half.
    pub fn worker_type(&self) -> &str {
        &self.full[self.split + 1..]
    }
}

impl fmt::Display for TaskQueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

impl fmt::Debug for TaskQueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

/// A checked workerGroup or workerId.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Identifier(String);

impl Identifier {
    /// Parses an identifier (`^[a-zA-Z0-9-_]{1,38}$`).
    pub fn parse(what: &str, s: &str) -> Result<Self, ApiError> {
        if is_identifier(s) {
            Ok(Identifier(s.to_string()))
        } else {
            Err(ApiError::bad_argument(format!(
                "{what} {s:?} must match ^[a-zA-Z0-9-_]{{1,38}}$"
            )))
        }
    }
    /// The identifier as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Parses a runId from the URL (`^[1-9]*[0-9]+$`, at most 1000).
pub fn parse_run_id(s: &str) -> Result<u32, ApiError> {
    let ok_shape =
        !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    match s.parse::<u32>() {
        Ok(n) if ok_shape && n <= 1000 => Ok(n),
        _ => Err(ApiError::bad_argument(format!(
            "runId {s:?} must be an integer 0..1000"
        ))),
    }
}

/// `400 InvalidRequestArguments` if `value`, the caller's `what`, is longer than
/// [`MAX_KEY_PART_BYTES`]: a value that
/// becomes part of a store key is checked at the API's edge, before the store is asked.
pub fn check_key_part(what: &str, value: &str) -> ApiResult<()> {
    if value.len() > MAX_KEY_PART_BYTES {
        return Err(ApiError::bad_argument(format!(
            "{what} is {} bytes long, more than {MAX_KEY_PART_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_slugids_match_the_pattern() {
        for _ in 0..1000 {
            let s = new_slugid();
            assert!(is_slugid(&s), "{s}");
            assert!(!s.starts_with('-'));
        }
    }

    #[test]
    fn task_queue_ids_split_into_the_legacy_pair() {
        let q = TaskQueueId::parse("prov-1/worker-type").unwrap();
        assert_eq!(q.provisioner_id(), "prov-1");
        assert_eq!(q.worker_type(), "worker-type");
        assert!(TaskQueueId::parse("1/1").is_err());
        assert!(TaskQueueId::parse("a/B").is_err());
        assert!(TaskQueueId::parse("noslash").is_err());
    }

    #[test]
    fn run_ids_are_small_decimal_integers() {
        assert_eq!(parse_run_id("0").unwrap(), 0);
        assert_eq!(parse_run_id("49").unwrap(), 49);
        assert!(parse_run_id("01").is_err());
        assert!(parse_run_id("-1").is_err());
        assert!(parse_run_id("1001").is_err());
        assert!(parse_run_id("x").is_err());
    }
}
