//! Artifacts: creation (with upstream's re-creation rules), download resolution (links,
//! errors, expiry), listing and the expiry reaper. Bytes never pass through the queue: they
//! move through URLs from the [`BlobStore`].
//!
//! `artifact-created` events for reference, link and error artifacts go into the task status
//! item's outbox in the same transaction that writes the artifact item, so an event exists
//! exactly when its artifact does.

use crate::api::auth::Caller;
use crate::blobs::{BlobStore, Bucket};
use crate::error::{ApiError, ApiResult};
use crate::ids::TaskId;
use crate::keys::{self, SHARDS};
use crate::model::{RunState, TaskRecord};
use crate::queue::{decode_token, encode_token, PageReq, Queue};
use crate::routes_scopes::get_artifact;
use crate::store::{Cond, Item, SkRange, WriteOp};
use crate::time::{Ts, MINUTE, SECOND};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// How long a `putUrl` is valid (the reply's `expires`).
pub const PUT_URL_TTL_MS: i64 = 45 * MINUTE;
/// Extra validity of the signed URL beyond the advertised expiry, for slow starts.
const PUT_URL_SLACK_MS: i64 = 10 * SECOND;
/// How long a presigned download URL is valid.
pub const GET_URL_TTL_MS: i64 = 30 * MINUTE;
/// How far in the past an artifact's `expires` may lie at creation (clock drift).
const EXPIRES_PAST_MS: i64 = 15 * MINUTE;
/// How long after an `exception` resolution artifacts may still be created.
const EXCEPTION_GRACE_MS: i64 = 25 * MINUTE;
/// Default grace between an artifact's expiry and its deletion (410 in between, then 404).
pub const EXPIRY_GRACE_MS: i64 = 30 * MINUTE;
/// Longest accepted Content-Type.
const MAX_CONTENT_TYPE: usize = 255;
/// Optimistic-concurrency attempts before giving up with 409.
const MAX_ATTEMPTS: usize = 25;

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
    /// `s3`, `reference`, `link` or `error`.
    pub storage_type: String,
    /// Content-Type.
    pub content_type: String,
    /// Informational size, echoed in metadata only when given.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content_length: Option<u64>,
    /// After this, downloads answer 410; the reaper deletes it after a grace period.
    pub expires: Ts,
    /// Per type: s3 `{bucket, prefix}`, reference `{url}`, link `{artifact}`, error
    /// `{reason, message}`.
    pub details: Value,
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

    fn item(&self) -> ApiResult<Item> {
        let data = serde_json::to_value(self).map_err(ApiError::internal)?;
        Ok(Item::new(
            self.task_id.clone(),
            keys::artifact_sk(self.run_id, &self.name),
            data,
            vec![keys::artifact_expiry_entry(
                self.expires,
                &self.task_id,
                self.run_id,
                &self.name,
            )],
        ))
    }

    /// True for the types whose creation is announced on `artifact-created` (never s3).
    fn announced(&self) -> bool {
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
    if name.starts_with('/') || name.split('/').any(|seg| seg == "..") {
        return Err(ApiError::bad_argument(format!(
            "artifact name {name:?} may not start with / or contain a .. segment"
        )));
    }
    Ok(())
}

/// upstream's compatibility rule for re-creating an artifact.
fn compatible(old: &Artifact, new: &Artifact) -> bool {
    if new.expires < old.expires {
        return false;
    }
    if new.storage_type != "link" && new.content_type != old.content_type {
        return false;
    }
    match (old.storage_type.as_str(), new.storage_type.as_str()) {
        ("reference", "reference") | ("reference", "link") => true,
        (a, b) => a == b && old.details == new.details,
    }
}

/// What a download resolves to.
#[derive(Debug, Clone, PartialEq)]
pub enum Download {
    /// 303 to this URL (s3 and reference).
    Url {
        /// The final artifact's storage type.
        storage_type: String,
        /// Where to go.
        url: String,
    },
    /// An error artifact: 424 with `{reason, message}`.
    Error {
        /// The reason the worker gave.
        reason: String,
        /// Its message.
        message: String,
    },
}

fn decode(item: Item) -> ApiResult<Artifact> {
    serde_json::from_value(item.data).map_err(ApiError::internal)
}

async fn backoff(attempt: usize) {
    let cap = 1u64 << attempt.min(6);
    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % (cap + 1))).await;
}

/// Parses a (schema-validated) createArtifact body into an artifact.
fn from_request(task_id: &str, run_id: u32, name: &str, body: &Value) -> ApiResult<Artifact> {
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
        other => return Err(ApiError::input(format!("unknown storageType {other:?}"))),
    };
    Ok(Artifact {
        task_id: task_id.to_string(),
        run_id,
        name: name.to_string(),
        storage_type,
        content_type,
        content_length: body["contentLength"].as_u64(),
        expires,
        details,
    })
}

/// Checks that artifacts may be created for `run_id` of `rec` now.
fn check_run(rec: &TaskRecord, run_id: u32, expires: Ts, now: Ts) -> ApiResult<()> {
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

impl Queue {
    async fn load_artifact(
        &self,
        task_id: &str,
        run_id: u32,
        name: &str,
    ) -> ApiResult<Option<(Artifact, u64)>> {
        let item = self
            .store
            .get(keys::ARTIFACTS, task_id, &keys::artifact_sk(run_id, name))
            .await
            .map_err(ApiError::internal)?;
        match item {
            Some(i) => {
                let v = i.version;
                Ok(Some((decode(i)?, v)))
            }
            None => Ok(None),
        }
    }

    /// The latest run of a task: 404 if the task or any run is missing.
    pub async fn latest_run(&self, task_id: &TaskId) -> ApiResult<u32> {
        let Some((rec, _)) = self.load(task_id.as_str()).await? else {
            return Err(ApiError::not_found(format!("Task {task_id} not found")));
        };
        rec.runs
            .last()
            .map(|r| r.run_id)
            .ok_or_else(|| ApiError::not_found(format!("Task {task_id} has no runs")))
    }

    /// createArtifact: stores the artifact (and, for announced types, its `artifact-created`
    /// event in the same transaction) and returns the reply body.
    pub async fn create_artifact(
        &self,
        blobs: &dyn BlobStore,
        task_id: &TaskId,
        run_id: u32,
        name: &str,
        body: &Value,
        now: Ts,
    ) -> ApiResult<Value> {
        check_name(name)?;
        let mut art = from_request(task_id.as_str(), run_id, name, body)?;
        if art.expires < now.plus(-EXPIRES_PAST_MS) {
            return Err(ApiError::input(format!(
                "expires ({}) is more than 15 minutes in the past",
                art.expires
            )));
        }
        if art.storage_type == "s3" {
            art.details["bucket"] = json!(blobs.bucket_name(Bucket::for_name(name)));
        }
        for attempt in 0..MAX_ATTEMPTS {
            let Some((mut rec, status_version)) = self.load(task_id.as_str()).await? else {
                return Err(ApiError::input(format!("Task {task_id} not found")));
            };
            check_run(&rec, run_id, art.expires, now)?;
            let cond = match self.load_artifact(task_id.as_str(), run_id, name).await? {
                Some((old, _)) if !compatible(&old, &art) => {
                    return Err(ApiError::conflict(format!(
                        "Artifact {name} already exists with different properties"
                    )));
                }
                Some((_, v)) => Cond::Version(v),
                None => Cond::NotExists,
            };
            let put = WriteOp::Put {
                table: keys::ARTIFACTS,
                item: art.item()?,
                cond,
            };
            let written = if art.announced() {
                let run = rec.runs.get(run_id as usize).cloned().ok_or_else(|| {
                    ApiError::input(format!("Task {task_id} has no run {run_id}"))
                })?;
                let mut extra = Map::new();
                extra.insert("artifact".into(), art.metadata());
                rec.emit("artifact-created", Some(&run), true, extra);
                let status = WriteOp::Put {
                    table: keys::TASKS,
                    item: Self::status_item(&rec)?,
                    cond: Cond::Version(status_version),
                };
                let r = self.store.transact(vec![status, put]).await;
                if r.is_ok() {
                    // The store bumps a version by one per write.
                    self.after_write(&rec, status_version + 1);
                }
                r
            } else {
                self.store.write(put).await.map(|_| ())
            };
            match written {
                Ok(()) => return self.create_reply(blobs, &art, now).await,
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Err(ApiError::conflict(format!(
            "Artifact {name} is changing too fast; try again"
        )))
    }

    async fn create_reply(
        &self,
        blobs: &dyn BlobStore,
        art: &Artifact,
        now: Ts,
    ) -> ApiResult<Value> {
        if art.storage_type != "s3" {
            return Ok(json!({ "storageType": art.storage_type }));
        }
        let key = Artifact::object_key(&art.task_id, art.run_id, &art.name);
        let url = blobs
            .put_url(
                Bucket::for_name(&art.name),
                &key,
                &art.content_type,
                now,
                PUT_URL_TTL_MS + PUT_URL_SLACK_MS,
            )
            .await
            .map_err(ApiError::internal)?;
        Ok(json!({
            "storageType": "s3",
            "contentType": art.content_type,
            "expires": now.plus(PUT_URL_TTL_MS),
            "putUrl": url,
        }))
    }

    /// Resolves a download: follows links (checking `queue:get-artifact:<name>` of `caller`
    /// on every name reached, the requested one first, so 403 comes before 404), then answers 404 (missing), 410 (expired), 400 (cycle), or
    /// where the bytes are.
    pub async fn resolve_download(
        &self,
        blobs: &dyn BlobStore,
        task_id: &TaskId,
        run_id: Option<u32>,
        name: &str,
        caller: &Caller,
        now: Ts,
    ) -> ApiResult<Download> {
        caller.authorize(&get_artifact(name))?;
        let run_id = match run_id {
            Some(r) => r,
            None => self.latest_run(task_id).await?,
        };
        let mut seen = vec![name.to_string()];
        let mut current = name.to_string();
        loop {
            let art = match self
                .load_artifact(task_id.as_str(), run_id, &current)
                .await?
            {
                Some((a, _)) => a,
                None => {
                    return Err(ApiError::not_found(format!(
                        "Artifact {current} not found for run {run_id} of task {task_id}"
                    )))
                }
            };
            if art.expires < now {
                return Err(ApiError::new(
                    crate::error::ErrorCode::ResourceExpired,
                    format!("Artifact {current} expired at {}", art.expires),
                ));
            }
            match art.storage_type.as_str() {
                "link" => {
                    let target = art.details["artifact"].as_str().unwrap_or_default();
                    if seen.iter().any(|s| s == target) {
                        return Err(ApiError::input(format!(
                            "Artifact links form a cycle: {} -> {target}",
                            seen.join(" -> ")
                        )));
                    }
                    caller.authorize(&get_artifact(target))?;
                    seen.push(target.to_string());
                    current = target.to_string();
                }
                "s3" => {
                    let key = Artifact::object_key(task_id.as_str(), run_id, &current);
                    let url = blobs
                        .get_url(Bucket::for_name(&current), &key, now, GET_URL_TTL_MS)
                        .await
                        .map_err(ApiError::internal)?;
                    return Ok(Download::Url {
                        storage_type: "s3".into(),
                        url,
                    });
                }
                "reference" => {
                    return Ok(Download::Url {
                        storage_type: "reference".into(),
                        url: art.details["url"].as_str().unwrap_or_default().to_string(),
                    })
                }
                "error" => {
                    return Ok(Download::Error {
                        reason: art.details["reason"].as_str().unwrap_or_default().into(),
                        message: art.details["message"].as_str().unwrap_or_default().into(),
                    })
                }
                other => {
                    return Err(ApiError::internal(format!(
                        "artifact {current} has unknown storage type {other}"
                    )))
                }
            }
        }
    }

    /// artifactInfo / latestArtifactInfo: metadata of one artifact (links not followed).
    pub async fn artifact_info(
        &self,
        task_id: &TaskId,
        run_id: Option<u32>,
        name: &str,
    ) -> ApiResult<Value> {
        let run_id = match run_id {
            Some(r) => r,
            None => self.latest_run(task_id).await?,
        };
        match self.load_artifact(task_id.as_str(), run_id, name).await? {
            Some((a, _)) => Ok(a.metadata()),
            None => Err(ApiError::not_found(format!(
                "Artifact {name} not found for run {run_id} of task {task_id}"
            ))),
        }
    }

    /// listArtifacts / listLatestArtifacts: one page of a run's artifacts, in name order.
    pub async fn list_artifacts(
        &self,
        task_id: &TaskId,
        run_id: Option<u32>,
        page: &PageReq,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let Some((rec, _)) = self.load(task_id.as_str()).await? else {
            return Err(ApiError::not_found(format!("Task {task_id} not found")));
        };
        let Some(last) = rec.runs.last().map(|r| r.run_id) else {
            return Err(ApiError::not_found(format!("Task {task_id} has no runs")));
        };
        let run_id = run_id.unwrap_or(last);
        if run_id > last {
            return Err(ApiError::not_found(format!(
                "Run {run_id} of task {task_id} not found"
            )));
        }
        let after = page.token.as_deref().map(decode_token).transpose()?;
        let range = SkRange {
            prefix: Some(keys::artifact_run_prefix(run_id)),
            upto: None,
        };
        let limit = page.limit.max(1);
        // One extra row tells whether a further page exists, so a token never leads nowhere.
        let mut got = self
            .store
            .query(
                keys::ARTIFACTS,
                task_id.as_str(),
                &range,
                after.as_ref(),
                limit + 1,
            )
            .await
            .map_err(ApiError::internal)?
            .items;
        let token = if got.len() > limit {
            got.truncate(limit);
            got.last()
                .map(|i| encode_token(&(i.sk.clone(), i.pk.clone(), i.sk.clone())))
        } else {
            None
        };
        let items = got
            .into_iter()
            .map(|i| decode(i).map(|a| a.metadata()))
            .collect::<ApiResult<Vec<_>>>()?;
        Ok((items, token))
    }

    /// One pass of the artifact expiry reaper: deletes up to `batch` artifacts per shard that
    /// expired before `cutoff`, objects first (so that no object outlives its row unseen),
    /// then rows, each only if unchanged since read. Safe to run twice or concurrently.
    /// Returns how many rows it deleted.
    pub async fn expire_artifacts_once(
        &self,
        blobs: &dyn BlobStore,
        cutoff: Ts,
        batch: usize,
    ) -> ApiResult<usize> {
        let mut due: Vec<(Artifact, u64)> = Vec::new();
        for shard in 0..SHARDS {
            let range = SkRange {
                upto: Some(keys::due_upto(cutoff)),
                ..Default::default()
            };
            let pk = keys::shard_pk(keys::ARTIFACT_EXPIRY, shard);
            let page = self
                .store
                .query_index(
                    keys::ARTIFACTS,
                    keys::ARTIFACT_EXPIRY,
                    &pk,
                    &range,
                    None,
                    batch,
                )
                .await
                .map_err(ApiError::internal)?;
            for item in page.items {
                let v = item.version;
                let a = decode(item)?;
                // The index is only a hint: a re-created artifact may expire later now.
                if a.expires <= cutoff {
                    due.push((a, v));
                }
            }
        }
        for bucket in [Bucket::Public, Bucket::Private] {
            let keys: Vec<String> = due
                .iter()
                .filter(|(a, _)| a.storage_type == "s3" && Bucket::for_name(&a.name) == bucket)
                .map(|(a, _)| Artifact::object_key(&a.task_id, a.run_id, &a.name))
                .collect();
            if !keys.is_empty() {
                blobs
                    .delete(bucket, &keys)
                    .await
                    .map_err(ApiError::internal)?;
            }
        }
        let mut n = 0;
        for (a, v) in due {
            let op = WriteOp::Delete {
                table: keys::ARTIFACTS,
                pk: a.task_id.clone(),
                sk: keys::artifact_sk(a.run_id, &a.name),
                cond: Cond::Version(v),
            };
            match self.store.write(op).await {
                Ok(_) => n += 1,
                Err(e) if e.is_condition_failed() => {}
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Ok(n)
    }

    /// The artifact expiry reaper: passes until nothing is due at `now - grace_ms`.
    pub async fn expire_artifacts(
        &self,
        blobs: &dyn BlobStore,
        now: Ts,
        grace_ms: i64,
    ) -> ApiResult<usize> {
        const BATCH: usize = 100;
        let mut total = 0;
        loop {
            let n = self
                .expire_artifacts_once(blobs, now.plus(-grace_ms), BATCH)
                .await?;
            total += n;
            if n < BATCH {
                return Ok(total);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(kind: &str, ct: &str, expires: i64, details: Value) -> Artifact {
        Artifact {
            task_id: "t".into(),
            run_id: 0,
            name: "n".into(),
            storage_type: kind.into(),
            content_type: ct.into(),
            content_length: None,
            expires: Ts(expires),
            details,
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
    fn artifact_routes_take_names_with_raw_or_encoded_slashes() {
        use crate::api::routes::find;
        use http::Method;
        let (r, p) = find(&Method::GET, "/task/T/runs/0/artifacts/public%2Fa/b%20c").unwrap();
        assert_eq!(
            (r.name, p["name"].as_str()),
            ("getArtifact", "public/a/b c")
        );
        let (r, _) = find(&Method::GET, "/task/T/runs/0/artifacts").unwrap();
        assert_eq!(r.name, "listArtifacts");
        let (r, p) = find(&Method::GET, "/task/T/artifact-info/x/y").unwrap();
        assert_eq!((r.name, p["name"].as_str()), ("latestArtifactInfo", "x/y"));
        let (r, _) = find(&Method::POST, "/task/T/runs/3/artifacts/x").unwrap();
        assert_eq!(r.name, "createArtifact");
        assert!(find(&Method::GET, "/task/T/runs/0/artifacts/").is_none());
    }

    #[test]
    fn metadata_echoes_content_length_only_when_given() {
        let mut a = art("s3", "text/plain", 0, json!({}));
        assert!(a.metadata().get("contentLength").is_none());
        a.content_length = Some(3);
        assert_eq!(a.metadata()["contentLength"], 3);
    }
}
