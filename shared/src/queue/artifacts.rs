//! Artifacts: creation (with upstream's re-creation rules), download resolution (links,
//! errors, expiry), listing and the expiry reaper. Bytes never pass through the queue: they
//! move through URLs from the [`BlobStore`].
//!
//! `artifact-created` events for reference, link and error artifacts go into the task status
//! item's outbox in the same transaction that writes the artifact item, so an event exists
//! exactly when its artifact does.

use super::core::{backoff, chunked, Pass, Queue, MAX_ATTEMPTS, PARALLEL};
use crate::blobs::{BlobStore, Bucket};
use crate::creds::{for_object_download, for_object_upload, TempCredentials};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::check_key_part;
use crate::ids::TaskId;
use crate::page::{PageReq, MAX_PAGE};
use crate::records::artifact::{
    artifact_run_prefix, artifact_sk, check_name, check_run, compatible, decode, from_request,
    Artifact, ARTIFACTS, ARTIFACT_EXPIRY,
};
use crate::records::object::{
    blob_key, decode as decode_object, is_object_item, object_pk, ObjectRecord, OBJECT_SK,
    UPLOAD_TTL_MS,
};
use crate::records::task::TASKS;
use crate::routing::Exchange;
use crate::store::shard::{due_upto, shard_pk, SHARDS};
use crate::store::{Cond, SkRange, WriteOp};
use crate::time::{Budget, Ts, MINUTE, SECOND};
use futures_util::future::try_join_all;
use serde_json::{json, Map, Value};

/// How long a `putUrl` is valid (the reply's `expires`).
pub const PUT_URL_TTL_MS: i64 = 45 * MINUTE;
/// Extra validity of the signed URL beyond the advertised expiry, for slow starts.
const PUT_URL_SLACK_MS: i64 = 10 * SECOND;
/// How long a presigned download URL is valid.
pub const GET_URL_TTL_MS: i64 = 30 * MINUTE;
/// How far in the past an artifact's `expires` may lie at creation (clock drift).
const EXPIRES_PAST_MS: i64 = 15 * MINUTE;
/// Default grace between an artifact's expiry and its deletion (410 in between, then 404).
pub const EXPIRY_GRACE_MS: i64 = 30 * MINUTE;

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
    /// An object artifact: 303 to `url` (getArtifact), or its object's name and credentials
    /// to download it from the object service (artifact).
    Object {
        /// The object's name.
        name: String,
        /// A URL to GET its bytes.
        url: String,
        /// Credentials that may download the object.
        credentials: TempCredentials,
    },
    /// An error artifact: 424 with `{reason, message}`.
    Error {
        /// The reason the worker gave.
        reason: String,
        /// Its message.
        message: String,
    },
}

/// A download followed through its links: every name reached, the requested one first (each
/// needs `queue:get-artifact:<name>`, checked by the caller in this order), and where it
/// ended. The outcome's error (404, 410, a cycle) is only shown to a caller allowed every
/// name reached before it.
#[derive(Debug)]
pub struct Resolved {
    /// The names reached, in order.
    pub names: Vec<String>,
    /// Where the bytes are, or why there are none.
    pub outcome: ApiResult<Download>,
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
            .get(ARTIFACTS, task_id, &artifact_sk(run_id, name))
            .await?;
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
        if art.storage_type == "object" {
            // Its bytes go to an object named after it, which the object service (and so the
            // download helpers) must be able to name too.
            check_key_part(
                "the object artifact's object name (t/<taskId>/<runId>/<name>)",
                &art.object_name(),
            )?;
        }
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
            // The first attempt takes the artifact to be new (a write conditioned on that is
            // refused otherwise), which saves a read per artifact; a repeat reads it.
            let old = if attempt == 0 {
                None
            } else {
                self.load_artifact(task_id.as_str(), run_id, name).await?
            };
            let mut upload = None;
            if art.storage_type == "object" {
                art.details["projectId"] = json!(rec.project_id);
                if let Some((o, _)) = &old {
                    if o.storage_type == "object" && !o.present {
                        // A repeat: the same upload, if nothing else changed.
                        art.details["uploadId"] = o.details["uploadId"].clone();
                    }
                }
                upload = Some(Self::object_upload(&art, now));
            }
            let fresh = old.is_none();
            let cond = match old {
                Some((old, _)) if !compatible(&old, &art) => {
                    return Err(ApiError::conflict(format!(
                        "Artifact {name} already exists with different properties"
                    )));
                }
                Some((_, v)) => Cond::Version(v),
                None => Cond::NotExists,
            };
            let put = WriteOp::Put {
                table: ARTIFACTS,
                item: art.item(rec.expires)?,
                cond,
            };
            let written = if art.announced() {
                self.announce(&mut rec, status_version, &art, put)
                    .await?
                    .map(|()| None)
            } else {
                self.store.write(put).await.map(Some)
            };
            match written {
                Ok(version) => {
                    if let Some(upload) = &upload {
                        self.write_upload_after(&art, upload, fresh.then_some(version).flatten())
                            .await?;
                    }
                    return self.create_reply(blobs, &rec, &art, now).await;
                }
                // A repeat, most likely: read it at once.
                Err(e) if e.is_condition_failed() && attempt == 0 => {}
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Artifact {name} is changing too fast; try again"
        )))
    }

    /// The object of an object artifact, written after its artifact rather than in one
    /// transaction with it (which bills both twice): an object never exists without its
    /// artifact. Written by a call that created the artifact, the object is taken to be new.
    /// If the object cannot be written, an artifact this call `created` (at that version) is
    /// taken back; one left behind (a killed process) is an artifact without bytes, which a
    /// repeated createArtifact, or the worker's createUpload, completes.
    async fn write_upload_after(
        &self,
        art: &Artifact,
        upload: &ObjectRecord,
        created: Option<u64>,
    ) -> ApiResult<()> {
        let result = self.begin_upload(upload, created.is_some()).await;
        if let (Err(_), Some(v)) = (&result, created) {
            let (pk, sk) = (art.task_id.as_str(), artifact_sk(art.run_id, &art.name));
            if let Err(e) = self.delete_row(pk, &sk, v).await {
                tracing::warn!(error = %e, pk, sk, "an object artifact is left without its object");
            }
        }
        result
    }

    /// Writes `put` (an artifact) with its `artifact-created` event in the task's outbox, in
    /// one transaction conditioned on the status item read at `status_version`.
    async fn announce(
        &self,
        rec: &mut crate::records::task::TaskRecord,
        status_version: u64,
        art: &Artifact,
        put: WriteOp,
    ) -> ApiResult<Result<(), crate::store::StoreError>> {
        let run = rec.runs.get(art.run_id as usize).cloned().ok_or_else(|| {
            ApiError::input(format!("Task {} has no run {}", art.task_id, art.run_id))
        })?;
        let mut extra = Map::new();
        extra.insert("artifact".into(), art.metadata());
        rec.emit(Exchange::ArtifactCreated, Some(&run), true, extra);
        let status = WriteOp::Put {
            table: TASKS,
            item: Self::status_item(rec)?,
            cond: Cond::Version(status_version),
        };
        let r = self.store.transact(vec![status, put]).await;
        if r.is_ok() {
            // The store bumps a version by one per write.
            self.after_write(rec, status_version + 1);
        }
        Ok(r)
    }

    /// finishArtifact: marks an object artifact present once its object is finished with the
    /// artifact's uploadId, and announces it (again on every repeat, as upstream: at least
    /// once).
    pub async fn finish_artifact(
        &self,
        task_id: &TaskId,
        run_id: u32,
        name: &str,
        upload_id: &str,
    ) -> ApiResult<()> {
        for attempt in 0..MAX_ATTEMPTS {
            let not_found = || {
                ApiError::not_found(format!(
                    "Artifact {name} not found for run {run_id} of task {task_id}"
                ))
            };
            let Some((mut rec, status_version)) = self.load(task_id.as_str()).await? else {
                return Err(not_found());
            };
            let Some((mut art, v)) = self.load_artifact(task_id.as_str(), run_id, name).await?
            else {
                return Err(not_found());
            };
            if art.storage_type != "object" {
                return Err(ApiError::input(format!(
                    "Only object artifacts can be finished; {name} is {}",
                    art.storage_type
                )));
            }
            if !art.present {
                if art.details["uploadId"].as_str() != Some(upload_id) {
                    return Err(ApiError::input(format!(
                        "Artifact {name} was not created with uploadId {upload_id}"
                    )));
                }
                if !self.object_finished(&art.object_name(), upload_id).await? {
                    return Err(ApiError::input(format!(
                        "The object storing artifact {name} does not exist or is not finished"
                    )));
                }
                art.present = true;
            }
            let put = WriteOp::Put {
                table: ARTIFACTS,
                item: art.item(rec.expires)?,
                cond: Cond::Version(v),
            };
            match self.announce(&mut rec, status_version, &art, put).await? {
                Ok(()) => return Ok(()),
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Artifact {name} is changing too fast; try again"
        )))
    }

    /// The object an object artifact's bytes go to: named after it, with its project, upload
    /// and expiry.
    fn object_upload(art: &Artifact, now: Ts) -> ObjectRecord {
        ObjectRecord {
            unknown: Default::default(),
            name: art.object_name(),
            project_id: art.details["projectId"].as_str().unwrap_or_default().into(),
            upload_id: art.details["uploadId"].as_str().unwrap_or_default().into(),
            expires: art.expires,
            upload_expires: now.plus(UPLOAD_TTL_MS),
            finished: false,
            hashes: Default::default(),
        }
    }

    async fn create_reply(
        &self,
        blobs: &dyn BlobStore,
        rec: &crate::records::task::TaskRecord,
        art: &Artifact,
        now: Ts,
    ) -> ApiResult<Value> {
        if art.storage_type == "object" {
            let run = rec
                .runs
                .get(art.run_id as usize)
                .ok_or_else(|| ApiError::internal("the artifact's run vanished"))?;
            let (project_id, name) = (
                art.details["projectId"].as_str().unwrap_or_default(),
                art.object_name(),
            );
            let creds = for_object_upload(
                &self.issuer.at(now).await,
                &art.task_id,
                run,
                project_id,
                &name,
                art.expires,
                now,
            );
            return Ok(json!({
                "storageType": "object",
                "name": name,
                "projectId": project_id,
                "uploadId": art.details["uploadId"],
                "expires": art.expires,
                "credentials": creds.to_json(),
            }));
        }
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
            .map_err(ApiError::caused_by)?;
        Ok(json!({
            "storageType": "s3",
            "contentType": art.content_type,
            "expires": now.plus(PUT_URL_TTL_MS),
            "putUrl": url,
        }))
    }

    /// Resolves a download: follows links, noting every name reached (see [`Resolved`]),
    /// and ends at where the bytes are, or at 404 (missing), 410 (expired) or 400 (a cycle).
    pub async fn resolve_download(
        &self,
        blobs: &dyn BlobStore,
        task_id: &TaskId,
        run_id: Option<u32>,
        name: &str,
        now: Ts,
    ) -> Resolved {
        let mut names = vec![name.to_string()];
        let outcome = self
            .follow_links(blobs, task_id, run_id, &mut names, now)
            .await;
        Resolved { names, outcome }
    }

    async fn follow_links(
        &self,
        blobs: &dyn BlobStore,
        task_id: &TaskId,
        run_id: Option<u32>,
        seen: &mut Vec<String>,
        now: Ts,
    ) -> ApiResult<Download> {
        let run_id = match run_id {
            Some(r) => r,
            None => self.latest_run(task_id).await?,
        };
        loop {
            let current = seen.last().cloned().unwrap_or_default();
            let art = match self
                .load_artifact(task_id.as_str(), run_id, &current)
                .await?
            {
                Some((a, _)) if a.present => a,
                _ => {
                    return Err(ApiError::not_found(format!(
                        "Artifact {current} not found for run {run_id} of task {task_id}"
                    )))
                }
            };
            if art.expires < now {
                return Err(ApiError::new(
                    ErrorCode::ResourceExpired,
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
                    seen.push(target.to_string());
                }
                "s3" => {
                    let key = Artifact::object_key(task_id.as_str(), run_id, &current);
                    let url = blobs
                        .get_url(Bucket::for_name(&current), &key, now, GET_URL_TTL_MS)
                        .await
                        .map_err(ApiError::caused_by)?;
                    return Ok(Download::Url {
                        storage_type: "s3".into(),
                        url,
                    });
                }
                "object" => {
                    let name = art.object_name();
                    return Ok(Download::Object {
                        url: self.simple_url(blobs, &name, now).await?,
                        credentials: for_object_download(
                            &self.issuer.at(now).await,
                            task_id.as_str(),
                            run_id,
                            &current,
                            &name,
                            now,
                        ),
                        name,
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
            Some((a, _)) if a.present => Ok(a.metadata()),
            _ => Err(ApiError::not_found(format!(
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
        let range = SkRange {
            prefix: Some(artifact_run_prefix(run_id)),
            upto: None,
        };
        let (got, token) = self
            .query_page(ARTIFACTS, task_id.as_str(), &range, page)
            .await?;
        // Unfinished object artifacts are left out (a page may then hold fewer than `limit`).
        let items = got
            .into_iter()
            .map(decode)
            .filter(|a| a.as_ref().map_or(true, |a| a.present))
            .map(|a| a.map(|a| a.metadata()))
            .collect::<ApiResult<Vec<_>>>()?;
        Ok((items, token))
    }

    /// Deletes the artifacts of an expired task (every run's), as [`Queue::expire_task`] does
    /// before the task: the bytes of its `s3` artifacts first, then the rows, each only if
    /// unchanged since read. False, with nothing deleted, while one of them is within its
    /// grace (`cutoff` is now less the grace: downloads answer 410 until then), or if a row
    /// changed meanwhile: a later pass comes back to the task. The bytes of `object`
    /// artifacts belong to their objects, which the reaper deletes through their own entries.
    pub(crate) async fn expire_artifacts_of(
        &self,
        blobs: &dyn BlobStore,
        task_id: &str,
        cutoff: Ts,
    ) -> ApiResult<bool> {
        let mut rows: Vec<(Artifact, u64)> = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .store
                .query(
                    ARTIFACTS,
                    task_id,
                    &SkRange::default(),
                    after.as_ref(),
                    MAX_PAGE,
                )
                .await?;
            for item in page.items {
                let v = item.version;
                let a = decode(item)?;
                if a.expires > cutoff {
                    return Ok(false);
                }
                rows.push((a, v));
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        delete_blobs(blobs, &s3_objects(&rows)).await?;
        for chunk in rows.chunks(PARALLEL) {
            let deleted = try_join_all(chunk.iter().map(|(a, v)| async move {
                let sk = artifact_sk(a.run_id, &a.name);
                self.delete_row(&a.task_id, &sk, *v).await
            }))
            .await?;
            if deleted.contains(&false) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One pass of the artifact expiry reaper: deletes up to `batch` artifacts and objects per
    /// shard that expired before `cutoff` (unfinished uploads a day on), bytes first (so
    /// that no bytes outlive their row unseen), then rows, each only if unchanged since read.
    /// Safe to run twice or concurrently. Stops deleting rows once `budget` is spent (a row
    /// whose bytes went is found again by the next pass, which deletes nothing twice).
    /// Returns how many rows it deleted.
    pub async fn expire_artifacts_once(
        &self,
        blobs: &dyn BlobStore,
        cutoff: Ts,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let mut more = false;
        let mut due: Vec<(Artifact, u64)> = Vec::new();
        let mut objects: Vec<(ObjectRecord, u64)> = Vec::new();
        for shard in 0..SHARDS {
            let range = SkRange {
                upto: Some(due_upto(cutoff)),
                ..Default::default()
            };
            let pk = shard_pk(ARTIFACT_EXPIRY, shard);
            let page = self
                .store
                .query_index(ARTIFACTS, ARTIFACT_EXPIRY, &pk, &range, None, batch)
                .await?;
            more |= page.items.len() >= batch;
            for item in page.items {
                let v = item.version;
                // The index is only a hint: an item may be due later now.
                if is_object_item(&item) {
                    let o = decode_object(item)?;
                    if o.due() <= cutoff {
                        objects.push((o, v));
                    }
                    continue;
                }
                let a = decode(item)?;
                if a.expires <= cutoff {
                    due.push((a, v));
                }
            }
        }
        let mut gone = s3_objects(&due);
        gone.extend(
            objects
                .iter()
                .map(|(o, _)| (Bucket::Private, blob_key(&o.name))),
        );
        delete_blobs(blobs, &gone).await?;
        let rows: Vec<(String, String, u64)> = due
            .iter()
            .map(|(a, v)| (a.task_id.clone(), artifact_sk(a.run_id, &a.name), *v))
            .chain(
                objects
                    .iter()
                    .map(|(o, v)| (object_pk(&o.name), OBJECT_SK.to_string(), *v)),
            )
            .collect();
        let (deleted, cut) =
            chunked(&rows, budget, |(pk, sk, v)| self.delete_row(pk, sk, *v)).await?;
        let done = deleted.into_iter().filter(|d| *d).count();
        let more = more || cut;
        Ok(Pass { done, more })
    }

    /// Deletes a row of the artifacts table if it is still at version `v`; false if it
    /// changed (or went) meanwhile.
    async fn delete_row(&self, pk: &str, sk: &str, v: u64) -> ApiResult<bool> {
        let op = WriteOp::Delete {
            table: ARTIFACTS,
            pk: pk.to_string(),
            sk: sk.to_string(),
            cond: Cond::Version(v),
        };
        match self.store.write(op).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_condition_failed() => Ok(false),
            Err(e) => Err(ApiError::from(e)),
        }
    }
}

/// The bucket and key of each `s3` artifact's bytes among `rows`.
fn s3_objects(rows: &[(Artifact, u64)]) -> Vec<(Bucket, String)> {
    rows.iter()
        .filter(|(a, _)| a.storage_type == "s3")
        .map(|(a, _)| {
            let key = Artifact::object_key(&a.task_id, a.run_id, &a.name);
            (Bucket::for_name(&a.name), key)
        })
        .collect()
}

/// Deletes the objects `gone` (bucket, key), one call per bucket.
async fn delete_blobs(blobs: &dyn BlobStore, gone: &[(Bucket, String)]) -> ApiResult<()> {
    for bucket in [Bucket::Public, Bucket::Private] {
        let keys: Vec<String> = gone
            .iter()
            .filter(|(b, _)| *b == bucket)
            .map(|(_, k)| k.clone())
            .collect();
        if !keys.is_empty() {
            blobs
                .delete(bucket, &keys)
                .await
                .map_err(ApiError::caused_by)?;
        }
    }
    Ok(())
}
