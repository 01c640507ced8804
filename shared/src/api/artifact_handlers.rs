//! The artifact endpoints: parse, authorise (upstream's scopes), call the queue, render. Their
//! replies may carry headers (`Location`, the storage type), hence a dispatcher of their own.

use super::routes::Route;
use super::{Api, Call, Headers};
use crate::artifacts::Download;
use crate::error::{ApiError, ApiResult};
use crate::ids::{parse_run_id, TaskId};
use crate::routes_scopes::{create_artifact, list_artifacts};
use serde_json::{json, Value};

const STORAGE_TYPE_HEADER: &str = "x-taskcluster-artifact-storage-type";

/// True for the endpoints this module serves.
pub(super) fn handles(name: &str) -> bool {
    matches!(
        name,
        "createArtifact"
            | "getArtifact"
            | "getLatestArtifact"
            | "listArtifacts"
            | "listLatestArtifacts"
            | "artifactInfo"
            | "latestArtifactInfo"
            | "artifact"
            | "latestArtifact"
    )
}

fn run_of(call: &Call, latest: bool) -> ApiResult<Option<u32>> {
    if latest {
        Ok(None)
    } else {
        parse_run_id(call.param("runId")).map(Some)
    }
}

/// Routes an artifact call to its handler.
pub(super) async fn dispatch(
    api: &Api,
    route: &Route,
    call: Call,
) -> ApiResult<(u16, Value, Headers)> {
    let q = &api.queue;
    let task_id = TaskId::parse(call.param("taskId"))?;
    let name = call.param("name").to_string();
    match route.name {
        "createArtifact" => {
            let run = parse_run_id(call.param("runId"))?;
            call.caller
                .authorize(&create_artifact(task_id.as_str(), run))?;
            let out = q
                .create_artifact(
                    api.blobs.as_ref(),
                    &task_id,
                    run,
                    &name,
                    &call.body,
                    call.now,
                )
                .await?;
            Ok((200, out, vec![]))
        }
        "listArtifacts" | "listLatestArtifacts" => {
            let run = run_of(&call, route.name == "listLatestArtifacts")?;
            call.caller
                .authorize(&list_artifacts(task_id.as_str(), run))?;
            let (items, token) = q.list_artifacts(&task_id, run, &call.page()?).await?;
            let mut out = json!({ "artifacts": items });
            if let Some(t) = token {
                out["continuationToken"] = json!(t);
            }
            Ok((200, out, vec![]))
        }
        "artifactInfo" | "latestArtifactInfo" => {
            let run = run_of(&call, route.name == "latestArtifactInfo")?;
            call.caller
                .authorize(&list_artifacts(task_id.as_str(), run))?;
            Ok((200, q.artifact_info(&task_id, run, &name).await?, vec![]))
        }
        "getArtifact" | "getLatestArtifact" | "artifact" | "latestArtifact" => {
            let latest = matches!(route.name, "getLatestArtifact" | "latestArtifact");
            let redirect = matches!(route.name, "getArtifact" | "getLatestArtifact");
            let run = run_of(&call, latest)?;
            let dl = q
                .resolve_download(
                    api.blobs.as_ref(),
                    &task_id,
                    run,
                    &name,
                    &call.caller,
                    call.now,
                )
                .await?;
            Ok(render(dl, redirect))
        }
        other => Err(ApiError::internal(format!("route {other} has no handler"))),
    }
}

fn render(dl: Download, redirect: bool) -> (u16, Value, Headers) {
    match dl {
        Download::Url { storage_type, url } => {
            let body = json!({ "storageType": storage_type, "url": url });
            let mut headers = vec![(STORAGE_TYPE_HEADER, storage_type)];
            if redirect {
                headers.push(("location", url));
                (303, body, headers)
            } else {
                (200, body, headers)
            }
        }
        Download::Error { reason, message } => {
            let headers = vec![(STORAGE_TYPE_HEADER, "error".to_string())];
            if redirect {
                (
                    424,
                    json!({ "reason": reason, "message": message }),
                    headers,
                )
            } else {
                let body = json!({ "storageType": "error", "reason": reason, "message": message });
                (200, body, headers)
            }
        }
    }
}
