//! Artifacts: create them, list them, and find where their bytes are. Replies may carry
//! headers (`Location`, the storage type).

use super::{DOWNLOAD_ARTIFACTS, READ_ARTIFACTS, WRITE_ARTIFACTS};
use crate::api::declare::{Call, Endpoint, Reply, Success, Verb, PAGED};
use crate::api::Api;
use crate::error::{ApiResult, ErrorCode};
use crate::handler;
use crate::ids::TaskId;
use crate::queue::artifacts::Download;
use crate::scopes::{Params, Template};
use serde_json::json;

const STORAGE_TYPE_HEADER: &str = "x-taskcluster-artifact-storage-type";

/// Creating or finishing an artifact of a run.
static CREATE_SCOPES: Template = Template::Scope("queue:create-artifact:<taskId>/<runId>");
/// Downloading needs this for every name reached, the requested one and each link target.
static GET_SCOPES: Template = Template::Scope("queue:get-artifact:<name>");
/// Listing a run's artifacts, or reading one's metadata.
static LIST_SCOPES: Template = Template::Scope("queue:list-artifacts:<taskId>:<runId>");
/// The same for the latest run.
static LIST_LATEST_SCOPES: Template = Template::Scope("queue:list-artifacts:<taskId>");

/// Artifacts.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "createArtifact",
        Verb::Post,
        "/task/<taskId>/runs/<runId>/artifacts/<*name>",
        handler!(create),
    )
    .title("Create an artifact of a running run (s3: with a URL to upload to)")
    .scopes(CREATE_SCOPES)
    .input("post-artifact-request")
    .output("post-artifact-response")
    .needs(WRITE_ARTIFACTS),
    Endpoint::new(
        "finishArtifact",
        Verb::Put,
        "/task/<taskId>/runs/<runId>/artifacts/<*name>",
        handler!(finish),
    )
    .title("Mark an object artifact present once its upload is finished")
    .scopes(CREATE_SCOPES)
    .input("finish-artifact-request")
    .success(Success::NoContent)
    .needs(WRITE_ARTIFACTS),
    Endpoint::new(
        "getArtifact",
        Verb::Get,
        "/task/<taskId>/runs/<runId>/artifacts/<*name>",
        handler!(download),
    )
    .title("Redirect to an artifact's bytes")
    .scopes(GET_SCOPES)
    .output("get-artifact-response")
    .success(Success::ArtifactRedirect)
    .errors(&[ErrorCode::ResourceExpired])
    .needs(DOWNLOAD_ARTIFACTS),
    Endpoint::new(
        "getLatestArtifact",
        Verb::Get,
        "/task/<taskId>/artifacts/<*name>",
        handler!(download),
    )
    .title("Redirect to the bytes of an artifact of the latest run")
    .scopes(GET_SCOPES)
    .output("get-artifact-response")
    .success(Success::ArtifactRedirect)
    .errors(&[ErrorCode::ResourceExpired])
    .needs(DOWNLOAD_ARTIFACTS),
    Endpoint::new(
        "listArtifacts",
        Verb::Get,
        "/task/<taskId>/runs/<runId>/artifacts",
        handler!(list),
    )
    .title("The artifacts of a run, in name order")
    .scopes(LIST_SCOPES)
    .output("list-artifacts-response")
    .query(PAGED)
    .needs(READ_ARTIFACTS),
    Endpoint::new(
        "listLatestArtifacts",
        Verb::Get,
        "/task/<taskId>/artifacts",
        handler!(list),
    )
    .title("The artifacts of the latest run, in name order")
    .scopes(LIST_LATEST_SCOPES)
    .output("list-artifacts-response")
    .query(PAGED)
    .needs(READ_ARTIFACTS),
    Endpoint::new(
        "artifactInfo",
        Verb::Get,
        "/task/<taskId>/runs/<runId>/artifact-info/<*name>",
        handler!(info),
    )
    .title("An artifact's metadata")
    .scopes(LIST_SCOPES)
    .output("artifact-response")
    .needs(READ_ARTIFACTS),
    Endpoint::new(
        "latestArtifactInfo",
        Verb::Get,
        "/task/<taskId>/artifact-info/<*name>",
        handler!(info),
    )
    .title("The metadata of an artifact of the latest run")
    .scopes(LIST_LATEST_SCOPES)
    .output("artifact-response")
    .needs(READ_ARTIFACTS),
    Endpoint::new(
        "artifact",
        Verb::Get,
        "/task/<taskId>/runs/<runId>/artifact-content/<*name>",
        handler!(download),
    )
    .title("Where an artifact's bytes are")
    .scopes(GET_SCOPES)
    .output("artifact-content-response")
    .errors(&[ErrorCode::ResourceExpired])
    .needs(DOWNLOAD_ARTIFACTS),
    Endpoint::new(
        "latestArtifact",
        Verb::Get,
        "/task/<taskId>/artifact-content/<*name>",
        handler!(download),
    )
    .title("Where the bytes of an artifact of the latest run are")
    .scopes(GET_SCOPES)
    .output("artifact-content-response")
    .errors(&[ErrorCode::ResourceExpired])
    .needs(DOWNLOAD_ARTIFACTS),
];

/// The runId of the route, or `None` for the latest-run endpoints (which have none).
fn run_of(call: &Call) -> ApiResult<Option<u32>> {
    if call.param("runId").is_empty() {
        Ok(None)
    } else {
        call.run_id().map(Some)
    }
}

/// `queue:list-artifacts` parameters: the task, and the run if the route names one.
fn list_params(call: &Call) -> ApiResult<Params> {
    let params = Params::new().one("taskId", call.task_id()?.as_str());
    Ok(match run_of(call)? {
        Some(r) => params.one("runId", r.to_string()),
        None => params,
    })
}

/// The task and run of the route, once the caller may create artifacts for them.
fn authorize_run(call: &mut Call) -> ApiResult<(TaskId, u32)> {
    let (task_id, run) = (call.task_id()?, call.run_id()?);
    call.authorize(
        &Params::new()
            .one("taskId", task_id.as_str())
            .one("runId", run.to_string()),
    )?;
    Ok((task_id, run))
}

async fn create(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (task_id, run) = authorize_run(call)?;
    let name = call.param("name").to_string();
    let out = api
        .queue
        .create_artifact(
            api.blobs.as_ref(),
            &task_id,
            run,
            &name,
            &call.body,
            call.now,
        )
        .await?;
    Reply::ok(out)
}

/// `finishArtifact`: 204.
async fn finish(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (task_id, run) = authorize_run(call)?;
    api.queue
        .finish_artifact(&task_id, run, call.param("name"), call.body_str("uploadId"))
        .await?;
    Reply::no_content()
}

/// `listArtifacts` and `listLatestArtifacts`.
async fn list(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (task_id, run) = (call.task_id()?, run_of(call)?);
    call.authorize(&list_params(call)?)?;
    let (items, token) = api
        .queue
        .list_artifacts(&task_id, run, &call.page()?)
        .await?;
    Reply::page(json!({ "artifacts": items }), token)
}

/// `artifactInfo` and `latestArtifactInfo`.
async fn info(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (task_id, run) = (call.task_id()?, run_of(call)?);
    call.authorize(&list_params(call)?)?;
    Reply::ok(
        api.queue
            .artifact_info(&task_id, run, call.param("name"))
            .await?,
    )
}

/// `getArtifact`, `getLatestArtifact` (a redirect), `artifact`, `latestArtifact` (the URL).
async fn download(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (task_id, run) = (call.task_id()?, run_of(call)?);
    let name = call.param("name").to_string();
    // 403 for the requested name comes before any lookup.
    call.authorize(&Params::new().one("name", name.as_str()))?;
    let resolved = api
        .queue
        .resolve_download(api.blobs.as_ref(), &task_id, run, &name, call.now)
        .await;
    // Every further name reached (link targets), in order, before whatever it came to.
    for target in resolved.names.iter().skip(1) {
        call.authorize(&Params::new().one("name", target.as_str()))?;
    }
    let redirect = matches!(call.endpoint.name, "getArtifact" | "getLatestArtifact");
    Ok(render(resolved.outcome?, redirect))
}

fn render(dl: Download, redirect: bool) -> Reply {
    let (status, body, headers) = match dl {
        Download::Url { storage_type, url } => {
            let body = json!({ "storageType": storage_type, "url": url });
            let mut headers = vec![(STORAGE_TYPE_HEADER, storage_type)];
            if redirect {
                headers.push(("location", url));
            }
            (if redirect { 303 } else { 200 }, body, headers)
        }
        Download::Object {
            name,
            url,
            credentials,
        } => {
            let headers = vec![(STORAGE_TYPE_HEADER, "object".to_string())];
            if redirect {
                let body = json!({ "storageType": "object", "url": url });
                let mut headers = headers;
                headers.push(("location", url));
                (303, body, headers)
            } else {
                let body = json!({
                    "storageType": "object",
                    "name": name,
                    "credentials": credentials.to_json_both_spellings(),
                });
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
    };
    Reply {
        status,
        body,
        headers,
    }
}
