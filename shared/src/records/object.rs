//! An object of the object service: one item per name in the `artifacts` table, pk
//! `object/<name>` (taskIds, the artifacts' partition keys, never contain `/`), sk `object`,
//! with an entry in the `artifact-expiry` index (sk `<due ms>:object:<name>`) so that the
//! artifact reaper deletes objects too. Its bytes live in the private bucket under
//! `objects/<name>` (no artifact key starts with `objects/`: those start with a taskId).
//! Also the rules of hashes: added, never changed.

use super::artifact::ARTIFACT_EXPIRY;
use crate::error::{ApiError, ApiResult};
use crate::ids::check_key_part;
use crate::store::shard::{shard_of, shard_pk, time_key};
use crate::store::{Data, IndexEntry, Item};
use crate::time::{Ts, DAY};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Partition-key prefix of object items.
pub const OBJECT_PK_PREFIX: &str = "object/";
/// Sort key of every object item.
pub const OBJECT_SK: &str = "object";
/// How long an upload may stay unfinished before the reaper deletes it.
pub const UPLOAD_TTL_MS: i64 = DAY;

/// Partition key of an object's item.
pub fn object_pk(name: &str) -> String {
    format!("{OBJECT_PK_PREFIX}{name}")
}

/// The blob key of an object's bytes (in the private bucket).
pub fn blob_key(name: &str) -> String {
    format!("objects/{name}")
}

/// The object name under which the queue stores an object artifact's bytes (upstream's).
pub fn artifact_object_name(task_id: &str, run_id: u32, artifact: &str) -> String {
    format!("t/{task_id}/{run_id}/{artifact}")
}

/// One object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRecord {
    /// Its name (printable ASCII).
    pub name: String,
    /// The project it belongs to.
    pub project_id: String,
    /// The upload that created it; kept once finished, for the record.
    pub upload_id: String,
    /// When it expires.
    pub expires: Ts,
    /// When an unfinished upload is given up.
    pub upload_expires: Ts,
    /// Set by finishUpload once its bytes were checked: only then is it downloadable.
    pub finished: bool,
    /// `algorithm → hash` (lowercase hex); sha256 and sha512 are the bytes' own once finished.
    pub hashes: BTreeMap<String, String>,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

impl ObjectRecord {
    /// When the reaper deletes it: at its expiry, or at the upload's while unfinished.
    pub fn due(&self) -> Ts {
        if self.finished {
            self.expires
        } else {
            self.expires.min(self.upload_expires)
        }
    }

    /// The item, with its expiry entry.
    pub fn item(&self) -> ApiResult<Item> {
        let data = Data::encode(self).map_err(ApiError::internal)?;
        let entry = IndexEntry {
            index: ARTIFACT_EXPIRY,
            pk: shard_pk(ARTIFACT_EXPIRY, shard_of(&self.name)),
            sk: format!("{}:object:{}", time_key(self.due()), self.name),
        };
        Ok(Item::new(
            object_pk(&self.name),
            OBJECT_SK,
            data,
            vec![entry],
        ))
    }

    /// The `object` (metadata) reply.
    pub fn metadata(&self) -> Value {
        json!({ "projectId": self.project_id, "expires": self.expires, "hashes": self.hashes })
    }
}

/// True for an item of the artifacts table that is an object, not an artifact.
pub fn is_object_item(item: &Item) -> bool {
    item.pk.starts_with(OBJECT_PK_PREFIX)
}

/// Decodes an object item.
pub fn decode(item: Item) -> ApiResult<ObjectRecord> {
    item.data.decode().map_err(ApiError::internal)
}

/// The `hashes` of a request, as strings.
pub fn hashes_of(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds `new` hashes to `have`: `409` if one is already there with another value.
pub fn add_hashes(
    have: &mut BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> ApiResult<()> {
    for (alg, hash) in new {
        match have.get(alg) {
            Some(h) if h != hash => {
                return Err(ApiError::conflict(format!(
                    "A {alg} hash already exists with a different value"
                )))
            }
            Some(_) => {}
            None => {
                have.insert(alg.clone(), hash.clone());
            }
        }
    }
    Ok(())
}

/// `400` unless `name` is printable ASCII (upstream's pattern).
pub fn check_name(name: &str) -> ApiResult<()> {
    if name.is_empty() || !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ApiError::bad_argument(format!(
            "object name {name:?} must match ^[\\x20-\\x7e]+$"
        )));
    }
    check_key_part("object name", name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn hashes_are_added_never_changed() {
        let mut have = map(&[("sha256", "aa")]);
        add_hashes(&mut have, &map(&[("sha256", "aa"), ("sha512", "bb")])).unwrap();
        assert_eq!(have, map(&[("sha256", "aa"), ("sha512", "bb")]));
        let err = add_hashes(&mut have, &map(&[("sha256", "cc")])).unwrap_err();
        assert_eq!(err.code.status(), 409);
    }

    #[test]
    fn an_unfinished_upload_is_due_at_the_earlier_of_its_two_expiries() {
        let mut o = ObjectRecord {
            unknown: Default::default(),
            name: "n".into(),
            project_id: "p".into(),
            upload_id: "u".into(),
            expires: Ts(10 * DAY),
            upload_expires: Ts(DAY),
            finished: false,
            hashes: BTreeMap::new(),
        };
        assert_eq!(o.due(), Ts(DAY));
        o.finished = true;
        assert_eq!(o.due(), Ts(10 * DAY));
        assert!(o.item().unwrap().pk.starts_with(OBJECT_PK_PREFIX));
    }

    #[test]
    fn names_are_printable_ascii() {
        assert!(check_name("t/a b/c").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("é").is_err());
    }
}
