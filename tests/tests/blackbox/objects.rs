//! The object service and object artifacts, end to end: the official upload and download
//! helpers (Python `taskcluster.upload` / `taskcluster.download`, the Rust crates
//! `taskcluster-upload` / `taskcluster-download`, the npm client's `upload` / `download` /
//! `downloadArtifact`) round-trip bytes with their hashes checked;
//! a worker creates, uploads and finishes an object artifact that readers then download;
//! every error of the list; expiry. With `TCQ_TEST_BACKEND=localstack` the bytes
//! live in S3 on LocalStack (signature validation on).

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256, Sha512};
use shared::queue::objects::Accept;
use shared::time::{Ts, DAY, HOUR};
use taskcluster::chrono::{Duration as ChronoDuration, Utc};

const MIB: usize = 1024 * 1024;

/// Bytes that neither compress nor repeat.
fn data_of(size: usize, seed: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    let mut block = seed.as_bytes().to_vec();
    while out.len() < size {
        block = Sha512::digest(&block).to_vec();
        out.extend_from_slice(&block);
    }
    out.truncate(size);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

fn object_client(app: &TestServer, creds: Option<taskcluster::Credentials>) -> taskcluster::Object {
    taskcluster::Object::new(builder(&app.root_url(), creds)).expect("client")
}

fn root_object(app: &TestServer) -> taskcluster::Object {
    object_client(app, Some(root_credentials()))
}

fn object_url(app: &TestServer, path: &str) -> String {
    format!("{}/api/object/v1{path}", app.root_url())
}

/// A raw call to the object service as root.
async fn object_raw(app: &TestServer, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let bytes = Some(body.to_string().into_bytes());
    raw_url(
        &object_url(app, path),
        method,
        Some("application/json"),
        bytes,
    )
    .await
}

fn upload_body(upload_id: &str, methods: Value) -> Value {
    json!({
        "projectId": "proj",
        "uploadId": upload_id,
        "expires": ts(DAY),
        "proposedUploadMethods": methods,
    })
}

/// A task whose definition adds `extra`, claimed: its id and a client with the claim's
/// credentials, as its worker holds them.
async fn claimed_task(app: &TestServer, extra: Value) -> (String, taskcluster::Queue) {
    let tq = task_queue_id();
    let id = create(app, &def_with(&tq, extra)).await;
    let claim = claim_one(app, &tq, "grp", "wkr").await;
    (id, app.queue_as(Some(credentials_of(&claim))))
}

/// PUTs `bytes` to a putUrl upload method with exactly its headers: the status.
async fn put_with_headers(method: &Value, bytes: Vec<u8>) -> u16 {
    let mut req = reqwest::Client::new().put(method["url"].as_str().expect("url"));
    for (k, v) in method["headers"].as_object().expect("headers") {
        req = req.header(k.as_str(), v.as_str().unwrap_or_default());
    }
    req.body(bytes)
        .send()
        .await
        .expect("PUT sent")
        .status()
        .as_u16()
}

#[tokio::test]
async fn the_python_helpers_round_trip_objects_and_object_artifacts() {
    let app = spawn_app().await;
    let sizes = [0, 1024, 20 * MIB];
    let envs = [
        ("TASK_QUEUE_ID", task_queue_id()),
        ("PREFIX", format!("py/{}", slugid())),
        ("SIZES", sizes.map(|s| s.to_string()).join(",")),
    ];
    let Some(out) = run_python(&app, "object_flow.py", &envs).await else {
        return;
    };
    for size in sizes {
        let o = &out["objects"][size.to_string()];
        assert_eq!(o["sent"], o["got"], "{size} bytes: {o}");
        assert_eq!(o["contentType"], "application/x-test");
    }
    let id = out["taskId"].as_str().expect("taskId");
    for size in sizes {
        let a = &out["artifacts"][size.to_string()];
        assert_eq!(a["sent"], a["latest"], "{size} bytes: {a}");
        assert_eq!(a["sent"], a["run0"], "{size} bytes: {a}");
        assert_eq!(a["contentType"], "application/x-test");
        let object_name = format!("t/{id}/0/public/build/{size}.bin");
        assert_eq!(a["objectName"], object_name.as_str());
        assert_eq!(
            a["uploadClientId"],
            format!("artifact-upload/{id}/0/on/py/w1")
        );
        // The object holds the sha256 of what was sent, in the task's project.
        let meta = root_object(&app)
            .object(&object_name)
            .await
            .expect("object");
        assert_eq!(meta["hashes"]["sha256"], a["sent"]);
        assert_eq!(meta["projectId"], "none");
    }
}

/// The npm client's `upload`, `download` and `downloadArtifact` (`tests/node/object_flow.js`).
#[tokio::test]
async fn the_npm_helpers_round_trip_objects_and_object_artifacts() {
    let app = spawn_app().await;
    let sizes = [0, 1024, 20 * MIB];
    let envs = [
        ("TASK_QUEUE_ID", task_queue_id()),
        ("PREFIX", format!("node/{}", slugid())),
        ("SIZES", sizes.map(|s| s.to_string()).join(",")),
    ];
    let Some(out) = run_node(&app, "object_flow.js", &envs).await else {
        return;
    };
    let id = out["taskId"].as_str().expect("taskId");
    for size in sizes {
        let o = &out["objects"][size.to_string()];
        assert_eq!(o["sent"], o["got"], "{size} bytes: {o}");
        assert_eq!(o["contentType"], "application/x-test");
        let a = &out["artifacts"][size.to_string()];
        assert_eq!(a["sent"], a["latest"], "{size} bytes: {a}");
        assert_eq!(a["sent"], a["run0"], "{size} bytes: {a}");
        assert_eq!(a["contentType"], "application/x-test");
        assert_eq!(a["objectName"], format!("t/{id}/0/public/build/{size}.bin"));
    }
}

#[tokio::test]
async fn the_rust_crates_round_trip_objects_and_object_artifacts() {
    let app = spawn_app().await;
    let obj = root_object(&app);
    let retry = taskcluster::Retry::default();
    let expires = Utc::now() + ChronoDuration::days(1);
    let prefix = format!("rs/{}", slugid());
    for size in [0, 1024, 20 * MIB] {
        let data = data_of(size, &format!("rust-{size}"));
        let name = format!("{prefix}/{size}.bin");
        let upload_id = slugid();
        taskcluster_upload::upload_from_buf(
            "rs-project",
            &name,
            "application/x-test",
            &expires,
            &data,
            &retry,
            &obj,
            &upload_id,
        )
        .await
        .unwrap_or_else(|e| panic!("upload of {size} bytes: {e:#}"));
        let (got, ct) = taskcluster_download::download_to_vec(&name, &retry, &obj)
            .await
            .unwrap_or_else(|e| panic!("download of {size} bytes: {e:#}"));
        assert_eq!(got.len(), size);
        assert!(got == data, "{size} bytes came back different");
        assert_eq!(ct, "application/x-test");
        let meta = obj.object(&name).await.expect("object");
        assert_eq!(meta["hashes"]["sha256"], sha256(&data).as_str());
        assert_eq!(
            meta["hashes"]["sha512"],
            hex(&Sha512::digest(&data)).as_str()
        );
    }

    // An object artifact, uploaded with the credentials createArtifact hands out and read
    // back with download_artifact_to_vec (which reads them as client_id / access_token).
    let (id, worker) = claimed_task(&app, json!({})).await;
    let root = app.queue();
    for size in [0, 1024, 20 * MIB] {
        let name = format!("private/out/{size}.bin");
        let created = worker
            .createArtifact(
                &id,
                "0",
                &name,
                &json!({"storageType": "object", "expires": ts(DAY), "contentType": "application/x-test"}),
            )
            .await
            .expect("createArtifact");
        let data = data_of(size, &format!("rust-artifact-{size}"));
        let artifact_expires = created["expires"]
            .as_str()
            .and_then(|e| e.parse::<taskcluster::chrono::DateTime<Utc>>().ok())
            .expect("expires");
        taskcluster_upload::upload_from_buf(
            created["projectId"].as_str().expect("projectId"),
            created["name"].as_str().expect("name"),
            "application/x-test",
            &artifact_expires,
            &data,
            &retry,
            &object_client(&app, Some(credentials_of(&created))),
            created["uploadId"].as_str().expect("uploadId"),
        )
        .await
        .expect("upload with the artifact's credentials");
        worker
            .finishArtifact(&id, "0", &name, &json!({"uploadId": created["uploadId"]}))
            .await
            .expect("finishArtifact");
        for run in [Some("0"), None] {
            let (got, ct) =
                taskcluster_download::download_artifact_to_vec(&id, run, &name, &retry, &root)
                    .await
                    .unwrap_or_else(|e| panic!("download_artifact_to_vec({run:?}): {e:#}"));
            assert!(got == data, "the {size}-byte artifact came back different");
            assert_eq!(ct, "application/x-test");
        }
    }
}

#[tokio::test]
async fn a_worker_creates_uploads_and_finishes_an_object_artifact() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"projectId": "my-project"}))).await;
    let claim = claim_one(&app, &tq, "grp", "wkr").await;
    let worker = app.queue_as(Some(credentials_of(&claim)));
    let name = "public/logs/build log.txt";
    let body = json!({"storageType": "object", "expires": ts(DAY), "contentType": "text/plain"});
    let created = worker
        .createArtifact(&id, "0", name, &body)
        .await
        .expect("createArtifact");
    let object_name = format!("t/{id}/0/{name}");
    assert_eq!(created["storageType"], "object");
    assert_eq!(created["name"], object_name.as_str());
    assert_eq!(created["projectId"], "my-project");
    let upload_id = created["uploadId"].as_str().expect("uploadId").to_string();
    // A repeat (a retried request) gets the same upload; other fields are a conflict.
    let again = worker
        .createArtifact(&id, "0", name, &body)
        .await
        .expect("repeat");
    assert_eq!(again["uploadId"], upload_id.as_str());
    let other = json!({"storageType": "object", "expires": ts(DAY), "contentType": "text/html"});
    assert_eq!(
        err_status(worker.createArtifact(&id, "0", name, &other).await),
        409
    );

    // Not listed, not downloadable, not even described until finished.
    let list = app
        .queue()
        .listArtifacts(&id, "0", None, None)
        .await
        .expect("list");
    assert_eq!(list["artifacts"], json!([]), "{list}");
    let q = app.queue();
    assert_eq!(err_status(q.latestArtifact(&id, name).await), 404);
    assert_eq!(err_status(q.artifactInfo(&id, "0", name).await), 404);
    // finishArtifact before the object is finished: 400, and still absent.
    let finish = json!({"uploadId": upload_id});
    assert_eq!(
        unit_err_status(worker.finishArtifact(&id, "0", name, &finish).await),
        400
    );

    // Upload through the object service with the artifact's credentials, by putUrl.
    let creds = credentials_of(&created);
    let uploader = object_client(&app, Some(creds));
    let bytes = b"line 1\nline 2\n".to_vec();
    let up = uploader
        .createUpload(
            &object_name,
            &json!({
                "projectId": "my-project", "uploadId": upload_id, "expires": created["expires"],
                "proposedUploadMethods": {"putUrl": {"contentType": "text/plain", "contentLength": bytes.len()}},
            }),
        )
        .await
        .expect("createUpload");
    let put = &up["uploadMethod"]["putUrl"];
    assert_eq!(put["headers"]["Content-Type"], "text/plain");
    assert_eq!(put_with_headers(put, bytes.clone()).await, 200);
    // The credentials upload this object only.
    let elsewhere = uploader
        .createUpload(
            &format!("{object_name}.other"),
            &upload_body(&slugid(), json!({})),
        )
        .await;
    assert_eq!(err_status(elsewhere), 403);
    uploader
        .finishUpload(
            &object_name,
            &json!({"projectId": "my-project", "uploadId": upload_id, "hashes": {"sha256": sha256(&bytes)}}),
        )
        .await
        .expect("finishUpload");
    worker
        .finishArtifact(&id, "0", name, &finish)
        .await
        .expect("finishArtifact");
    // Repeats are harmless (and announce again).
    worker
        .finishArtifact(&id, "0", name, &finish)
        .await
        .expect("finishArtifact again");
    // Once finished, the same createArtifact is a conflict.
    assert_eq!(
        err_status(worker.createArtifact(&id, "0", name, &body).await),
        409
    );

    let created_event = app
        .wait_for_event(std::time::Duration::from_secs(10), |e| {
            e.exchange.ends_with("artifact-created") && e.payload["status"]["taskId"] == id.as_str()
        })
        .await
        .expect("artifact-created once finished");
    assert_eq!(created_event.payload["artifact"]["storageType"], "object");
    assert_eq!(created_event.payload["artifact"]["name"], name);

    let list = app
        .queue()
        .listArtifacts(&id, "0", None, None)
        .await
        .expect("list");
    assert_eq!(list["artifacts"][0]["name"], name, "{list}");
    assert_eq!(list["artifacts"][0]["storageType"], "object");
    complete(&app, &id, 0).await;

    // getLatestArtifact redirects to the bytes (anonymous: public/ artifacts need no scopes).
    let path = format!("/task/{id}/artifacts/{}", name.replace('/', "%2F"));
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
        .get(app.url(&path))
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["x-taskcluster-artifact-storage-type"], "object");
    let location = r.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    let got = reqwest::get(&location).await.expect("GET bytes");
    assert_eq!(got.status().as_u16(), 200);
    assert_eq!(got.bytes().await.expect("bytes").to_vec(), bytes);
    // `artifact` gives the object and credentials that may download it (and nothing else).
    let content = q.artifact(&id, "0", name).await.expect("artifact");
    assert_eq!(content["storageType"], "object");
    assert_eq!(content["name"], object_name.as_str());
    let reader = object_client(&app, Some(credentials_of(&content)));
    let dl = reader
        .startDownload(
            &object_name,
            &json!({"acceptDownloadMethods": {"getUrl": true}}),
        )
        .await
        .expect("startDownload");
    assert_eq!(dl["hashes"]["sha256"], sha256(&bytes).as_str());
    assert_eq!(
        err_status(reader.object(&format!("t/{id}/0/other")).await),
        403
    );

    // A link to an object artifact (here one uploaded inline) leads to its bytes.
    let link = json!({"storageType": "link", "expires": ts(HOUR), "contentType": "text/plain", "artifact": name});
    let id3 = create(&app, &task_def(&tq)).await;
    let claim3 = claim_one(&app, &tq, "grp", "wkr").await;
    assert_eq!(claim3["status"]["taskId"], id3.as_str());
    let obj3 = q
        .createArtifact(
            &id3,
            "0",
            name,
            &json!({"storageType": "object", "expires": ts(DAY), "contentType": "text/plain"}),
        )
        .await
        .expect("object artifact");
    let up3 = root_object(&app)
        .createUpload(
            obj3["name"].as_str().unwrap_or_default(),
            &json!({"projectId": obj3["projectId"], "uploadId": obj3["uploadId"], "expires": obj3["expires"],
                    "proposedUploadMethods": {"dataInline": {"contentType": "text/plain", "objectData": "aGk="}}}),
        )
        .await
        .expect("inline upload");
    assert_eq!(up3["uploadMethod"], json!({"dataInline": true}));
    root_object(&app)
        .finishUpload(
            obj3["name"].as_str().unwrap_or_default(),
            &json!({"projectId": obj3["projectId"], "uploadId": obj3["uploadId"]}),
        )
        .await
        .expect("finishUpload");
    q.finishArtifact(&id3, "0", name, &json!({"uploadId": obj3["uploadId"]}))
        .await
        .expect("finishArtifact");
    q.createArtifact(&id3, "0", "public/latest", &link)
        .await
        .expect("link");
    let via_link = q
        .getArtifact(&id3, "0", "public/latest")
        .await
        .expect("getArtifact");
    assert_eq!(via_link["storageType"], "object");
    let got = reqwest::get(via_link["url"].as_str().expect("url"))
        .await
        .expect("GET");
    assert_eq!(got.bytes().await.expect("bytes").as_ref(), b"hi");
}

/// createArtifact writes the artifact, then its object (not one transaction, which bills
/// both twice). When the object's name is already taken by another upload, the call is a
/// conflict and takes its artifact back: no artifact is left without its object, and a
/// repeat is refused the same way.
#[tokio::test]
async fn an_object_artifact_whose_object_is_taken_is_refused_and_leaves_no_artifact() {
    let app = spawn_app().await;
    let (id, worker) = claimed_task(&app, json!({"projectId": "proj"})).await;
    let name = "public/taken.txt";
    let object_name = format!("t/{id}/0/{name}");
    root_object(&app)
        .createUpload(&object_name, &upload_body(&slugid(), json!({})))
        .await
        .expect("another upload takes the name");
    let body = json!({"storageType": "object", "expires": ts(DAY), "contentType": "text/plain"});
    for _ in 0..2 {
        let r = worker.createArtifact(&id, "0", name, &body).await;
        assert_eq!(err_status(r), 409);
        let stored = app
            .domain_queue()
            .await
            .store
            .get(
                shared::records::artifact::ARTIFACTS,
                &id,
                &shared::records::artifact::artifact_sk(0, name),
            )
            .await
            .expect("read the artifact row");
        assert!(stored.is_none(), "the artifact was taken back: {stored:?}");
    }
    // Another name goes through: artifact, then object.
    let r = worker
        .createArtifact(&id, "0", "public/free.txt", &body)
        .await
        .expect("createArtifact");
    assert_eq!(r["name"], format!("t/{id}/0/public/free.txt").as_str());
}

#[tokio::test]
async fn bad_uploads_and_finishes_get_upstreams_errors_and_change_nothing() {
    let app = spawn_app().await;
    let name = format!("errors/{}", slugid());
    let upload_id = slugid();
    let put = json!({"putUrl": {"contentType": "application/x-test", "contentLength": 5}});
    let begin = upload_body(&upload_id, put.clone());
    let (s, up) = object_raw(&app, "PUT", &format!("/upload/{name}"), &begin).await;
    assert_eq!(s, 200, "{up}");
    // The same upload again is harmless; another uploadId, project or expiry is a conflict.
    let again = object_raw(&app, "PUT", &format!("/upload/{name}"), &begin).await;
    assert_eq!(again.0, 200, "{}", again.1);
    let other = object_raw(
        &app,
        "PUT",
        &format!("/upload/{name}"),
        &upload_body(&slugid(), put.clone()),
    )
    .await;
    assert_error(&other, 409, "RequestConflict");
    // Not downloadable before it is finished.
    let accept = json!({"acceptDownloadMethods": {"getUrl": true}});
    let early = object_raw(&app, "PUT", &format!("/start-download/{name}"), &accept).await;
    assert_error(&early, 404, "ResourceNotFound");
    // finishUpload with no bytes uploaded: 400.
    let finish =
        |hashes: Value| json!({"projectId": "proj", "uploadId": upload_id, "hashes": hashes});
    let empty = object_raw(
        &app,
        "POST",
        &format!("/finish-upload/{name}"),
        &finish(json!({})),
    )
    .await;
    assert_error(&empty, 400, "InputError");
    let method = &up["uploadMethod"]["putUrl"];
    assert_eq!(put_with_headers(method, b"12345".to_vec()).await, 200);
    // The wrong uploadId: 409; the wrong project: 400.
    let wrong = json!({"projectId": "proj", "uploadId": slugid()});
    let r = object_raw(&app, "POST", &format!("/finish-upload/{name}"), &wrong).await;
    assert_error(&r, 409, "RequestConflict");
    let wrong_project = json!({"projectId": "other", "uploadId": upload_id});
    let r = object_raw(
        &app,
        "POST",
        &format!("/finish-upload/{name}"),
        &wrong_project,
    )
    .await;
    assert_error(&r, 400, "InputError");
    // Hashes that are not the bytes': 400, and the object stays unfinished.
    let bad = finish(json!({"sha256": sha256(b"54321")}));
    let r = object_raw(&app, "POST", &format!("/finish-upload/{name}"), &bad).await;
    assert!(assert_error(&r, 400, "InputError").contains("sha256"));
    let still = object_raw(&app, "PUT", &format!("/start-download/{name}"), &accept).await;
    assert_error(&still, 404, "ResourceNotFound");
    // The right hashes finish it; a repeat agrees; a repeat with other hashes is a conflict.
    let good = finish(json!({"sha256": sha256(b"12345")}));
    let r = object_raw(&app, "POST", &format!("/finish-upload/{name}"), &good).await;
    assert_eq!(r, (200, json!({})));
    let r = object_raw(&app, "POST", &format!("/finish-upload/{name}"), &good).await;
    assert_eq!(r.0, 200, "{}", r.1);
    let r = object_raw(&app, "POST", &format!("/finish-upload/{name}"), &bad).await;
    assert_error(&r, 409, "RequestConflict");
    // Once finished, even the same createUpload is a conflict.
    let r = object_raw(&app, "PUT", &format!("/upload/{name}"), &begin).await;
    assert_error(&r, 409, "RequestConflict");
    // Downloads: getUrl with the hashes, simple, none acceptable (406), download's 303.
    let r = object_raw(&app, "PUT", &format!("/start-download/{name}"), &accept).await;
    assert_eq!(r.1["method"], "getUrl", "{}", r.1);
    assert_eq!(r.1["hashes"]["sha256"], sha256(b"12345").as_str());
    let simple = json!({"acceptDownloadMethods": {"simple": true}});
    let r = object_raw(&app, "PUT", &format!("/start-download/{name}"), &simple).await;
    assert_eq!(r.1["method"], "simple", "{}", r.1);
    let none = json!({"acceptDownloadMethods": {}});
    let r = object_raw(&app, "PUT", &format!("/start-download/{name}"), &none).await;
    assert_error(&r, 406, "NoMatchingMethod");
    let meta = root_object(&app).object(&name).await.expect("object");
    assert_eq!(meta["projectId"], "proj");
    // Bad base64 inline: 400, nothing created.
    let inline = json!({"dataInline": {"contentType": "a/b", "objectData": "!!notbase64"}});
    let fresh = format!("errors/{}", slugid());
    let r = object_raw(
        &app,
        "PUT",
        &format!("/upload/{fresh}"),
        &upload_body(&slugid(), inline),
    )
    .await;
    assert_error(&r, 400, "InputError");
    let r = object_raw(
        &app,
        "POST",
        &format!("/finish-upload/{fresh}"),
        &json!({"projectId": "proj", "uploadId": slugid()}),
    )
    .await;
    assert_error(&r, 404, "ResourceNotFound");

    // An upload after the signed URL expired: 403 from the URL itself.
    let late = format!("errors/{}", slugid());
    let blobs = app.domain_blobs().await;
    let old = app
        .domain_queue()
        .await
        .create_upload(
            blobs.as_ref(),
            &late,
            &upload_body(
                &slugid(),
                json!({"putUrl": {"contentType": "a/b", "contentLength": 1}}),
            ),
            Ts::now().plus(-2 * HOUR),
        )
        .await
        .expect("an upload begun two hours ago");
    assert_eq!(
        put_with_headers(&old["uploadMethod"]["putUrl"], b"x".to_vec()).await,
        403
    );
}

#[tokio::test]
async fn finish_artifact_refuses_what_upstream_refuses() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "wkr").await;
    let q = app.queue();
    let finish = json!({"uploadId": slugid()});
    // Never created: 404.
    assert_eq!(
        unit_err_status(q.finishArtifact(&id, "0", "public/none", &finish).await),
        404
    );
    // Not an object artifact: 400.
    q.createArtifact(
        &id,
        "0",
        "public/s3",
        &json!({"storageType": "s3", "expires": ts(HOUR), "contentType": "a/b"}),
    )
    .await
    .expect("s3 artifact");
    assert_eq!(
        unit_err_status(q.finishArtifact(&id, "0", "public/s3", &finish).await),
        400
    );
    // The wrong uploadId: 400, and the artifact stays unfinished.
    q.createArtifact(
        &id,
        "0",
        "public/obj",
        &json!({"storageType": "object", "expires": ts(HOUR), "contentType": "a/b"}),
    )
    .await
    .expect("object artifact");
    assert_eq!(
        unit_err_status(q.finishArtifact(&id, "0", "public/obj", &finish).await),
        400
    );
    assert_eq!(err_status(q.latestArtifact(&id, "public/obj").await), 404);
    // A name that fits an artifact but whose object name (t/<taskId>/<runId>/<name>) would
    // not fit the object service: 400, and nothing is written; as s3 it is taken.
    let long = format!(
        "public/{}",
        "x".repeat(shared::store::MAX_KEY_PART_BYTES - 20)
    );
    let object = json!({"storageType": "object", "expires": ts(HOUR), "contentType": "a/b"});
    let path = format!("/task/{id}/runs/0/artifacts/{long}");
    let r = raw(&app, "POST", &path, Some(&object)).await;
    let m = assert_error(&r, 400, "InvalidRequestArguments");
    assert!(m.contains("object name"), "{m}");
    assert_eq!(err_status(q.artifactInfo(&id, "0", &long).await), 404);
    let s3 = json!({"storageType": "s3", "expires": ts(HOUR), "contentType": "a/b"});
    assert_eq!(raw(&app, "POST", &path, Some(&s3)).await.0, 200);
    // Scopes: queue:create-artifact:<taskId>/<runId>, checked before anything is read.
    let creds = client_with(&app, &["queue:create-artifact:other/0".to_string()]).await;
    let r = app
        .queue_as(Some(creds))
        .finishArtifact(&id, "0", "public/obj", &finish)
        .await;
    assert_eq!(unit_err_status(r), 403);
}

#[tokio::test]
async fn the_artifact_reaper_expires_objects_and_abandoned_uploads() {
    // It reaps as of a day ahead: in the deployed shape, on a stack other tests share, that
    // deleted their objects too (a download of a just-finished object answered 404).
    let app = spawn_app_alone().await;
    let queue = app.domain_queue().await;
    let blobs = app.domain_blobs().await;
    let now = Ts::now();
    let (done, abandoned) = (format!("exp/{}", slugid()), format!("exp/{}", slugid()));
    let inline = json!({"dataInline": {"contentType": "a/b", "objectData": "aGk="}});
    let mut body = upload_body(&slugid(), inline.clone());
    body["expires"] = json!(now.plus(HOUR));
    queue
        .create_upload(blobs.as_ref(), &done, &body, now)
        .await
        .expect("upload");
    let finish = json!({"projectId": "proj", "uploadId": body["uploadId"]});
    queue
        .finish_upload(blobs.as_ref(), &done, &finish)
        .await
        .expect("finish");
    let long = upload_body(&slugid(), inline);
    queue
        .create_upload(blobs.as_ref(), &abandoned, &long, now)
        .await
        .expect("upload");
    let key = |n: &str| shared::records::object::blob_key(n);
    let private = shared::blobs::Bucket::Private;
    let budget = shared::time::Budget::of(std::time::Duration::from_secs(60));
    // The reaper finds them through the expiry index.
    settle_indexes().await;
    // Before either is due, nothing goes.
    queue
        .expire_artifacts_once(blobs.as_ref(), now, 1000, &budget)
        .await
        .expect("pass");
    assert!(queue.object_metadata(&done).await.is_ok());
    // An hour on the finished object is due; a day on, the abandoned upload too.
    queue
        .expire_artifacts_once(blobs.as_ref(), now.plus(HOUR + 1), 1000, &budget)
        .await
        .expect("pass");
    assert_eq!(
        queue
            .object_metadata(&done)
            .await
            .map_err(|e| e.code.status())
            .err(),
        Some(404)
    );
    assert_eq!(
        blobs.digest(private, &key(&done)).await.expect("digest"),
        None
    );
    assert!(blobs
        .digest(private, &key(&abandoned))
        .await
        .expect("digest")
        .is_some());
    queue
        .expire_artifacts_once(blobs.as_ref(), now.plus(DAY + 1), 1000, &budget)
        .await
        .expect("pass");
    assert_eq!(
        blobs
            .digest(private, &key(&abandoned))
            .await
            .expect("digest"),
        None
    );
    let accept = Accept {
        get_url: true,
        simple: true,
    };
    let gone = queue
        .start_download(blobs.as_ref(), &abandoned, accept, now)
        .await;
    assert_eq!(gone.map_err(|e| e.code.status()).err(), Some(404));
    let r = queue
        .finish_upload(
            blobs.as_ref(),
            &abandoned,
            &json!({"projectId": "proj", "uploadId": long["uploadId"]}),
        )
        .await;
    assert_eq!(r.map_err(|e| e.code.status()).err(), Some(404));
}

#[tokio::test]
async fn object_endpoints_require_exactly_their_scopes() {
    let app = spawn_app().await;
    let name = format!("scoped/{}", slugid());
    let as_client = |scopes: Vec<String>| {
        let app = &app;
        async move { object_client(app, Some(client_with(app, &scopes).await)) }
    };
    let uploader = as_client(vec![format!("object:upload:proj:{name}")]).await;
    let upload_id = slugid();
    let inline = json!({"dataInline": {"contentType": "a/b", "objectData": "aGk="}});
    let body = upload_body(&upload_id, inline);
    // Another project, or another name: 403.
    let mut elsewhere = body.clone();
    elsewhere["projectId"] = json!("other");
    assert_eq!(
        err_status(uploader.createUpload(&name, &elsewhere).await),
        403
    );
    assert_eq!(
        err_status(uploader.createUpload(&format!("{name}x"), &body).await),
        403
    );
    uploader
        .createUpload(&name, &body)
        .await
        .expect("createUpload");
    let finish = json!({"projectId": "proj", "uploadId": upload_id});
    let nobody = as_client(vec![]).await;
    assert_eq!(
        unit_err_status(nobody.finishUpload(&name, &finish).await),
        403
    );
    uploader
        .finishUpload(&name, &finish)
        .await
        .expect("finishUpload");
    // Uploading does not let one download; object:download:<name> does, for that name only
    // and before anything is looked up (403 for a name that does not exist either).
    let accept = json!({"acceptDownloadMethods": {"simple": true}});
    assert_eq!(
        err_status(uploader.startDownload(&name, &accept).await),
        403
    );
    let reader = as_client(vec![format!("object:download:{name}")]).await;
    assert_eq!(
        reader
            .startDownload(&name, &accept)
            .await
            .expect("startDownload")["method"],
        "simple"
    );
    assert_eq!(
        reader.object(&name).await.expect("object")["projectId"],
        "proj"
    );
    assert_eq!(
        err_status(reader.object(&format!("{name}/none")).await),
        403
    );
    assert_eq!(err_status(nobody.object(&name).await), 403);
    // download: a 303 to the bytes, for the reader only.
    let url = format!(
        "{}/api/object/v1/download/{}",
        app.root_url(),
        name.replace('/', "%2F")
    );
    let (s, _) = raw_url_with(&url, "GET", None, None, None).await;
    assert_eq!(s, 403);
    let (s, _) = raw_url(&url, "GET", None, None).await;
    assert_eq!(s, 200, "the redirect is followed to the bytes");
    // ping needs nothing.
    let (s, v) = raw_url_with(&object_url(&app, "/ping"), "GET", None, None, None).await;
    assert_eq!((s, &v["alive"]), (200, &json!(true)));
}
