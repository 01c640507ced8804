//! Artifacts end to end: a worker uploads with a plain HTTP PUT to the `putUrl`, a reader
//! downloads through getArtifact's 303, for every storage type; the rules on creation; link
//! chains and their scopes; pagination; the expiry reaper. On the embedded backend the bytes
//! live under the data directory; with `TCQ_TEST_BACKEND=localstack` they live in S3 on
//! LocalStack (with signature validation on).

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use shared::blobs::Bucket;
use shared::time::{Ts, HOUR, MINUTE};

/// A claimed task: `(taskId, task queue)`; run 0 runs on worker `grp/wkr`.
async fn running_task(app: &TestServer) -> String {
    let tq = task_queue_id();
    let id = create(app, &task_def(&tq)).await;
    let claim = claim_one(app, &tq, "grp", "wkr").await;
    assert_eq!(claim["status"]["taskId"], id.as_str());
    id
}

fn s3_body(ct: &str) -> Value {
    json!({ "storageType": "s3", "expires": ts(HOUR), "contentType": ct })
}

/// A reqwest client that reports redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn put(url: &str, ct: &str, body: &[u8]) -> u16 {
    reqwest::Client::new()
        .put(url)
        .header("content-type", ct)
        .body(body.to_vec())
        .send()
        .await
        .expect("PUT sent")
        .status()
        .as_u16()
}

async fn get_bytes(url: &str) -> (u16, Vec<u8>) {
    let r = reqwest::get(url).await.expect("GET sent");
    let s = r.status().as_u16();
    (s, r.bytes().await.map(|b| b.to_vec()).unwrap_or_default())
}

/// A raw GET of an API path (signed with root unless `anonymous`): status, headers, body.
async fn api_get(
    app: &TestServer,
    path: &str,
    anonymous: bool,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let url = app.url(path);
    let mut req = no_redirects().get(&url);
    if !anonymous {
        req = req.header("authorization", root_authorization("GET", &url));
    }
    let r = req.send().await.expect("GET sent");
    let (s, h) = (r.status().as_u16(), r.headers().clone());
    let v = serde_json::from_str(&r.text().await.unwrap_or_default()).unwrap_or(Value::Null);
    (s, h, v)
}

fn header(h: &reqwest::header::HeaderMap, k: &str) -> String {
    h.get(k)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// As deployed, a presigned URL is signed by a session of the stack's URL signer role (an
/// `X-Amz-Security-Token` of credentials the functions assumed), not with the functions' own
/// credentials (LocalStack's fixed key in the shape, which has no session).
fn signed_by_the_url_signer(url: &str) {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
            .unwrap_or_default()
    };
    assert!(!param("X-Amz-Security-Token").is_empty(), "{url}");
    let own = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_default();
    let key = param("X-Amz-Credential")
        .split("%2F")
        .next()
        .unwrap_or_default();
    assert!(!key.is_empty() && key != own, "{url}");
}

#[tokio::test]
async fn a_worker_uploads_through_put_url_and_a_reader_follows_the_redirect() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    let q = app.queue();
    let name = "private/logs/live log.txt";
    let r = q
        .createArtifact(&id, "0", name, &s3_body("text/plain"))
        .await
        .expect("createArtifact");
    assert_eq!(r["storageType"], "s3");
    assert_eq!(r["contentType"], "text/plain");
    assert!(is_js_date(r["expires"].as_str().unwrap_or_default()), "{r}");
    let put_url = r["putUrl"].as_str().expect("putUrl");
    if on_localstack() {
        // A presigned S3 URL, path-style on LocalStack.
        assert!(put_url.starts_with("http://127.0.0.1:4566/"), "{put_url}");
        assert!(put_url.contains("X-Amz-Signature="), "{put_url}");
    }
    if in_shape() {
        signed_by_the_url_signer(put_url);
    }

    // The putUrl binds the Content-Type.
    assert_eq!(put(put_url, "text/html", b"nope").await, 403);
    assert_eq!(put(put_url, "text/plain", b"hello artifact").await, 200);

    // The official client percent-encodes the name (`%2F`); the reply is the 303's body.
    let got = q.getArtifact(&id, "0", name).await.expect("getArtifact");
    assert_eq!(got["storageType"], "s3");
    // Raw `/` in the path works as well, and the 303 carries Location and the storage type.
    let (s, h, body) = api_get(&app, &format!("/task/{id}/runs/0/artifacts/{name}"), false).await;
    assert_eq!(s, 303, "{body}");
    assert_eq!(header(&h, "x-taskcluster-artifact-storage-type"), "s3");
    let location = header(&h, "location");
    assert_eq!(body["url"], location.as_str());
    if in_shape() {
        signed_by_the_url_signer(&location);
    }
    assert_eq!(
        get_bytes(&location).await,
        (200, b"hello artifact".to_vec())
    );

    // The latest-run variant and the content (no redirect) variant agree.
    let (s, h, _) = api_get(
        &app,
        &format!("/task/{id}/artifacts/{}", name.replace('/', "%2F")),
        false,
    )
    .await;
    assert_eq!(s, 303);
    assert_eq!(
        get_bytes(&header(&h, "location")).await.1,
        b"hello artifact"
    );
    let content = q.latestArtifact(&id, name).await.expect("latestArtifact");
    assert_eq!(content["storageType"], "s3");
    assert_eq!(
        get_bytes(content["url"].as_str().unwrap_or_default())
            .await
            .1,
        b"hello artifact"
    );
    // A private artifact needs scopes: an anonymous reader gets 403.
    let (s, _, _) = api_get(&app, &format!("/task/{id}/runs/0/artifacts/{name}"), true).await;
    assert_eq!(s, 403);
    // s3 artifacts are never announced.
    assert!(!names_of(&app, &id).iter().any(|n| n == "artifact-created"));
}

#[tokio::test]
async fn public_artifacts_download_anonymously_without_a_signature() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    let r = app
        .queue()
        .createArtifact(
            &id,
            "0",
            "public/build/target.tar.gz",
            &s3_body("application/gzip"),
        )
        .await
        .expect("createArtifact");
    let put_url = r["putUrl"].as_str().expect("putUrl");
    assert_eq!(
        put(put_url, "application/gzip", b"\x1f\x8b bytes").await,
        200
    );
    complete(&app, &id, 0).await;

    // Unsigned: the anonymous role holds queue:get-artifact:public/*.
    let (s, h, _) = api_get(
        &app,
        &format!("/task/{id}/artifacts/public%2Fbuild%2Ftarget.tar.gz"),
        true,
    )
    .await;
    assert_eq!(s, 303);
    let location = header(&h, "location");
    assert!(!location.contains("Signature"), "{location}");
    assert_eq!(
        get_bytes(&location).await,
        (200, b"\x1f\x8b bytes".to_vec())
    );
}

#[tokio::test]
async fn tampered_and_expired_urls_are_refused() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    let r = app
        .queue()
        .createArtifact(
            &id,
            "0",
            "private/x.bin",
            &s3_body("application/octet-stream"),
        )
        .await
        .expect("createArtifact");
    let put_url = r["putUrl"].as_str().expect("putUrl").to_string();
    // Flip one character of the signature (the last query value on both backends).
    let mut tampered = put_url.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    assert_eq!(put(&tampered, "application/octet-stream", b"x").await, 403);

    // URLs signed two hours ago with their normal lifetimes have expired.
    let blobs = app.domain_blobs().await;
    let key = format!("{id}/0/private/x.bin");
    let old = Ts::now().plus(-2 * HOUR);
    let expired_put = blobs
        .put_url(
            Bucket::Private,
            &key,
            "application/octet-stream",
            old,
            45 * MINUTE,
        )
        .await
        .expect("put url");
    assert_eq!(
        put(&expired_put, "application/octet-stream", b"x").await,
        403
    );
    assert_eq!(
        put(&put_url, "application/octet-stream", b"fresh").await,
        200
    );
    let expired_get = blobs
        .get_url(Bucket::Private, &key, old, 30 * MINUTE)
        .await
        .expect("get url");
    assert_eq!(get_bytes(&expired_get).await.0, 403);
    let fresh_get = blobs
        .get_url(Bucket::Private, &key, Ts::now(), 30 * MINUTE)
        .await
        .expect("get url");
    assert_eq!(get_bytes(&fresh_get).await, (200, b"fresh".to_vec()));
}

#[tokio::test]
async fn reference_link_and_error_artifacts_redirect_chain_or_fail_dependency() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    let q = app.queue();
    let exp = ts(HOUR);
    let create = |name: &'static str, body: Value| {
        let q = app.queue();
        let id = id.clone();
        async move { q.createArtifact(&id, "0", name, &body).await }
    };
    let r = create(
        "public/ref",
        json!({"storageType": "reference", "expires": exp, "url": "https://example.com/a?b=c", "contentType": "text/html"}),
    )
    .await
    .expect("reference");
    assert_eq!(r, json!({"storageType": "reference"}));
    create(
        "private/ref",
        json!({"storageType": "reference", "expires": exp, "url": "https://example.com/private", "contentType": "text/html"}),
    )
    .await
    .expect("private reference");
    create(
        "private/link",
        json!({"storageType": "link", "expires": exp, "artifact": "private/ref"}),
    )
    .await
    .expect("link");
    create(
        "public/err",
        json!({"storageType": "error", "expires": exp, "reason": "file-missing-on-worker", "message": "no such file"}),
    )
    .await
    .expect("error");
    create(
        "public/loop-a",
        json!({"storageType": "link", "expires": exp, "artifact": "public/loop-b"}),
    )
    .await
    .expect("link a");
    create(
        "public/loop-b",
        json!({"storageType": "link", "expires": exp, "artifact": "public/loop-a"}),
    )
    .await
    .expect("link b");

    // reference: 303 to its URL.
    let (s, h, _) = api_get(
        &app,
        &format!("/task/{id}/runs/0/artifacts/public/ref"),
        true,
    )
    .await;
    assert_eq!(s, 303);
    assert_eq!(header(&h, "location"), "https://example.com/a?b=c");
    assert_eq!(
        header(&h, "x-taskcluster-artifact-storage-type"),
        "reference"
    );
    // link: followed to the reference.
    let (s, h, _) = api_get(
        &app,
        &format!("/task/{id}/runs/0/artifacts/private/link"),
        false,
    )
    .await;
    assert_eq!(s, 303);
    assert_eq!(header(&h, "location"), "https://example.com/private");
    // error: 424 with {reason, message}; the content variant answers 200.
    let (s, h, body) = api_get(
        &app,
        &format!("/task/{id}/runs/0/artifacts/public/err"),
        true,
    )
    .await;
    assert_eq!(s, 424);
    assert_eq!(
        body,
        json!({"reason": "file-missing-on-worker", "message": "no such file"})
    );
    assert_eq!(header(&h, "x-taskcluster-artifact-storage-type"), "error");
    let c = q.artifact(&id, "0", "public/err").await.expect("artifact");
    assert_eq!(c["storageType"], "error");
    assert_eq!(c["reason"], "file-missing-on-worker");
    // A cycle is 400.
    let cyc = raw(
        &app,
        "GET",
        &format!("/task/{id}/runs/0/artifacts/public/loop-a"),
        None,
    )
    .await;
    assert_error(&cyc, 400, "InputError");

    // Scopes are checked on every name of the chain.
    let only_link = client_with(&app, &["queue:get-artifact:private/link".into()]).await;
    let r = app
        .queue_as(Some(only_link))
        .getArtifact(&id, "0", "private/link")
        .await;
    assert_eq!(err_status(r), 403);
    let both = client_with(
        &app,
        &[
            "queue:get-artifact:private/link".into(),
            "queue:get-artifact:private/ref".into(),
        ],
    )
    .await;
    let r = app
        .queue_as(Some(both))
        .getArtifact(&id, "0", "private/link")
        .await
        .expect("both scopes");
    assert_eq!(r["url"], "https://example.com/private");

    // Each of reference, link and error is announced once, with the run's worker.
    let created: Vec<Value> = wait_events(&app, &id, "artifact-created", Some(0), 6)
        .await
        .into_iter()
        .map(|e| e.payload)
        .collect();
    let mut names: Vec<&str> = created
        .iter()
        .filter_map(|p| p["artifact"]["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "private/link",
            "private/ref",
            "public/err",
            "public/loop-a",
            "public/loop-b",
            "public/ref"
        ]
    );
    assert!(created
        .iter()
        .all(|p| p["workerId"] == "wkr" && p["runId"] == 0));
    assert!(assert_event_schemas(&app) > 0);
}

#[tokio::test]
async fn creation_rules_and_download_errors() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    // An unclaimed (pending) run: 400; an unknown task: 400 as upstream.
    let pending = create(&app, &task_def(&tq)).await;
    let r = q.createArtifact(&pending, "0", "a", &s3_body("a/b")).await;
    assert_eq!(err_status(r), 400);
    let r = q.createArtifact(&slugid(), "0", "a", &s3_body("a/b")).await;
    assert_eq!(err_status(r), 400);

    let id = running_task(&app).await;
    // expires after the task's expiry, or more than 15 minutes ago: 400.
    let long = json!({"storageType": "s3", "expires": ts(400 * 24 * HOUR), "contentType": "a/b"});
    assert_eq!(
        err_status(q.createArtifact(&id, "0", "a", &long).await),
        400
    );
    let old = json!({"storageType": "s3", "expires": ts(-20 * MINUTE), "contentType": "a/b"});
    assert_eq!(err_status(q.createArtifact(&id, "0", "a", &old).await), 400);
    // A Content-Type over 255 characters, and names with `..` or a leading `/`: 400.
    let big = s3_body(&"x".repeat(256));
    assert_eq!(err_status(q.createArtifact(&id, "0", "a", &big).await), 400);
    // (A bare `..` never reaches a server: URL parsers remove dot segments.)
    for bad in ["a/../b", "/abs", "caf\u{e9}"] {
        let r = q.createArtifact(&id, "0", bad, &s3_body("a/b")).await;
        assert_eq!(err_status(r), 400, "{bad}");
    }

    // Re-creation: a later expiry refreshes the putUrl; anything incompatible is 409.
    let first = q
        .createArtifact(&id, "0", "a", &s3_body("a/b"))
        .await
        .expect("first");
    let later = json!({"storageType": "s3", "expires": ts(2 * HOUR), "contentType": "a/b"});
    let again = q
        .createArtifact(&id, "0", "a", &later)
        .await
        .expect("compatible");
    assert!(again["putUrl"].is_string());
    assert!(first["putUrl"].is_string());
    let info = q.artifactInfo(&id, "0", "a").await.expect("info");
    assert_eq!(info["expires"], later["expires"]);
    assert_eq!(
        err_status(q.createArtifact(&id, "0", "a", &s3_body("c/d")).await),
        409
    );
    let earlier = json!({"storageType": "s3", "expires": ts(HOUR / 2), "contentType": "a/b"});
    assert_eq!(
        err_status(q.createArtifact(&id, "0", "a", &earlier).await),
        409
    );
    let reference = |url: &str| json!({"storageType": "reference", "expires": ts(HOUR), "url": url, "contentType": "a/b"});
    q.createArtifact(&id, "0", "r", &reference("https://a.example"))
        .await
        .expect("reference");
    q.createArtifact(&id, "0", "r", &reference("https://b.example"))
        .await
        .expect("a reference may change its URL");
    let link = json!({"storageType": "link", "expires": ts(HOUR), "artifact": "a"});
    q.createArtifact(&id, "0", "r", &link)
        .await
        .expect("a reference may become a link");
    assert_eq!(
        err_status(
            q.createArtifact(&id, "0", "r", &reference("https://c.example"))
                .await
        ),
        409
    );

    // Expired: 410 (until the reaper deletes it); missing: 404, never a redirect.
    let gone = json!({"storageType": "reference", "expires": ts(-MINUTE), "url": "https://x.example", "contentType": "a/b"});
    q.createArtifact(&id, "0", "gone", &gone)
        .await
        .expect("expired is allowed");
    assert_eq!(err_status(q.getArtifact(&id, "0", "gone").await), 410);
    assert_eq!(err_status(q.getArtifact(&id, "0", "missing").await), 404);
    assert_eq!(
        err_status(q.getLatestArtifact(&slugid(), "missing").await),
        404
    );
    assert_eq!(err_status(q.artifactInfo(&id, "0", "missing").await), 404);

    // Once completed, no more artifacts: 409.
    complete(&app, &id, 0).await;
    assert_eq!(
        err_status(q.createArtifact(&id, "0", "b", &s3_body("a/b")).await),
        409
    );
}

#[tokio::test]
async fn artifacts_may_follow_an_exception_for_a_while() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    let q = app.queue();
    q.reportException(&id, "0", &json!({"reason": "malformed-payload"}))
        .await
        .expect("reportException");
    q.createArtifact(&id, "0", "public/after.log", &s3_body("text/plain"))
        .await
        .expect("within 25 minutes of an exception");
}

#[tokio::test]
async fn listings_paginate_in_name_order() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    let q = app.queue();
    let names = ["e/5", "a/1", "c/3", "b/2", "d/4"];
    for n in names {
        q.createArtifact(&id, "0", n, &s3_body("text/plain"))
            .await
            .expect("createArtifact");
    }
    let mut seen = vec![];
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let r = q
            .listArtifacts(&id, "0", token.as_deref(), Some("2"))
            .await
            .expect("listArtifacts");
        pages += 1;
        for a in r["artifacts"].as_array().expect("artifacts") {
            assert_eq!(a["storageType"], "s3");
            assert_eq!(a["contentType"], "text/plain");
            seen.push(a["name"].as_str().unwrap_or_default().to_string());
        }
        match r["continuationToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["a/1", "b/2", "c/3", "d/4", "e/5"]);
    let latest = q
        .listLatestArtifacts(&id, None, None)
        .await
        .expect("listLatestArtifacts");
    assert_eq!(latest["artifacts"].as_array().map(Vec::len), Some(5));
    assert!(latest.get("continuationToken").is_none());
    let info = q
        .latestArtifactInfo(&id, "c/3")
        .await
        .expect("latestArtifactInfo");
    assert_eq!(info["name"], "c/3");
    assert_eq!(err_status(q.listArtifacts(&id, "1", None, None).await), 404);
    assert_eq!(
        err_status(q.listLatestArtifacts(&slugid(), None, None).await),
        404
    );
}

#[tokio::test]
async fn artifact_endpoints_require_exactly_their_scopes() {
    let app = spawn_app().await;
    let id = running_task(&app).await;
    app.queue()
        .createArtifact(&id, "0", "private/a", &s3_body("a/b"))
        .await
        .expect("createArtifact as root");
    let with = |scopes: Vec<String>| {
        let app = &app;
        async move { app.queue_as(Some(client_with(app, &scopes).await)) }
    };
    let create_scope = format!("queue:create-artifact:{id}/0");
    let none = with(vec![]).await;
    assert_eq!(
        err_status(
            none.createArtifact(&id, "0", "private/b", &s3_body("a/b"))
                .await
        ),
        403
    );
    let ok = with(vec![create_scope]).await;
    ok.createArtifact(&id, "0", "private/b", &s3_body("a/b"))
        .await
        .expect("with queue:create-artifact");

    assert_eq!(
        err_status(none.listArtifacts(&id, "0", None, None).await),
        403
    );
    assert_eq!(
        err_status(none.artifactInfo(&id, "0", "private/a").await),
        403
    );
    let run = with(vec![format!("queue:list-artifacts:{id}:0")]).await;
    run.listArtifacts(&id, "0", None, None).await.expect("list");
    run.artifactInfo(&id, "0", "private/a").await.expect("info");
    assert_eq!(
        err_status(run.listLatestArtifacts(&id, None, None).await),
        403
    );
    let latest = with(vec![format!("queue:list-artifacts:{id}")]).await;
    latest
        .listLatestArtifacts(&id, None, None)
        .await
        .expect("latest list");
    latest
        .latestArtifactInfo(&id, "private/a")
        .await
        .expect("latest info");

    // getLatestArtifact checks the scope before looking anything up.
    assert_eq!(
        err_status(none.getLatestArtifact(&slugid(), "private/a").await),
        403
    );
    let reader = with(vec!["queue:get-artifact:private/*".into()]).await;
    reader
        .getArtifact(&id, "0", "private/a")
        .await
        .expect("get");
    reader
        .latestArtifact(&id, "private/a")
        .await
        .expect("content");
}

#[tokio::test]
async fn the_expiry_reaper_removes_rows_and_objects() {
    // The timer stays out of the way; the test drives the reaper itself, and counts what it
    // deletes: a stack of its own in the deployed shape.
    let app = spawn_app_alone_with(|c| c.artifact_reaper_interval_ms = 3_600_000).await;
    let id = running_task(&app).await;
    let q = app.queue();
    let expired = json!({"storageType": "s3", "expires": ts(-MINUTE), "contentType": "text/plain"});
    let mut urls = vec![];
    for name in ["public/old", "private/old"] {
        let r = q
            .createArtifact(&id, "0", name, &expired)
            .await
            .expect("createArtifact");
        assert_eq!(
            put(
                r["putUrl"].as_str().unwrap_or_default(),
                "text/plain",
                b"old"
            )
            .await,
            200
        );
        let key = format!("{id}/0/{name}");
        let url = app
            .domain_blobs()
            .await
            .get_url(Bucket::for_name(name), &key, Ts::now(), 30 * MINUTE)
            .await
            .expect("get url");
        assert_eq!(get_bytes(&url).await, (200, b"old".to_vec()));
        urls.push(url);
    }
    let keep = q
        .createArtifact(&id, "0", "private/new", &s3_body("text/plain"))
        .await
        .expect("createArtifact");
    assert_eq!(
        put(
            keep["putUrl"].as_str().unwrap_or_default(),
            "text/plain",
            b"new"
        )
        .await,
        200
    );
    assert_eq!(
        err_status(q.getArtifact(&id, "0", "private/old").await),
        410
    );

    // With the default 30 minute grace nothing is due yet.
    let (queue, blobs) = (app.domain_queue().await, app.domain_blobs().await);
    let with_grace = |grace| shared::jobs::declare::Context {
        queue: &queue,
        blobs: blobs.as_ref(),
        artifact_grace_ms: grace,
        publisher: None,
        scheduler: None,
        shards: shared::store::shard::Shards::ALL,
    };
    let (grace, none) = (
        with_grace(shared::queue::artifacts::EXPIRY_GRACE_MS),
        with_grace(0),
    );
    let reaper = |ctx| {
        let budget = shared::jobs::Budget::of(std::time::Duration::from_secs(30));
        shared::jobs::declare::ARTIFACT_REAPER.run(ctx, budget)
    };
    // The reaper finds them through the expiry index.
    settle_indexes().await;
    let n = reaper(&grace).await.expect("reaper");
    assert_eq!(n, 0);
    // Without grace: two reapers at once delete both rows exactly once between them.
    let (a, b) = tokio::join!(reaper(&none), reaper(&none));
    assert_eq!(a.expect("reaper a") + b.expect("reaper b"), 2);
    // And again: nothing left to do.
    assert_eq!(reaper(&none).await.expect("reaper"), 0);
    for url in &urls {
        let (s, _) = get_bytes(url).await;
        assert!(s == 404 || s == 403, "object still there: {s} at {url}");
    }
    assert_eq!(
        err_status(q.getArtifact(&id, "0", "private/old").await),
        404
    );
    let left = q.listArtifacts(&id, "0", None, None).await.expect("list");
    assert_eq!(left["artifacts"].as_array().map(Vec::len), Some(1));
    assert_eq!(left["artifacts"][0]["name"], "private/new");
}

#[tokio::test]
async fn the_reaper_timer_deletes_expired_artifacts() {
    let app = spawn_app_with(|c| {
        c.artifact_reaper_interval_ms = 100;
        c.queue.artifact_expiry_grace_ms = 0;
    })
    .await;
    let id = running_task(&app).await;
    let q = app.queue();
    let expired = json!({"storageType": "error", "expires": ts(-MINUTE), "reason": "file-missing-on-worker", "message": "m"});
    q.createArtifact(&id, "0", "public/e", &expired)
        .await
        .expect("createArtifact");
    poll(std::time::Duration::from_secs(30), "the reaper", || async {
        let r = q.artifactInfo(&id, "0", "public/e").await;
        (r.err().and_then(|e| status_of(&e)) == Some(404)).then_some(())
    })
    .await;
}

/// The official Python client as a worker (claimWork, createArtifact with the claim's
/// credentials, PUT, reportCompleted), including a gzip-encoded JSON artifact that the
/// client's downloads decode (its headers stored and returned as S3 does), then an
/// anonymous download with curl.
#[tokio::test]
async fn python_worker_uploads_and_curl_downloads_anonymously() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let Some(out) = run_python(&app, "artifact_flow.py", &[("TASK_QUEUE_ID", tq)]).await else {
        return;
    };
    assert_eq!(out["storageType"], "s3");
    assert_eq!(out["putStatus"], 200);
    assert_eq!(out["state"], "completed");
    // A gzip-encoded artifact keeps the headers S3 keeps: every download decodes it.
    assert_eq!(out["gzPutStatus"], 200);
    assert_eq!(
        out["followedEqual"], true,
        "getArtifact (303 followed): {out}"
    );
    assert_eq!(out["downloadEqual"], true, "downloadArtifactToBuf: {out}");
    assert_eq!(out["downloadContentType"], "application/json");
    let stored = json!({
        "Content-Encoding": "gzip",
        "Content-Disposition": "attachment; filename=\"data.json\"",
        "Cache-Control": "max-age=600",
        "Content-Language": "en",
    });
    assert_eq!(out["headers"], stored, "GET");
    assert_eq!(out["headHeaders"], stored, "HEAD");
    assert_eq!(
        out["headLength"]
            .as_str()
            .and_then(|l| l.parse::<u64>().ok()),
        out["gzLength"].as_u64(),
        "HEAD gives the stored object's length"
    );
    let id = out["taskId"].as_str().expect("taskId").to_string();
    let url = app.url(&format!("/task/{id}/artifacts/public%2Flogs%2Fhello.txt"));
    let curl = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["--silent", "--show-error", "--fail", "--location", &url])
            .output()
            .expect("curl runs")
    })
    .await
    .expect("join");
    assert!(
        curl.status.success(),
        "{}",
        String::from_utf8_lossy(&curl.stderr)
    );
    assert_eq!(curl.stdout, b"hello from python\n");
}
