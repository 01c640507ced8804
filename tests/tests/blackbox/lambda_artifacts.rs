//! The artifact Lambda functions on LocalStack: getArtifact behind API Gateway (the name's
//! slashes arrive as `%2F`) answers 303 to a presigned S3 URL, and the scheduled
//! `artifact-reaper` deletes expired rows and objects.

use crate::common::*;
use blackbox::runtime_api::{apigw_v2_event, start_function, RuntimeApi};
use blackbox::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn artifact_functions_serve_downloads_and_reap() {
    if not_in_shape("drives Lambda binaries of its own; the LocalStack pass runs it") {
        return;
    }
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let prefix = format!(
        "la{}-",
        slugid().to_ascii_lowercase().replace(['-', '_'], "x")
    );
    // A local server over the same tables and buckets does the worker's part.
    let app = spawn_app_with(|c| {
        c.backend = "aws".into();
        c.queue.table_prefix = prefix.clone();
        c.create_tables = true;
        c.artifact_reaper_interval_ms = 3_600_000;
    })
    .await;
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "grp", "wkr").await;
    let q = app.queue();
    for (name, expires) in [
        ("private/a.txt", ts(3_600_000)),
        ("private/old.txt", ts(-60_000)),
    ] {
        let r = q
            .createArtifact(
                &id,
                "0",
                name,
                &json!({"storageType": "s3", "expires": expires, "contentType": "text/plain"}),
            )
            .await
            .expect("createArtifact");
        let put = reqwest::Client::new()
            .put(r["putUrl"].as_str().unwrap_or_default())
            .header("content-type", "text/plain")
            .body(format!("bytes of {name}"))
            .send()
            .await
            .expect("PUT");
        assert_eq!(put.status().as_u16(), 200);
    }

    let api = RuntimeApi::start().await;
    let (mut get, _) = start_function("get-artifact", &api, &prefix, &[]);
    let reply = api
        .invoke(
            apigw_v2_event(
                "GET",
                &format!("/api/queue/v1/task/{id}/runs/0/artifacts/private%2Fa.txt"),
                None,
            ),
            Duration::from_secs(30),
        )
        .await
        .expect("getArtifact answered");
    assert_eq!(reply["statusCode"], 303, "{reply}");
    assert_eq!(
        reply["headers"]["x-taskcluster-artifact-storage-type"],
        "s3"
    );
    let location = reply["headers"]["location"].as_str().expect("location");
    let body = reqwest::get(location)
        .await
        .expect("GET")
        .text()
        .await
        .expect("text");
    assert_eq!(body, "bytes of private/a.txt");
    get.kill().ok();

    let api = RuntimeApi::start().await;
    let (mut reaper, _) = start_function(
        "artifact-reaper",
        &api,
        &prefix,
        &[("TCQ_ARTIFACT_EXPIRY_GRACE_MS", "0")],
    );
    let event = json!({
        "version": "0", "id": "e", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "000000000000", "time": "2026-11-22T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:000000000000:rule/artifact-reaper"], "detail": {}
    });
    let reply = api
        .invoke(event, Duration::from_secs(30))
        .await
        .expect("reaper answered");
    assert_eq!(
        reply,
        json!({"job": shared::jobs::declare::ARTIFACT_REAPER.name, "done": 1})
    );
    reaper.kill().ok();
    let left = q.listArtifacts(&id, "0", None, None).await.expect("list");
    assert_eq!(left["artifacts"].as_array().map(Vec::len), Some(1));
    assert_eq!(left["artifacts"][0]["name"], "private/a.txt");
    // The reaped artifact's object is gone from S3, the other one is still there.
    use shared::blobs::{BlobStore, Bucket, S3Blobs};
    let sdk = shared::store::dynamodb::sdk_config()
        .await
        .expect("AWS environment");
    let s3 = S3Blobs::new(
        &sdk,
        format!("{prefix}public-artifacts"),
        format!("{prefix}private-artifacts"),
        None,
    );
    let now = shared::time::Ts::now();
    for (name, want) in [("private/old.txt", 404), ("private/a.txt", 200)] {
        let url = s3
            .get_url(Bucket::Private, &format!("{id}/0/{name}"), now, 60_000)
            .await
            .expect("url");
        let got = reqwest::get(&url).await.expect("GET").status().as_u16();
        assert_eq!(got, want, "{name}");
    }
}

/// Presigned URLs signed with a role's sessions (`shared::blobs::UrlSigner`, LocalStack's
/// STS): a session signs only URLs that end a minute or more before it does, is kept while it
/// does and replaced when it would not, and a role whose sessions are shorter than a URL gets
/// an error rather than a URL that would stop working early.
#[tokio::test]
async fn presigned_urls_are_signed_by_sessions_that_outlast_them() {
    use shared::blobs::{BlobStore, Bucket, S3Blobs, UrlSigner, SIGNER_SESSION};
    use shared::time::{Ts, MINUTE};
    if not_in_shape("an S3 store of its own; the LocalStack pass runs it") {
        return;
    }
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let sdk = shared::store::dynamodb::sdk_config()
        .await
        .expect("AWS environment");
    let bucket = format!(
        "signer{}",
        slugid().to_ascii_lowercase().replace(['-', '_'], "x")
    );
    let role = "arn:aws:iam::000000000000:role/tcq-url-signer-test";
    let s3 = S3Blobs::new(&sdk, bucket.clone(), bucket.clone(), None)
        .with_signer(UrlSigner::assume(&sdk, role, SIGNER_SESSION).await);
    s3.create_buckets().await.expect("bucket");
    let key_of = |url: &str| {
        url.split("X-Amz-Credential=")
            .nth(1)
            .and_then(|c| c.split("%2F").next())
            .unwrap_or_default()
            .to_string()
    };
    let now = Ts::now();
    let upload = 45 * MINUTE + 10_000;
    let put = s3
        .put_url(Bucket::Private, "a/b.txt", "text/plain", now, upload)
        .await
        .expect("putUrl");
    assert!(put.contains("X-Amz-Security-Token="), "{put}");
    let first = key_of(&put);
    assert_ne!(
        first,
        std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_default(),
        "signed by the role's session, not the process's key"
    );
    let sent = reqwest::Client::new()
        .put(&put)
        .header("content-type", "text/plain")
        .body("signed by a session")
        .send()
        .await
        .expect("PUT");
    assert_eq!(sent.status(), 200);
    let get = s3
        .get_url(Bucket::Private, "a/b.txt", now, 30 * MINUTE)
        .await
        .expect("URL");
    assert_eq!(
        key_of(&get),
        first,
        "the session is kept while it outlasts the URL"
    );
    let got = reqwest::get(&get).await.expect("GET");
    assert_eq!(got.status(), 200);
    assert_eq!(got.text().await.unwrap_or_default(), "signed by a session");
    // Sessions of 15 minutes (STS's shortest), and 2-second URLs: the first session signs
    // until fewer than 62 s of it would be left at the URL's start, then the next one does.
    // The clock is the URLs' `now`, moved to half a second past that point and reached 5 s
    // after the first session began, so the second still has the 62 s.
    let brief = S3Blobs::new(&sdk, bucket.clone(), bucket.clone(), None)
        .with_signer(UrlSigner::assume(&sdk, role, Duration::from_secs(900)).await);
    let url = |at: Ts| {
        let brief = &brief;
        async move {
            let u = brief
                .get_url(Bucket::Private, "a/b.txt", at, 2_000)
                .await
                .expect("URL");
            key_of(&u)
        }
    };
    let began = Ts::now();
    let one = url(began).await;
    assert_eq!(
        url(began.plus(838_000 - 500)).await,
        one,
        "62.5 s left: kept"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let two = url(began.plus(838_000 + 500)).await;
    assert_ne!(two, one, "61.5 s left: a new session");
    assert_eq!(url(began.plus(838_000 + 500)).await, two);

    // A role whose sessions last 15 minutes signs a 2-minute download, never a 45-minute upload.
    let short = S3Blobs::new(&sdk, bucket.clone(), bucket.clone(), None)
        .with_signer(UrlSigner::assume(&sdk, role, Duration::from_secs(900)).await);
    short
        .get_url(Bucket::Private, "a/b.txt", now, 2 * MINUTE)
        .await
        .expect("a URL shorter than the session");
    let refused = short
        .put_url(Bucket::Private, "a/d.txt", "text/plain", now, upload)
        .await
        .expect_err("a URL longer than the session");
    assert!(refused.to_string().contains("outlast"), "{refused}");
}
