//! An artifact: one item per (task, run, name) in the `artifacts` table, pk taskId, sk
//! `<runId, 4 digits>#<name>` (so a run's artifacts are one prefix query, in name order), with
//! the sparse index `artifact-expiry` (pk `artifact-expiry#<shard>`, sk
//! `<expires ms>:<taskId>:<runId>:<name>`) that the expiry reaper walks with `sk <= cutoff`.
//! Also the rules of creating one: upstream's names, re-creation and run-state rules.

use super::task::{RunState, TaskRecord};
use crate::blobs::Bucket;
use crate::error::{ApiError, ApiResult};
use crate::ids::check_key_part;
use crate::store::shard::{shard_of, shard_pk, time_key};
use crate::store::{Data, IndexEntry, Item};
use crate::time::{Ts, MINUTE};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How long after an `exception` resolution artifacts may still be created.
const EXCEPTION_GRACE_MS: i64 = 25 * MINUTE;
/// Longest accepted Content-Type.
const MAX_CONTENT_TYPE: usize = 255;

/// Artifacts: one item per (task, run, name).
pub const ARTIFACTS: &str = "artifacts";
/// The artifact expiry index.
pub const ARTIFACT_EXPIRY: &str = "artifact-expiry";

/// Sort-key prefix of every artifact of one run.
pub fn artifact_run_prefix(run_id: u32) -> String {
    format!("{run_id:04}#")
}

/// Sort key of an artifact item.
pub fn artifact_sk(run_id: u32, name: &str) -> String {
    format!("{run_id:04}#{name}")
}

/// The expiry entry of an artifact item.
pub fn artifact_expiry_entry(expires: Ts, task_id: &str, run_id: u32, name: &str) -> IndexEntry {
    IndexEntry {
        index: ARTIFACT_EXPIRY,
        pk: shard_pk(ARTIFACT_EXPIRY, shard_of(task_id)),
        sk: format!("{}:{task_id}:{run_id}:{name}", time_key(expires)),
    }
}

/// One artifact item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// taskId.
    pub task_id: String,
    /// runId.
    pub run_id: u32,
    /// Name (printable ASCII, may contain `/`).
    pub name: String,
    /// `s3`, `object`, `reference`, `link` or `error`.
    pub storage_type: String,
    /// Content-Type.
    pub content_type: String,
    /// Informational size, echoed in metadata only when given.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content_length: Option<u64>,
    /// After this, downloads answer 410; the reaper deletes it after a grace period.
    pub expires: Ts,
    /// Per type: s3 `{bucket, prefix}`, reference `{url}`, link `{artifact}`, error
    /// `{reason, message}`, object `{projectId, uploadId}`.
    pub details: Value,
    /// False for an object artifact until finishArtifact: not listed, not downloadable.
    #[serde(default = "yes")]
    pub present: bool,
    /// Attributes this build does not know, kept through rewrites ([`super::Unknown`]).
    #[serde(flatten)]
    pub unknown: super::Unknown,
}

fn yes() -> bool {
    true
}

impl Artifact {
    /// Metadata as in `artifact-response` and list items.
    pub fn metadata(&self) -> Value {
        let mut m = json!({
            "storageType": self.storage_type,
            "name": self.name,
            "expires": self.expires,
            "contentType": self.content_type,
        });
        if let Some(n) = self.content_length {
            m["contentLength"] = json!(n);
        }
        m
    }

    /// The object key of an s3 artifact.
    pub fn object_key(task_id: &str, run_id: u32, name: &str) -> String {
        format!("{task_id}/{run_id}/{name}")
    }

    /// The item of an artifact of a task that expires at `task_expires`. Only an artifact
    /// that expires before its task has an `artifact-expiry` entry (a write unit when created
    /// and one when deleted); the others go with their task ([`Queue::expire_task`]).
    ///
    /// [`Queue::expire_task`]: crate::queue::Queue::expire_task
    pub fn item(&self, task_expires: Ts) -> ApiResult<Item> {
        let data = Data::encode(self).map_err(ApiError::internal)?;
        let entries = (self.expires < task_expires)
            .then(|| artifact_expiry_entry(self.expires, &self.task_id, self.run_id, &self.name));
        Ok(Item::new(
            self.task_id.clone(),
            artifact_sk(self.run_id, &self.name),
            data,
            entries.into_iter().collect(),
        ))
    }

    /// The object holding an object artifact's bytes.
    pub fn object_name(&self) -> String {
        super::object::artifact_object_name(&self.task_id, self.run_id, &self.name)
    }

    /// True for the types whose creation is announced on `artifact-created` (never s3; object
    /// artifacts when they are finished).
    pub fn announced(&self) -> bool {
        matches!(self.storage_type.as_str(), "reference" | "link" | "error")
    }
}

/// `400` unless `name` is printable ASCII without a leading `/` or a `..` segment.
pub fn check_name(name: &str) -> ApiResult<()> {
    if name.is_empty() || !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ApiError::bad_argument(format!(
            "artifact name {name:?} must match ^[\\x20-\\x7e]+$"
        )));
    }
    check_key_part("artifact name", name)?;
    if name.starts_with('/') || name.split('/').any(|seg| seg == "..") {
        return Err(ApiError::bad_argument(format!(
            "artifact name {name:?} may not start with / or contain a .. segment"
        )));
    }
    Ok(())
}

/// upstream's compatibility rule for re-creating an artifact.
pub fn compatible(old: &Artifact, new: &Artifact) -> bool {
    if new.expires < old.expires {
        return false;
    }
    if new.storage_type != "link" && new.content_type != old.content_type {
        return false;
    }
    match (old.storage_type.as_str(), new.storage_type.as_str()) {
        ("reference", "reference") | ("reference", "link") => true,
        // A repeat of an unfinished upload, whose object already holds these fields.
        ("object", "object") => {
            !old.present && old.details == new.details && old.expires == new.expires
        }
        (a, b) => a == b && old.details == new.details,
    }
}

/// Decodes an artifact item.
pub fn decode(item: Item) -> ApiResult<Artifact> {
    item.data.decode().map_err(ApiError::internal)
}

/// Parses a (schema-validated) createArtifact body into an artifact.
pub fn from_request(task_id: &str, run_id: u32, name: &str, body: &Value) -> ApiResult<Artifact> {
    let storage_type = body["storageType"].as_str().unwrap_or_default().to_string();
    let expires = body["expires"]
        .as_str()
        .and_then(Ts::parse)
        .ok_or_else(|| ApiError::input("expires must be a date-time"))?;
    let content_type = body["contentType"]
        .as_str()
        .unwrap_or("application/binary")
        .to_string();
    if content_type.len() > MAX_CONTENT_TYPE {
        return Err(ApiError::input(format!(
            "contentType is longer than {MAX_CONTENT_TYPE} characters"
        )));
    }
    let details = match storage_type.as_str() {
        "s3" => json!({
            "bucket": if Bucket::for_name(name) == Bucket::Public { "public" } else { "private" },
            "prefix": Artifact::object_key(task_id, run_id, name),
        }),
        "reference" => json!({ "url": body["url"] }),
        "link" => {
            let target = body["artifact"].as_str().unwrap_or_default();
            check_name(target)?;
            json!({ "artifact": target })
        }
        "error" => json!({ "reason": body["reason"], "message": body["message"] }),
        // The project is the task's, filled in once the task is read.
        "object" => json!({ "uploadId": crate::ids::new_slugid() }),
        other => return Err(ApiError::input(format!("unknown storageType {other:?}"))),
    };
    Ok(Artifact {
        unknown: Default::default(),
        task_id: task_id.to_string(),
        run_id,
        name: name.to_string(),
        present: storage_type != "object",
        storage_type,
        content_type,
        content_length: body["contentLength"].as_u64(),
        expires,
        details,
    })
}

/// Checks that artifacts may be created for `run_id` of `rec` now.
pub fn check_run(rec: &TaskRecord, run_id: u32, expires: Ts, now: Ts) -> ApiResult<()> {
    let Some(run) = rec.runs.get(run_id as usize) else {
        return Err(ApiError::input(format!(
            "Run {run_id} of task {} does not exist",
            rec.task_id
        )));
    };
    if run.worker_group.is_none() || run.worker_id.is_none() {
        return Err(ApiError::input(format!(
            "Run {run_id} of task {} has never been claimed",
            rec.task_id
        )));
    }
    if expires > rec.expires {
        return Err(ApiError::input(format!(
            "Artifact expires ({expires}) after the task ({})",
            rec.expires
        )));
    }
    let open = match run.state {
        RunState::Running => true,
        RunState::Exception => run
            .resolved
            .is_some_and(|t| t.plus(EXCEPTION_GRACE_MS) > now),
        _ => false,
    };
    if !open {
        return Err(ApiError::conflict(format!(
            "Artifacts can't be created for run {run_id} of task {}: it is {}",
            rec.task_id,
            run.state.as_str()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(kind: &str, ct: &str, expires: i64, details: Value) -> Artifact {
        Artifact {
            unknown: Default::default(),
            task_id: "t".into(),
            run_id: 0,
            name: "n".into(),
            storage_type: kind.into(),
            content_type: ct.into(),
            content_length: None,
            expires: Ts(expires),
            details,
            present: true,
        }
    }

    #[test]
    fn names_must_be_printable_without_escapes() {
        assert!(check_name("public/a b/c.txt").is_ok());
        assert!(check_name("a/../b").is_err());
        assert!(check_name("..").is_err());
        assert!(check_name("/abs").is_err());
        assert!(check_name("tab\there").is_err());
        assert!(check_name("é").is_err());
        assert!(check_name("a..b").is_ok());
    }

    #[test]
    fn recreation_follows_upstreams_compatibility_rules() {
        let s3 = art(
            "s3",
            "text/plain",
            10,
            json!({"bucket": "b", "prefix": "p"}),
        );
        assert!(compatible(&s3, &s3));
        assert!(compatible(
            &s3,
            &art("s3", "text/plain", 11, s3.details.clone())
        ));
        assert!(!compatible(
            &s3,
            &art("s3", "text/plain", 9, s3.details.clone())
        ));
        assert!(!compatible(
            &s3,
            &art("s3", "text/html", 10, s3.details.clone())
        ));
        let r = art("reference", "a/b", 10, json!({"url": "https://x"}));
        assert!(compatible(
            &r,
            &art("reference", "a/b", 10, json!({"url": "https://y"}))
        ));
        assert!(compatible(
            &r,
            &art("link", "other", 10, json!({"artifact": "z"}))
        ));
        let l = art("link", "a/b", 10, json!({"artifact": "z"}));
        assert!(!compatible(&l, &r));
        let e = art(
            "error",
            "a/b",
            10,
            json!({"reason": "file-missing-on-worker", "message": "m"}),
        );
        assert!(!compatible(
            &e,
            &art(
                "error",
                "a/b",
                10,
                json!({"reason": "file-missing-on-worker", "message": "other"})
            )
        ));
        assert!(!compatible(&s3, &e));
    }

    #[test]
    fn metadata_echoes_content_length_only_when_given() {
        let mut a = art("s3", "text/plain", 0, json!({}));
        assert!(a.metadata().get("contentLength").is_none());
        a.content_length = Some(3);
        assert_eq!(a.metadata()["contentLength"], 3);
    }
}
