//! The object service's endpoints (`/api/object/v1/`), as upstream's: uploads negotiated
//! with `createUpload` (inline data or a signed PUT URL) and finished with `finishUpload`,
//! downloads with `startDownload` (`getUrl` or `simple`), `object` metadata and `download`.
//! One Lambda function each. The queue's object artifacts are objects of this service.

use super::declare::{Access, Call, Endpoint, Functions, Need, Reply, Service, Success, Verb};
use super::endpoints::monitoring;
use super::Api;
use crate::error::{ApiResult, ErrorCode};
use crate::handler;
use crate::queue::objects::Accept;
use crate::records::artifact::ARTIFACTS;
use crate::scopes::{Params, Template};
use serde_json::json;

/// Writes objects and their bytes (inline data, signed upload URLs).
const WRITE_OBJECTS: &[Need] = &[
    Need::Table(ARTIFACTS, Access::Write),
    Need::Buckets(Access::Write),
];
/// Reads objects and hands out download URLs (signed with the function's own rights).
const DOWNLOAD_OBJECTS: &[Need] = &[
    Need::Table(ARTIFACTS, Access::Read),
    Need::Buckets(Access::Read),
];

/// Uploading needs this, with the project of the body.
static UPLOAD_SCOPES: Template = Template::Scope("object:upload:<projectId>:<name>");
/// Downloading, or reading an object's metadata.
static DOWNLOAD_SCOPES: Template = Template::Scope("object:download:<name>");

/// The object service's own endpoints.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "createUpload",
        Verb::Put,
        "/upload/<*name>",
        handler!(create_upload),
    )
    .title("Begin an upload: inline data, or a signed URL to PUT the bytes to")
    .scopes(UPLOAD_SCOPES)
    .input("object-create-upload-request")
    .output("object-create-upload-response")
    .needs(WRITE_OBJECTS),
    Endpoint::new(
        "finishUpload",
        Verb::Post,
        "/finish-upload/<*name>",
        handler!(finish_upload),
    )
    .title("Finish an upload: its bytes are hashed and checked, then downloadable")
    .scopes(UPLOAD_SCOPES)
    .input("object-finish-upload-request")
    .needs(WRITE_OBJECTS),
    Endpoint::new(
        "startDownload",
        Verb::Put,
        "/start-download/<*name>",
        handler!(start_download),
    )
    .title("Begin a download: a URL to fetch, and the hashes to check")
    .scopes(DOWNLOAD_SCOPES)
    .input("object-start-download-request")
    .output("object-start-download-response")
    .errors(&[ErrorCode::NoMatchingMethod])
    .needs(DOWNLOAD_OBJECTS),
    Endpoint::new("object", Verb::Get, "/metadata/<*name>", handler!(metadata))
        .title("An object's project, expiry and hashes")
        .scopes(DOWNLOAD_SCOPES)
        .output("object-metadata-response")
        .needs(&[Need::Table(ARTIFACTS, Access::Read)]),
    Endpoint::new(
        "download",
        Verb::Get,
        "/download/<*name>",
        handler!(download),
    )
    .title("Redirect to an object's bytes")
    .scopes(DOWNLOAD_SCOPES)
    .success(Success::Redirect)
    .needs(DOWNLOAD_OBJECTS),
];

/// The object service: `/api/object/v1/`, one function per endpoint, named `object<Name>`.
pub static OBJECT: Service = Service {
    name: "object",
    title: "Object",
    prefix: "/api/object/v1",
    groups: &[monitoring::ENDPOINTS, ENDPOINTS],
    functions: Functions::PerEndpoint { prefix: "object" },
    exchanges: None,
    serves_documents: false,
    authority: false,
};

/// Checks `object:upload:<projectId>:<name>`, the project taken from the body.
fn authorize_upload(call: &mut Call) -> ApiResult<String> {
    let name = call.param("name").to_string();
    let project = call.body_str("projectId").to_string();
    call.authorize(
        &Params::new()
            .one("projectId", project.as_str())
            .one("name", name.as_str()),
    )?;
    Ok(name)
}

/// Checks `object:download:<name>`.
fn authorize_download(call: &mut Call) -> ApiResult<String> {
    let name = call.param("name").to_string();
    call.authorize(&Params::new().one("name", name.as_str()))?;
    Ok(name)
}

async fn create_upload(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let name = authorize_upload(call)?;
    Reply::ok(
        api.queue
            .create_upload(api.blobs.as_ref(), &name, &call.body, call.now)
            .await?,
    )
}

async fn finish_upload(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let name = authorize_upload(call)?;
    api.queue
        .finish_upload(api.blobs.as_ref(), &name, &call.body)
        .await?;
    Reply::ok(json!({}))
}

async fn start_download(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let name = authorize_download(call)?;
    let methods = &call.body["acceptDownloadMethods"];
    let accept = Accept {
        get_url: methods["getUrl"] == true,
        simple: methods["simple"] == true,
    };
    Reply::ok(
        api.queue
            .start_download(api.blobs.as_ref(), &name, accept, call.now)
            .await?,
    )
}

async fn metadata(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let name = authorize_download(call)?;
    Reply::ok(api.queue.object_metadata(&name).await?)
}

async fn download(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let name = authorize_download(call)?;
    let url = api
        .queue
        .object_download_url(api.blobs.as_ref(), &name, call.now)
        .await?;
    Ok(Reply {
        status: 303,
        body: json!({ "method": "simple", "url": url }),
        headers: vec![("location", url)],
    })
}
