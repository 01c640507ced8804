//! The claim modes (the template's `ClaimMode`; docs/deploying.md, Choosing a claim mode):
//! the claim routes go where the mode says, a zero wait answers at once, and with the claim
//! service its faults cost no claim and never hang a worker. Run against the deployed shape
//! with `TCQ_SHAPE_CLAIM_MODE` set to each mode (scripts/shape-subset.sh); elsewhere the
//! mode-independent parts run.

use crate::common::*;
use blackbox::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// claimWork, claimTask and reclaimTask reach the claim service with `ClaimMode=service`
/// (their functions are not deployed) and their functions otherwise; a claim made through
/// either is the same claim to every other route.
#[tokio::test]
async fn claim_routes_are_served_where_the_claim_mode_says() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let a = create(&app, &task_def(&tq)).await;
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], a.as_str());
    let q = app.queue();
    q.reclaimTask(&a, "0").await.expect("reclaimTask");
    let b = create(&app, &task_def(&tq)).await;
    q.claimTask(&b, "0", &claimer("g", "w"))
        .await
        .expect("claimTask");
    // Resolved by a function, whatever served the claims.
    let r = q.reportCompleted(&a, "0").await.expect("reportCompleted");
    assert_eq!(r["status"]["state"], "completed");
    let Some(shape) = app.shape() else { return };
    let functions: usize = ["claimWork", "claimTask", "reclaimTask"]
        .iter()
        .map(|h| shape.invocations(h))
        .sum();
    let service_tasks: usize = shape.services.values().map(|s| s.count()).sum();
    if claims_on_service() {
        assert_eq!(functions, 0, "no claim function is deployed");
        assert!(service_tasks >= 1, "the claim service runs");
    } else {
        assert!(functions >= 3, "the claim functions served the calls");
        assert_eq!(service_tasks, 0, "no service without ClaimMode=service");
    }
}

/// With no wait (`ClaimWaitSeconds=0` in `lambda-short`), claimWork on an empty queue answers
/// at once rather than holding an instance, and the next call gets the work made meanwhile.
#[tokio::test]
async fn a_zero_wait_answers_at_once_and_the_next_call_gets_new_work() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 0).await;
    let q = app.queue();
    let tq = task_queue_id();
    let start = Instant::now();
    let r = q.claimWork(&tq, &worker("g", "w", 1)).await.unwrap();
    assert_eq!(r, json!({"tasks": []}));
    // Far from any wait: a cold start in the shape is the slowest part.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let id = create(&app, &task_def(&tq)).await;
    // A call that does not wait claims what the index shows already.
    settle_indexes().await;
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id.as_str());
}

fn service_only() -> bool {
    if !claims_on_service() {
        eprintln!("for the claim service: TCQ_TEST_BACKEND=shape TCQ_SHAPE_CLAIM_MODE=service");
    }
    claims_on_service()
}

/// A claim service task killed while it holds a claimed run and a waiting claimWork: the
/// claim was written (conditionally) before it was answered, so it survives in the table and
/// its worker reclaims it through another task; the waiting worker's call fails with the
/// gateway's 503 and the official client's retry reaches the task still running, which
/// hands it the next run exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_claim_service_task_loses_no_claim() {
    if !service_only() {
        return;
    }
    let app = spawn_app_alone_with(|c| c.queue.claim_work_timeout_ms = 20_000).await;
    let service = app.shape().expect("shape").services["ClaimService"].clone();
    let tq = task_queue_id();
    let held = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "holder").await;
    // A worker's client, with the official clients' default retries (5, from 100 ms).
    let workers_client = taskcluster::Queue::new(
        taskcluster::ClientBuilder::new(app.root_url()).credentials(root_credentials()),
    )
    .expect("client");
    let waiting = {
        let tq = tq.clone();
        tokio::spawn(async move {
            workers_client
                .claimWork(&tq, &worker("g", "waiter", 1))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!waiting.is_finished(), "claimWork waits on the service");
    // A second task runs (a minimum of two, or ECS's replacement already up), then the
    // first, which holds the waiting call, is killed.
    service.start().await.expect("a second task");
    assert!(service.kill_one(), "a task to kill");
    let next = create(&app, &task_def(&tq)).await;
    let r = waiting
        .await
        .unwrap()
        .expect("the retried call reached the new task");
    assert_eq!(r["tasks"][0]["status"]["taskId"], next.as_str());
    let s = status(&app, &next).await;
    assert_eq!(
        s["runs"].as_array().map(Vec::len),
        Some(1),
        "claimed once: {s}"
    );
    // The run claimed before the kill is still the holder's.
    let s = status(&app, &held).await;
    assert_eq!(s["runs"][0]["state"], "running");
    assert_eq!(s["runs"][0]["workerId"], "holder");
    app.queue()
        .reclaimTask(&held, "0")
        .await
        .expect("reclaimed through the new task");
}

/// The claim service scaled to zero (or every task unhealthy): the claim routes answer the
/// gateway's 503 at once, never hang, while every other route goes on; once a task runs
/// again, claims do too.
#[tokio::test]
async fn with_no_claim_service_task_the_claim_routes_answer_503_at_once() {
    if !service_only() {
        return;
    }
    let app = spawn_app_alone().await;
    let service = app.shape().expect("shape").services["ClaimService"].clone();
    service.stop_all();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let start = Instant::now();
    let body = worker("g", "w", 1);
    let path = format!("/claim-work/{}", urlencode(&tq));
    let (code, v) = raw(&app, "POST", &path, Some(&body)).await;
    assert_eq!(code, 503, "{v}");
    assert_eq!(v["message"], "Service Unavailable");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    service.start().await.expect("a task starts");
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id.as_str());
}

/// A function deploy that adds attributes to stored items, while the claim service (or a
/// function instance not yet replaced) still runs this build: every claim route serves the
/// newer items, writes back the attributes it does not know (on the task and on its run),
/// and shows none of them in its answers. Stands in for the newer build by writing such
/// attributes into the stored item itself (docs/deploying.md, "Stored formats across a
/// deploy").
#[tokio::test]
async fn items_a_newer_build_wrote_are_served_and_their_attributes_kept() {
    use shared::records::task::{TaskRecord, SK_STATUS, TASKS};
    use shared::store::{Cond, Item, WriteOp};
    let app = spawn_app().await;
    let store = app.domain_queue().await.store.clone();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let stored = || {
        let store = store.clone();
        let id = id.clone();
        async move {
            store
                .get(TASKS, id.as_str(), SK_STATUS)
                .await
                .expect("read")
                .expect("a status item")
        }
    };
    // What the newer build wrote: an attribute of the task and one of its run, on the
    // version read (again if a background write came in between, as any writer does).
    for attempt in 0.. {
        let item = stored().await;
        let mut data = item.data.clone();
        data["newerTaskAttribute"] = json!({"kept": [1, 2]});
        data["runs"][0]["newerRunAttribute"] = json!("kept");
        // Its index entries, as any build derives them from the task's state (a read does
        // not return them).
        let rec: TaskRecord = data.decode().expect("a task record");
        let newer = Item::new(item.pk, item.sk, data, rec.index_entries());
        let op = WriteOp::Put {
            table: TASKS,
            item: newer,
            cond: Cond::Version(item.version),
        };
        match store.write(op).await {
            Ok(_) => break,
            Err(e) if e.is_condition_failed() && attempt < 10 => {}
            Err(e) => panic!("the newer build's write: {e}"),
        }
    }
    let kept = |data: &serde_json::Value| {
        assert_eq!(
            data["newerTaskAttribute"],
            json!({"kept": [1, 2]}),
            "{data}"
        );
        assert_eq!(data["runs"][0]["newerRunAttribute"], "kept", "{data}");
    };
    let claim = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(claim["status"]["taskId"], id.as_str());
    let shown = claim["status"].to_string();
    assert!(
        !shown.contains("newer"),
        "answers show only known attributes: {shown}"
    );
    let after_claim = stored().await.data;
    assert_eq!(after_claim["runs"][0]["state"], "running");
    kept(&after_claim);
    let q = app.queue();
    let r = q.reclaimTask(&id, "0").await.expect("reclaimTask");
    assert!(!r.to_string().contains("newer"), "{r}");
    kept(&stored().await.data);
    let r = q.reportCompleted(&id, "0").await.expect("reportCompleted");
    assert_eq!(r["status"]["state"], "completed");
    assert!(!r.to_string().contains("newer"), "{r}");
    let s = status(&app, &id).await;
    assert!(!s.to_string().contains("newer"), "{s}");
    let done = stored().await.data;
    assert_eq!(done["runs"][0]["state"], "completed");
    kept(&done);
}

/// A task queue id as the official clients put it in a path (`/` as `%2F`).
fn urlencode(s: &str) -> String {
    shared::api::router::encode_param(s)
}

/// The file `blobs/sha256/<digest>` of an OCI layout at `dir`, checked against its digest.
fn blob(dir: &std::path::Path, digest: &str) -> Vec<u8> {
    use sha2::Digest;
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let bytes = std::fs::read(dir.join("blobs/sha256").join(hex)).expect("blob");
    assert_eq!(
        format!("{:x}", sha2::Sha256::digest(&bytes)),
        hex,
        "blob {digest}"
    );
    bytes
}

fn json_blob(dir: &std::path::Path, descriptor: &serde_json::Value) -> serde_json::Value {
    let digest = descriptor["digest"].as_str().expect("digest");
    let bytes = blob(dir, digest);
    assert_eq!(
        descriptor["size"].as_u64(),
        Some(bytes.len() as u64),
        "{digest}"
    );
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The claim service's image, built by `scripts/build-image.sh` without a daemon, is a valid
/// OCI image (every blob its digest and size) whose entry point runs `tc-queue` from an
/// otherwise empty file system, as the task definition runs it: it serves, and its
/// `--health-check` (the task definition's health check command) says healthy while it
/// serves and unhealthy once it is gone. Built from this machine's debug binary, and from the
/// deployed arm64 static build when one is given (`TCQ_IMAGE_ARM64_BINARY`), run under qemu.
#[tokio::test]
async fn the_claim_service_image_runs_tc_queue_from_nothing_else() {
    if not_in_shape("builds and runs an image, once") {
        return;
    }
    let binary = blackbox::runtime_api::built_binary("tc-queue");
    assert!(
        binary.exists(),
        "{} (cargo build --workspace)",
        binary.display()
    );
    check_image("amd64", &binary, None).await;
    // The deployed image: arm64, static, built by `scripts/build-image.sh` with cargo-lambda
    // (about 45 minutes here), run under qemu's user-mode emulator.
    let arm64 = std::env::var_os("TCQ_IMAGE_ARM64_BINARY").map(std::path::PathBuf::from);
    let qemu = std::path::Path::new("/usr/bin/qemu-aarch64-static");
    match arm64 {
        Some(arm64) if qemu.exists() => check_image("arm64", &arm64, Some(qemu)).await,
        _ => eprintln!(
            "the arm64 image: TCQ_IMAGE_ARM64_BINARY=<target/lambda/tc-queue/bootstrap> \
             and qemu-user-static"
        ),
    }
}

/// Builds the image of `binary` for `arch` and runs it as the container runs it (under
/// `emulator` for another architecture).
async fn check_image(arch: &str, binary: &std::path::Path, emulator: Option<&std::path::Path>) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("image.tar");
    let built = std::process::Command::new("bash")
        .arg(repo.join("scripts/build-image.sh"))
        .args(["--arch", arch, "--binary"])
        .arg(binary)
        .arg("--out")
        .arg(&archive)
        .status()
        .expect("bash");
    assert!(built.success(), "build-image.sh");
    let layout = dir.path().join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    let untar = |file: &std::path::Path, to: &std::path::Path, gz: bool| {
        let mut c = std::process::Command::new("tar");
        c.arg(if gz { "-xzf" } else { "-xf" })
            .arg(file)
            .arg("-C")
            .arg(to);
        assert!(c.status().expect("tar").success());
    };
    untar(&archive, &layout, false);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["manifests"].as_array().map(Vec::len), Some(1));
    let manifest = json_blob(&layout, &index["manifests"][0]);
    let config = json_blob(&layout, &manifest["config"]);
    assert_eq!(config["architecture"], arch);
    assert_eq!(config["os"], "linux");
    let entry = config["config"]["Entrypoint"][0]
        .as_str()
        .expect("entry point");
    // The template's health check runs the same path.
    let template: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo.join("infra/template.yaml")).unwrap())
            .unwrap();
    let container = &template["Resources"]["ClaimServiceTaskDefinition"]["Properties"]
        ["ContainerDefinitions"][0];
    assert_eq!(container["HealthCheck"]["Command"][1], entry);
    assert_eq!(
        container["PortMappings"][0]["ContainerPort"]
            .as_u64()
            .map(|p| format!("{p}/tcp")),
        config["config"]["ExposedPorts"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
    );
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let layer = &manifest["layers"][0];
    assert_eq!(
        layer["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer_file = layout
        .join("blobs/sha256")
        .join(&layer["digest"].as_str().unwrap()["sha256:".len()..]);
    blob(&layout, layer["digest"].as_str().unwrap());
    untar(&layer_file, &rootfs, true);

    // Run as the container runs: the image's file system as `/`, its environment.
    let port = free_port();
    // Found before the environment is cleared (PATH goes with it).
    let chroot = ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chroot (coreutils)");
    let in_image = |args: &[&str]| {
        let mut c = match emulator {
            // Paths resolve in the image first (`-L`), as in a chroot.
            Some(qemu) => {
                let mut c = std::process::Command::new(qemu);
                c.arg("-L")
                    .arg(&rootfs)
                    .arg(rootfs.join(entry.trim_start_matches('/')));
                c
            }
            None => {
                let mut c = std::process::Command::new(chroot);
                c.arg(&rootfs).arg(entry);
                c
            }
        };
        c.args(args).env_clear();
        for e in config["config"]["Env"].as_array().into_iter().flatten() {
            if let Some((k, v)) = e.as_str().and_then(|e| e.split_once('=')) {
                c.env(k, v);
            }
        }
        c.env("TCQ_PORT", port.to_string())
            .env("TCQ_BIND", "127.0.0.1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    let mut server = match in_image(&[]).spawn() {
        Ok(s) => s,
        Err(e) => panic!("chroot into the image (needs root): {e}"),
    };
    let up = wait_until_up(&format!("http://127.0.0.1:{port}"), Duration::from_secs(60)).await;
    let healthy = in_image(&["--health-check"])
        .status()
        .expect("health check");
    let _ = server.kill();
    let _ = server.wait();
    assert!(up, "{arch}: tc-queue serves from the image");
    assert!(healthy.success(), "{arch}: healthy while it serves");
    let gone = in_image(&["--health-check"])
        .status()
        .expect("health check");
    assert!(!gone.success(), "{arch}: unhealthy once it is gone");
}
