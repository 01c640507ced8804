//! Object throughput on the local server: a 100 MiB object uploaded and downloaded through
//! the official Rust helpers (`taskcluster-upload`, `taskcluster-download`), against the
//! release `tc-queue` as its own process (embedded backend: bytes under its data directory).
//!
//! Run:
//!   cargo build --release -p functions --bin tc-queue
//!   cargo bench -p blackbox --bench objects
//!
//! Knobs: `BENCH_MIB` (100), `BENCH_ROUNDS` (3; the median is printed). Per round it times
//! the whole upload helper (createUpload, the PUT, finishUpload, which hashes the bytes once)
//! and, separately, a plain PUT to a putUrl and finishUpload alone, then the download helper
//! (startDownload, the GET, and its own hash check).

use blackbox::env_num;
use blackbox::release::ReleaseServer;
use serde_json::json;
use std::time::{Duration, Instant};
use taskcluster::chrono::{Duration as ChronoDuration, Utc};

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rate(mib: usize, d: Duration) -> String {
    format!(
        "{:.0} MiB/s ({:.2} s)",
        mib as f64 / d.as_secs_f64(),
        d.as_secs_f64()
    )
}

#[tokio::main]
async fn main() {
    let mib: usize = env_num("BENCH_MIB", 100);
    let rounds: usize = env_num("BENCH_ROUNDS", 3).max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ReleaseServer::start(dir.path(), &[]).await;
    let obj = taskcluster::Object::new(blackbox::builder(
        &server.root,
        Some(blackbox::root_credentials()),
    ))
    .expect("client");
    let retry = taskcluster::Retry::default();
    let expires = Utc::now() + ChronoDuration::days(1);
    // Not compressible: a counter through a multiplicative hash.
    let data: Vec<u8> = (0..mib * 1024 * 1024)
        .map(|i| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    let (mut up, mut put, mut finish, mut down) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let name = format!("bench/{}/{round}", blackbox::slugid());
        let t = Instant::now();
        taskcluster_upload::upload_from_buf(
            "bench",
            &name,
            "application/octet-stream",
            &expires,
            &data,
            &retry,
            &obj,
            &blackbox::slugid(),
        )
        .await
        .expect("upload");
        up.push(t.elapsed());
        let t = Instant::now();
        let (got, _) = taskcluster_download::download_to_vec(&name, &retry, &obj)
            .await
            .expect("download");
        down.push(t.elapsed());
        assert_eq!(got.len(), data.len());

        // The PUT and finishUpload on their own.
        let (name, upload_id) = (format!("{name}/parts"), blackbox::slugid());
        let created = obj
            .createUpload(
                &name,
                &json!({"projectId": "bench", "uploadId": upload_id, "expires": expires,
                        "proposedUploadMethods": {"putUrl": {
                            "contentType": "application/octet-stream", "contentLength": data.len()}}}),
            )
            .await
            .expect("createUpload");
        let method = &created["uploadMethod"]["putUrl"];
        let mut req = reqwest::Client::new().put(method["url"].as_str().expect("url"));
        for (k, v) in method["headers"].as_object().expect("headers") {
            req = req.header(k.as_str(), v.as_str().unwrap_or_default());
        }
        let t = Instant::now();
        let status = req.body(data.clone()).send().await.expect("PUT").status();
        put.push(t.elapsed());
        assert!(status.is_success(), "PUT: {status}");
        let t = Instant::now();
        obj.finishUpload(&name, &json!({"projectId": "bench", "uploadId": upload_id}))
            .await
            .expect("finishUpload");
        finish.push(t.elapsed());
    }
    println!("Object throughput, {mib} MiB, local server (release tc-queue), median of {rounds}");
    println!("| step | throughput (time) |");
    println!("|---|---|");
    println!(
        "| upload helper (createUpload + PUT + finishUpload) | {} |",
        rate(mib, median(&mut up))
    );
    println!(
        "| PUT to the putUrl alone | {} |",
        rate(mib, median(&mut put))
    );
    println!(
        "| finishUpload alone (reads and hashes the bytes once) | {} |",
        rate(mib, median(&mut finish))
    );
    println!(
        "| download helper (startDownload + GET + hash check) | {} |",
        rate(mib, median(&mut down))
    );
}
