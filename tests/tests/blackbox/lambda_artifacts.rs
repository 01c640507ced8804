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
