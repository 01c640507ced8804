//! The reliability suite's bounded parts (RELIABILITY.md has the full runs and their figures):
//! racing claimers and the crash loop, on both backends.

use crate::common::*;
use blackbox::crash_loop::{crash_loop, crash_loop_in_shape, CrashSpec};
use blackbox::race::{bounded, print, race};
use blackbox::*;

/// 32 workers race over 8 task queues of mixed priorities (10,000 tasks on the embedded
/// backend, 1,000 on LocalStack, `TCQ_RACE_TASKS` to change): every task claimed once, none
/// left pending, no priority inversion. `cargo bench -p blackbox --bench racers` runs 100,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_claimers_claim_every_task_once_in_priority_order() {
    if not_in_shape("the race runs against one server, with a short claimWork wait") {
        return;
    }
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 200).await;
    let tasks = env_num(
        "TCQ_RACE_TASKS",
        if on_localstack() { 1_000 } else { 10_000 },
    );
    let spec = bounded(tasks);
    let r = race(&app.root_url(), &task_queue_id(), &spec).await;
    eprintln!("racing claimers: {}", print(&spec, &r));
    assert_eq!(r.tasks, tasks);
    assert_eq!(r.claims, tasks, "every task claimed once");
    assert_eq!(r.double_claims, 0, "{}", print(&spec, &r));
    assert_eq!(r.wrong_state, 0, "{}", print(&spec, &r));
    assert_eq!(r.left_pending, 0, "{}", print(&spec, &r));
    assert_eq!(r.inversions, 0, "{}", print(&spec, &r));
}

/// The crash loop's server: this test binary again, as a process of its own.
#[ignore]
#[test]
fn child_server() {
    blackbox::run_child_server()
}

/// 16 clients run life cycles while the server is SIGKILLed 3 times (`TCQ_CRASH_KILLS`) at
/// seeded moments and restarted on the same data: nothing acknowledged is lost, every task
/// resolves, no run is claimed twice, every state change has a message and no message is a
/// phantom. `cargo bench -p blackbox --bench crash_loop` runs 25 kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_loop_loses_nothing_acknowledged() {
    if not_in_shape("it kills and restarts one server process") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = CrashSpec {
        clients: 16,
        kills: env_num("TCQ_CRASH_KILLS", 3),
        seed: env_num("TCQ_CRASH_SEED", 20261125),
        max_gap_ms: 2_000,
    };
    let report = crash_loop(&spec, |port, envs| {
        spawn_child_server("reliability::child_server", dir.path(), port, envs)
    })
    .await;
    eprintln!("crash loop: {}", report.line());
    assert!(report.tasks > 0, "{}", report.line());
    assert_eq!(report.kills, spec.kills);
    assert!(report.passed(), "{}", report.line());
}

/// The crash loop as deployed: 8 clients of the official Rust client run life cycles against
/// the deployed shape while 5 (`TCQ_CRASH_KILLS`) instances of random functions (HTTP, stream,
/// scheduled; idle or mid-invocation) are SIGKILLed at seeded moments. A client whose
/// instance dies gets the gateway's 500 and retries, as the official clients do: nothing
/// acknowledged is lost, every task resolves, no run is claimed twice, every state change has
/// a message on the broker and none is a phantom. `cargo bench -p blackbox --bench crash_loop`
/// with `BENCH_SHAPE=1` runs 25 kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_loop_in_the_deployed_shape_loses_nothing_acknowledged() {
    if !in_shape() {
        eprintln!("kills the deployed shape's function instances");
        return;
    }
    let spec = CrashSpec {
        clients: 8,
        kills: env_num("TCQ_CRASH_KILLS", 5),
        seed: env_num("TCQ_CRASH_SEED", 20261128),
        max_gap_ms: 3_000,
    };
    let report = crash_loop_in_shape(&spec).await;
    eprintln!("crash loop in the deployed shape: {}", report.line());
    assert!(report.tasks > 0, "{}", report.line());
    assert_eq!(report.killed.len(), spec.kills);
    assert!(report.passed(), "{}", report.line());
}

/// Resident memory of a process, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Clients that send half a request and then nothing (slow loris) are cut off after the
/// header timeout (10 s), and meanwhile the server answers everyone else at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_clients_are_cut_off_and_do_not_block_others() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if not_in_shape("API Gateway, not our server, holds the connections there") {
        return;
    }
    let app = spawn_app().await;
    let addr = app.root_url().trim_start_matches("http://").to_string();
    let mut slow = vec![];
    for _ in 0..300 {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("half a request");
        slow.push(s);
    }
    let t = std::time::Instant::now();
    let ping = reqwest::get(format!("{}/api/queue/v1/ping", app.root_url()))
        .await
        .expect("ping");
    assert_eq!(ping.status().as_u16(), 200);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    // Every slow connection is closed by the server within the timeout (and some slack).
    let closed = futures_util::future::join_all(slow.iter_mut().map(|s| async move {
        let mut buf = [0u8; 256];
        tokio::time::timeout(std::time::Duration::from_secs(20), s.read(&mut buf))
            .await
            .is_ok()
    }))
    .await;
    assert!(
        closed.iter().all(|c| *c),
        "a slow client kept its connection"
    );
}

/// 2,000 idle claimWork long polls (200 on LocalStack, whose every wait slot is a request)
/// stay within 160 KiB each of the server's resident memory (debug build; the figure is
/// printed), and all end with `{tasks: []}` when their wait does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_long_polls_stay_within_a_memory_bound() {
    if not_in_shape("it reads one server process's memory") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let envs = [("TCQ_CLAIM_WORK_TIMEOUT_MS", "8000".to_string())];
    let server = ChildServer::start("reliability::child_server", dir.path(), &envs).await;
    let n = env_num("TCQ_IDLE_POLLS", if on_localstack() { 200 } else { 2_000 });
    let q = queue_client(&server.root);
    q.ping().await.expect("ping");
    let before = rss_kib(server.pid());
    let tq = task_queue_id();
    // One client (one connection) per poll, as workers have, built before any connects:
    // building a client takes CPU, and one that connected but waited its turn to send its
    // headers would rightly be cut off by the header timeout.
    let clients: Vec<_> = (0..n).map(|_| queue_client(&server.root)).collect();
    let polls: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let tq = tq.clone();
            tokio::spawn(
                async move { q.claimWork(&tq, &worker("idle", &format!("w{i}"), 1)).await },
            )
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let during = rss_kib(server.pid());
    let mut empty = 0;
    for p in polls {
        match p.await.expect("join") {
            Ok(r) if r["tasks"] == serde_json::json!([]) => empty += 1,
            Ok(r) => panic!("{r}"),
            Err(e) => panic!("claimWork: {e:?}"),
        }
    }
    let per = (during.saturating_sub(before)) as f64 / n as f64;
    eprintln!(
        "{n} idle long polls: server RSS {before} KiB idle, {during} KiB while they wait ({per:.1} KiB each)"
    );
    assert_eq!(empty, n);
    assert!(per < 160.0, "{per:.1} KiB per idle long poll");
}

/// Security: temporary credentials whose certificate lists scopes its issuer does not hold
/// are refused (401), through the official client's own minting; the same certificate within
/// the issuer's scopes works.
#[tokio::test]
async fn a_certificate_cannot_widen_its_issuers_scopes() {
    let app = spawn_app().await;
    let limited = client_with(
        &app,
        &[
            "queue:status:*".to_string(),
            "auth:create-client:temp/*".to_string(),
        ],
    )
    .await;
    let id = create(&app, &task_def(&task_queue_id())).await;
    let mint = |scopes: &[&str]| {
        limited
            .create_named_temp_creds(
                &format!("temp/{}", slugid()),
                std::time::Duration::from_secs(600),
                scopes.iter().copied(),
            )
            .expect("mint")
    };
    let narrow = app.queue_as(Some(mint(&["queue:status:*"])));
    narrow
        .status(&id)
        .await
        .expect("within the issuer's scopes");
    let wide = app.queue_as(Some(mint(&["queue:*"])));
    assert_eq!(err_status(wide.status(&id).await), 401);
    assert_eq!(err_status(wide.task(&id).await), 401);
}

/// Security: blob URLs on the local store cannot reach outside its directory, however the
/// key or the path is spelled: objects are files named by their key's hash, and a path with
/// `..` segments is a key like any other (unsigned: 403; signed: stored inside).
#[tokio::test]
async fn local_blob_urls_cannot_reach_outside_their_directory() {
    if on_localstack() || in_shape() {
        eprintln!("the local blob store only");
        return;
    }
    let app = spawn_app().await;
    let root = app.root_url();
    for path in [
        "/__blobs/private/../../../../etc/passwd",
        "/__blobs/private/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/__blobs/public/..%2f..%2f..%2fCargo.toml",
        "/__blobs/../Cargo.toml",
        "/__blobs/public/%2e%2e/%2e%2e/Cargo.toml",
    ] {
        let r = reqwest::get(format!("{root}{path}")).await.expect("GET");
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        assert!(matches!(status, 403 | 404), "{path}: {status} {body:.200}");
        assert!(
            !body.contains("root:") && !body.contains("[workspace]"),
            "{path}: {body:.200}"
        );
    }
    // A signed URL for a key full of `..` stores inside the store and reads back.
    let blobs = app.domain_blobs().await;
    let key = "../../../../tmp/escaped";
    let now = shared::time::Ts::now();
    let put = blobs
        .put_url(shared::blobs::Bucket::Private, key, "a/b", now, 60_000)
        .await
        .expect("put_url");
    let r = reqwest::Client::new()
        .put(&put)
        .header("content-type", "a/b")
        .body("inside")
        .send()
        .await
        .expect("PUT");
    assert_eq!(r.status().as_u16(), 200);
    assert!(!std::path::Path::new("/tmp/escaped").exists());
    let get = blobs
        .get_url(shared::blobs::Bucket::Private, key, now, 60_000)
        .await
        .expect("get_url");
    assert_eq!(
        reqwest::get(&get)
            .await
            .expect("GET")
            .text()
            .await
            .unwrap_or_default(),
        "inside"
    );
}
