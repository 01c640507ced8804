//! The object service's operations: uploads (inline or through a signed URL), finishing them
//! (the bytes are hashed once and checked against the hashes given), and downloads. Objects
//! share the artifacts table and reaper (see [`crate::records::object`]); the queue's object
//! artifacts are objects named `t/<taskId>/<runId>/<name>`.

use super::core::{backoff, Queue, MAX_ATTEMPTS};
use crate::blobs::{BlobDigest, BlobStore, Bucket};
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::records::artifact::ARTIFACTS;
use crate::records::object::{
    add_hashes, blob_key, check_name, decode, hashes_of, object_pk, ObjectRecord, OBJECT_SK,
    UPLOAD_TTL_MS,
};
use crate::store::{Cond, WriteOp};
use crate::time::{Ts, MINUTE, SECOND};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// How long a `putUrl` is advertised as valid.
const PUT_URL_TTL_MS: i64 = 45 * MINUTE;
/// Extra validity of the signed URL beyond the advertised expiry, for slow starts.
const PUT_URL_SLACK_MS: i64 = 10 * SECOND;
/// A `getUrl` download's advertised validity (clients ask again after it)...
const GET_URL_EXPIRES_MS: i64 = MINUTE;
/// ...and the signed URL's own, longer so that a download started in time completes.
const GET_URL_TTL_MS: i64 = 2 * MINUTE;
/// How long a `simple` download URL is valid.
const SIMPLE_URL_TTL_MS: i64 = 30 * MINUTE;

/// What a caller accepts from startDownload.
#[derive(Debug, Clone, Copy, Default)]
pub struct Accept {
    /// `getUrl`: a short-lived URL and the hashes to check.
    pub get_url: bool,
    /// `simple`: a URL alone.
    pub simple: bool,
}

impl Queue {
    pub(crate) async fn load_object(&self, name: &str) -> ApiResult<Option<(ObjectRecord, u64)>> {
        match self
            .store
            .get(ARTIFACTS, &object_pk(name), OBJECT_SK)
            .await?
        {
            Some(i) => {
                let v = i.version;
                Ok(Some((decode(i)?, v)))
            }
            None => Ok(None),
        }
    }

    /// A finished object, or `404`.
    async fn finished_object(&self, name: &str) -> ApiResult<ObjectRecord> {
        match self.load_object(name).await? {
            Some((o, _)) if o.finished => Ok(o),
            _ => Err(ApiError::not_found(format!("Object {name} not found"))),
        }
    }

    /// The object item a new upload writes: `upload` or, for a repeat of the same upload
    /// (same project, uploadId and expiry, not finished), the stored one with `hashes` added.
    /// Anything else is `409`. Returns the write to make, if any.
    pub(crate) fn upload_write(
        existing: Option<(ObjectRecord, u64)>,
        upload: &ObjectRecord,
    ) -> ApiResult<Option<WriteOp>> {
        let (item, cond) = match existing {
            None => (upload.item()?, Cond::NotExists),
            Some((mut old, v)) => {
                let same = !old.finished
                    && old.upload_id == upload.upload_id
                    && old.project_id == upload.project_id
                    && old.expires == upload.expires;
                if !same {
                    return Err(ApiError::conflict(format!(
                        "Object {} already exists",
                        upload.name
                    )));
                }
                let before = old.hashes.clone();
                add_hashes(&mut old.hashes, &upload.hashes)?;
                if old.hashes == before {
                    return Ok(None);
                }
                (old.item()?, Cond::Version(v))
            }
        };
        Ok(Some(WriteOp::Put {
            table: ARTIFACTS,
            item,
            cond,
        }))
    }

    /// Records a new upload (or confirms a repeat of it): the object exists, unfinished,
    /// from then on. With `likely_new` the first attempt takes the object to be new and
    /// writes without reading it (a refused write reads it); otherwise it reads first, as a
    /// refused write would cost a write unit.
    pub(crate) async fn begin_upload(
        &self,
        upload: &ObjectRecord,
        likely_new: bool,
    ) -> ApiResult<()> {
        for attempt in 0..MAX_ATTEMPTS {
            let unread = likely_new && attempt == 0;
            let existing = if unread {
                None
            } else {
                self.load_object(&upload.name).await?
            };
            let Some(op) = Self::upload_write(existing, upload)? else {
                return Ok(());
            };
            match self.store.write(op).await {
                Ok(_) => return Ok(()),
                // It was there after all: read it at once.
                Err(e) if e.is_condition_failed() && unread => {}
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Object {} is changing too fast; try again",
            upload.name
        )))
    }

    /// createUpload: records the upload, then stores inline data or hands out a signed PUT
    /// URL (inline data is preferred when both are proposed). Returns the reply body.
    pub async fn create_upload(
        &self,
        blobs: &dyn BlobStore,
        name: &str,
        body: &Value,
        now: Ts,
    ) -> ApiResult<Value> {
        check_name(name)?;
        let expires = body["expires"]
            .as_str()
            .and_then(Ts::parse)
            .ok_or_else(|| ApiError::input("expires must be a date-time"))?;
        let upload = ObjectRecord {
            unknown: Default::default(),
            name: name.to_string(),
            project_id: body["projectId"].as_str().unwrap_or_default().to_string(),
            upload_id: body["uploadId"].as_str().unwrap_or_default().to_string(),
            expires,
            upload_expires: now.plus(UPLOAD_TTL_MS),
            finished: false,
            hashes: hashes_of(&body["hashes"]),
        };
        let proposed = &body["proposedUploadMethods"];
        // Decoded before anything is written: bad data changes nothing.
        let inline = match proposed.get("dataInline") {
            Some(d) => Some((
                d["contentType"].as_str().unwrap_or_default(),
                base64::engine::general_purpose::STANDARD
                    .decode(d["objectData"].as_str().unwrap_or_default())
                    .map_err(|e| ApiError::input(format!("objectData is not base64: {e}")))?,
            )),
            None => None,
        };
        self.begin_upload(&upload, false).await?;
        let key = blob_key(name);
        let method = if let Some((content_type, bytes)) = inline {
            blobs
                .put(Bucket::Private, &key, content_type, bytes)
                .await
                .map_err(ApiError::caused_by)?;
            json!({ "dataInline": true })
        } else if let Some(p) = proposed.get("putUrl") {
            let content_type = p["contentType"].as_str().unwrap_or_default();
            let url = blobs
                .put_url(
                    Bucket::Private,
                    &key,
                    content_type,
                    now,
                    PUT_URL_TTL_MS + PUT_URL_SLACK_MS,
                )
                .await
                .map_err(ApiError::caused_by)?;
            json!({ "putUrl": {
                "url": url,
                "expires": now.plus(PUT_URL_TTL_MS),
                "headers": {
                    "Content-Type": content_type,
                    "Content-Length": p["contentLength"].as_u64().unwrap_or(0).to_string(),
                },
            }})
        } else {
            json!({})
        };
        Ok(json!({
            "projectId": upload.project_id,
            "uploadId": upload.upload_id,
            "expires": upload.expires,
            "uploadMethod": method,
        }))
    }

    /// finishUpload: hashes the uploaded bytes once, checks them against the hashes given
    /// (at createUpload or now) and marks the object finished, downloadable from then on.
    /// Repeats of a finished upload succeed while their hashes agree.
    pub async fn finish_upload(
        &self,
        blobs: &dyn BlobStore,
        name: &str,
        body: &Value,
    ) -> ApiResult<()> {
        check_name(name)?;
        let (project_id, upload_id) = (
            body["projectId"].as_str().unwrap_or_default(),
            body["uploadId"].as_str().unwrap_or_default(),
        );
        let given = hashes_of(&body["hashes"]);
        for attempt in 0..MAX_ATTEMPTS {
            let Some((mut obj, v)) = self.load_object(name).await? else {
                return Err(ApiError::not_found(format!("Object {name} not found")));
            };
            if obj.project_id != project_id {
                return Err(ApiError::input(format!(
                    "Object {name} belongs to another project"
                )));
            }
            if obj.finished {
                return match given.iter().find(|(a, h)| obj.hashes.get(*a) != Some(*h)) {
                    None => Ok(()),
                    Some((alg, _)) => Err(ApiError::conflict(format!(
                        "Object {name} is already finished, with another or no {alg} hash"
                    ))),
                };
            }
            if obj.upload_id != upload_id {
                return Err(ApiError::conflict(format!(
                    "Object {name} does not have uploadId {upload_id}"
                )));
            }
            add_hashes(&mut obj.hashes, &given)?;
            let digest = blobs
                .digest(Bucket::Private, &blob_key(name))
                .await
                .map_err(ApiError::caused_by)?
                .ok_or_else(|| {
                    ApiError::input(format!("No data has been uploaded for object {name}"))
                })?;
            check_digest(name, &obj.hashes, &digest)?;
            obj.hashes.insert("sha256".into(), digest.sha256);
            obj.hashes.insert("sha512".into(), digest.sha512);
            obj.finished = true;
            let op = WriteOp::Put {
                table: ARTIFACTS,
                item: obj.item()?,
                cond: Cond::Version(v),
            };
            match self.store.write(op).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_condition_failed() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(format!(
            "Object {name} is changing too fast; try again"
        )))
    }

    /// startDownload: `getUrl` (preferred: a short-lived URL and the hashes) or `simple`;
    /// `406 NoMatchingMethod` if the caller accepts neither.
    pub async fn start_download(
        &self,
        blobs: &dyn BlobStore,
        name: &str,
        accept: Accept,
        now: Ts,
    ) -> ApiResult<Value> {
        let obj = self.finished_object(name).await?;
        if accept.get_url {
            let url = blobs
                .get_url(Bucket::Private, &blob_key(name), now, GET_URL_TTL_MS)
                .await
                .map_err(ApiError::caused_by)?;
            return Ok(json!({
                "method": "getUrl",
                "url": url,
                "expires": now.plus(GET_URL_EXPIRES_MS),
                "hashes": obj.hashes,
            }));
        }
        if accept.simple {
            return Ok(
                json!({ "method": "simple", "url": self.simple_url(blobs, name, now).await? }),
            );
        }
        Err(ApiError::new(
            ErrorCode::NoMatchingMethod,
            format!("Object {name} supports the download methods getUrl and simple"),
        ))
    }

    /// A URL to GET a finished object's bytes, valid half an hour (`download`, and the
    /// queue's redirects to object artifacts).
    pub async fn simple_url(
        &self,
        blobs: &dyn BlobStore,
        name: &str,
        now: Ts,
    ) -> ApiResult<String> {
        blobs
            .get_url(Bucket::Private, &blob_key(name), now, SIMPLE_URL_TTL_MS)
            .await
            .map_err(ApiError::caused_by)
    }

    /// A finished object's download URL (`download`), or `404`.
    pub async fn object_download_url(
        &self,
        blobs: &dyn BlobStore,
        name: &str,
        now: Ts,
    ) -> ApiResult<String> {
        self.finished_object(name).await?;
        self.simple_url(blobs, name, now).await
    }

    /// `object`: a finished object's project, expiry and hashes, or `404`.
    pub async fn object_metadata(&self, name: &str) -> ApiResult<Value> {
        Ok(self.finished_object(name).await?.metadata())
    }

    /// True if the object exists and is finished with this uploadId.
    pub(crate) async fn object_finished(&self, name: &str, upload_id: &str) -> ApiResult<bool> {
        Ok(self
            .load_object(name)
            .await?
            .is_some_and(|(o, _)| o.finished && o.upload_id == upload_id))
    }
}

/// `400` if a sha256 or sha512 hash given differs from the bytes' own.
fn check_digest(name: &str, hashes: &BTreeMap<String, String>, d: &BlobDigest) -> ApiResult<()> {
    for (alg, actual) in [("sha256", &d.sha256), ("sha512", &d.sha512)] {
        if let Some(expected) = hashes.get(alg) {
            if expected != actual {
                return Err(ApiError::input(format!(
                    "The {alg} hash given for object {name} ({expected}) is not that of its {} uploaded bytes ({actual})",
                    d.len
                )));
            }
        }
    }
    Ok(())
}
