//! Crash safety: the server runs as a child process, is SIGKILLed mid-way, and restarted on
//! the same data directory. Acknowledged work survives and claims held before the kill still
//! expire.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server process body; only runs when re-executed by `spawn_child_server`.
#[ignore]
#[test]
fn child_server() {
    blackbox::run_child_server()
}

/// The crash tests' server: a child process with short claims and fast reapers.
async fn crash_server(dir: &Path) -> ChildServer {
    let envs = [
        // Long enough that the claims taken before the kill are still held when the test
        // looks, on a loaded LocalStack too.
        ("TCQ_CLAIM_TIMEOUT", "10".to_string()),
        ("TCQ_REAPER_INTERVAL_MS", "100".to_string()),
        ("TCQ_CLAIM_WORK_TIMEOUT_MS", "500".to_string()),
    ];
    ChildServer::start("crash::child_server", dir, &envs).await
}

async fn statuses(q: &taskcluster::Queue, ids: &[String]) -> Vec<Value> {
    statuses_of(q, ids, 500).await.expect("statuses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_claims_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let tq = task_queue_id();
    let mut server = crash_server(dir.path()).await;
    let q = queue_client(&server.root);

    // 30 tasks, 10 of them claimed (10 s claims: held at the kill even on a loaded machine).
    let mut created = vec![];
    for _ in 0..30 {
        let id = slugid();
        q.createTask(&id, &def_with(&tq, json!({"retries": 1})))
            .await
            .unwrap();
        created.push(id);
    }
    settle_indexes().await;
    let claim = q.claimWork(&tq, &worker("g", "w", 10)).await.unwrap();
    let claimed: HashSet<String> = claim["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["taskId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(claimed.len(), 10);

    // Keep creating tasks while the server is killed.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let attempted = Arc::new(Mutex::new(Vec::<String>::new()));
    let writer = {
        let (root, tq) = (server.root.clone(), tq.clone());
        let (acked, attempted) = (acked.clone(), attempted.clone());
        tokio::spawn(async move {
            let q = queue_client(&root);
            loop {
                let id = slugid();
                attempted.lock().unwrap().push(id.clone());
                match q.createTask(&id, &task_def(&tq)).await {
                    Ok(_) => acked.lock().unwrap().push(id),
                    Err(_) => return,
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The claims are still held when the server dies.
    for s in statuses(&q, &claimed.iter().cloned().collect::<Vec<_>>()).await {
        assert_eq!(s["status"]["state"], "running");
    }
    server.kill();
    tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("the writer notices the dead server")
        .unwrap();
    let acked: Vec<String> = acked.lock().unwrap().clone();
    let attempted: Vec<String> = attempted.lock().unwrap().clone();
    assert!(
        !acked.is_empty(),
        "some creates were acknowledged before the kill"
    );
    eprintln!("{} creates acknowledged before the kill", acked.len());

    // Restart on the same data directory.
    let server = crash_server(dir.path()).await;
    let q = queue_client(&server.root);

    // Every acknowledged task is still there.
    let mut all: Vec<String> = created.clone();
    all.extend(acked.iter().cloned());
    let st = statuses(&q, &all).await;
    assert_eq!(st.len(), all.len(), "every acknowledged task survived");
    for s in &st {
        let s = &s["status"];
        let id = s["taskId"].as_str().unwrap();
        if !claimed.contains(id) {
            assert_eq!(s["state"], "pending", "{s:#}");
            assert_eq!(s["runs"].as_array().unwrap().len(), 1);
        }
    }
    // A create in flight at the kill either happened completely or not at all.
    for id in attempted.iter().filter(|id| !acked.contains(id)) {
        match q.status(id).await {
            Ok(s) => assert_eq!(s["status"]["state"], "pending"),
            Err(e) => assert_eq!(status_of(&e), Some(404)),
        }
    }

    // The claims taken before the kill expire: claim-expired plus a pending retry run.
    let claimed_ids: Vec<String> = claimed.iter().cloned().collect();
    let expired = poll(
        Duration::from_secs(30),
        "claims to expire after restart",
        || {
            let q = &q;
            let claimed_ids = &claimed_ids;
            async move {
                let st = statuses(q, claimed_ids).await;
                st.iter()
                    .all(|s| s["status"]["runs"].as_array().is_some_and(|r| r.len() == 2))
                    .then_some(st)
            }
        },
    )
    .await;
    for s in &expired {
        let s = &s["status"];
        assert_eq!(s["runs"][0]["state"], "exception");
        assert_eq!(s["runs"][0]["reasonResolved"], "claim-expired");
        assert_eq!(s["runs"][0]["workerId"], "w");
        assert_eq!(s["runs"][1]["state"], "pending");
        assert_eq!(s["runs"][1]["reasonCreated"], "retry");
        assert_eq!(s["retriesLeft"], 0);
    }

    // Everything pending is claimable: the untouched tasks, the acknowledged ones, and the
    // retry runs. Each exactly once.
    let mut expected: HashSet<(String, u64)> = all
        .iter()
        .filter(|id| !claimed.contains(*id))
        .map(|id| (id.clone(), 0))
        .collect();
    expected.extend(claimed.iter().map(|id| (id.clone(), 1)));
    let mut got = HashSet::new();
    let mut settled = false;
    loop {
        // One at a time: each claim is resolved well inside the short claim timeout.
        let r = q.claimWork(&tq, &worker("g", "w2", 1)).await.unwrap();
        let tasks = r["tasks"].as_array().unwrap();
        if tasks.is_empty() {
            // An index that lags still heads the queue with the runs just claimed, and a
            // call reads past only a few pages of them: done once it is empty when settled.
            if settled || index_lag().is_zero() {
                break;
            }
            settle_indexes().await;
            settled = true;
            continue;
        }
        settled = false;
        for t in tasks {
            let key = (
                t["status"]["taskId"].as_str().unwrap().to_string(),
                t["runId"].as_u64().unwrap(),
            );
            assert!(got.insert(key.clone()), "claimed twice: {key:?}");
            q.reportCompleted(&key.0, &key.1.to_string()).await.unwrap();
        }
    }
    assert!(
        expected.is_subset(&got),
        "missing: {:?}",
        expected.difference(&got)
    );
    // Anything else must be a create that was in flight at the kill and did get stored.
    for k in got.difference(&expected) {
        assert!(
            k.1 == 0 && attempted.contains(&k.0) && !acked.contains(&k.0),
            "unexpected claim {k:?}"
        );
    }
    let counts = q.taskQueueCounts(&tq).await.unwrap();
    assert_eq!(counts["pendingTasks"], 0);
    assert_eq!(counts["claimedTasks"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_restarts_with_resolutions_intact() {
    let dir = tempfile::tempdir().unwrap();
    let tq = task_queue_id();
    let mut server = crash_server(dir.path()).await;
    let q = queue_client(&server.root);
    let done = create_on(&q, &tq).await;
    let failed = create_on(&q, &tq).await;
    let canceled = create_on(&q, &tq).await;
    let pending = create_on(&q, &tq).await;
    for id in [&done, &failed] {
        q.claimTask(id, "0", &claimer("g", "w")).await.unwrap();
    }
    q.reportCompleted(&done, "0").await.unwrap();
    q.reportFailed(&failed, "0").await.unwrap();
    q.cancelTask(&canceled).await.unwrap();
    let before = statuses(
        &q,
        &[
            done.clone(),
            failed.clone(),
            canceled.clone(),
            pending.clone(),
        ],
    )
    .await;
    server.kill();

    let server = crash_server(dir.path()).await;
    let q = queue_client(&server.root);
    let after = statuses(
        &q,
        &[
            done.clone(),
            failed.clone(),
            canceled.clone(),
            pending.clone(),
        ],
    )
    .await;
    assert_eq!(before, after, "statuses are exactly as before the kill");
    // Idempotency still holds across the restart.
    assert_eq!(
        q.reportCompleted(&done, "0").await.unwrap()["status"],
        before[0]["status"]
    );
    let c = q.claimWork(&tq, &worker("g", "w", 4)).await.unwrap();
    let tasks = c["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["status"]["taskId"], pending.as_str());
}

async fn create_on(q: &taskcluster::Queue, tq: &str) -> String {
    let id = slugid();
    q.createTask(&id, &task_def(tq)).await.unwrap();
    id
}
