//! Claim expiry with a short claim timeout: the reaper resolves expired claims
//! `exception/claim-expired` and retries while retries remain; reclaimTask keeps a claim alive.

use crate::common::*;
use blackbox::*;
use serde_json::json;
use std::time::Duration;

/// The claim timeout of these tests: a second, and five in the deployed shape, where one
/// call crosses the gateway, a function process and LocalStack, and takes up to a second on a
/// loaded machine (a claim must outlast the calls that keep it).
fn claim_secs() -> u64 {
    // A call may also meet its function's cold start: over 2 s in a loaded CI run, which a
    // 3 s claim did not always outlast between a claim and its reclaim.
    local_or_shape(1, 5)
}

/// `n` tenths of the claim timeout.
fn tenths(n: u64) -> Duration {
    Duration::from_millis(claim_secs() * 100 * n)
}

async fn short_claims() -> TestServer {
    spawn_app_with(|cfg| cfg.queue.claim_timeout_secs = claim_secs()).await
}

#[tokio::test]
async fn an_expired_claim_is_retried_while_retries_remain() {
    let app = short_claims().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 1}))).await;
    let claim = claim_one(&app, &tq, "g", "w").await;
    let until = claim["takenUntil"].as_str().unwrap().to_string();

    let s = wait_status(&app, &id, Duration::from_secs(10) + tenths(20), |s| {
        s["runs"].as_array().is_some_and(|r| r.len() == 2)
    })
    .await;
    assert_eq!(s["runs"][0]["state"], "exception");
    assert_eq!(s["runs"][0]["reasonResolved"], "claim-expired");
    assert_eq!(s["runs"][0]["takenUntil"], until.as_str());
    assert!(s["runs"][0]["resolved"].as_str().unwrap() >= until.as_str());
    assert_eq!(s["runs"][1]["state"], "pending");
    assert_eq!(s["runs"][1]["reasonCreated"], "retry");
    assert_eq!(s["state"], "pending");
    assert_eq!(s["retriesLeft"], 0);
    let exc = wait_events(&app, &id, "task-exception", Some(0), 1).await;
    assert_eq!(
        exc[0].payload["status"]["runs"][0]["reasonResolved"],
        "claim-expired"
    );
    wait_events(&app, &id, "task-pending", Some(1), 1).await;

    // The worker that lost the claim can no longer resolve or reclaim it.
    assert_eq!(err_status(q.reportCompleted(&id, "0").await), 409);
    assert_eq!(err_status(q.reclaimTask(&id, "0").await), 409);

    // Run 1 expires too: both runs claim-expired, the task ends in exception.
    let c = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(c["runId"], 1);
    assert_eq!(c["status"]["retriesLeft"], 0);
    let s = wait_status(&app, &id, Duration::from_secs(10) + tenths(20), |s| {
        s["state"] == "exception"
    })
    .await;
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["reasonResolved"], "claim-expired");
    }
}

#[tokio::test]
async fn an_expired_claim_without_retries_is_final() {
    let app = short_claims().await;
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
    claim_one(&app, &tq, "g", "w").await;
    let s = wait_status(&app, &id, Duration::from_secs(10) + tenths(20), |s| {
        s["state"] == "exception"
    })
    .await;
    assert_eq!(s["runs"].as_array().unwrap().len(), 1);
    assert_eq!(s["runs"][0]["reasonResolved"], "claim-expired");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&app, &id).await, s, "nothing more happens");
    counts_settle(&app, &tq, Some(0), Some(0)).await;
}

#[tokio::test]
async fn reclaiming_extends_taken_until_and_keeps_the_claim() {
    let app = short_claims().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    let claim = claim_one(&app, &tq, "g", "w").await;
    let mut until = claim["takenUntil"].as_str().unwrap().to_string();
    // Keep reclaiming every 0.3 claims for 2.4 claims: well past the original claim.
    for _ in 0..8 {
        tokio::time::sleep(tenths(3)).await;
        let r = q.reclaimTask(&id, "0").await.unwrap();
        let next = r["takenUntil"].as_str().unwrap().to_string();
        assert!(next > until, "takenUntil moves forward: {next} <= {until}");
        assert_eq!(r["status"]["state"], "running");
        until = next;
    }
    let s = status(&app, &id).await;
    assert_eq!(s["state"], "running");
    assert_eq!(s["runs"].as_array().unwrap().len(), 1);
    assert_eq!(s["runs"][0]["takenUntil"], until.as_str());
    let done = q.reportCompleted(&id, "0").await.unwrap();
    assert_eq!(done["status"]["state"], "completed");
}

#[tokio::test]
async fn a_claim_expires_once_reclaiming_stops() {
    let app = short_claims().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
    claim_one(&app, &tq, "g", "w").await;
    tokio::time::sleep(tenths(3)).await;
    let r = q.reclaimTask(&id, "0").await.unwrap();
    let until = r["takenUntil"].as_str().unwrap().to_string();
    let s = wait_status(&app, &id, Duration::from_secs(10) + tenths(20), |s| {
        s["state"] == "exception"
    })
    .await;
    assert_eq!(s["runs"][0]["reasonResolved"], "claim-expired");
    assert_eq!(
        s["runs"][0]["takenUntil"],
        until.as_str(),
        "the reclaimed takenUntil was honoured"
    );
    assert!(s["runs"][0]["resolved"].as_str().unwrap() >= until.as_str());
}

#[tokio::test]
async fn claimed_counts_follow_claims_and_expiry() {
    let app = short_claims().await;
    let tq = task_queue_id();
    let a = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
    let b = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
    counts_settle(&app, &tq, Some(2), Some(0)).await;
    claim_one(&app, &tq, "g", "w").await;
    claim_one(&app, &tq, "g", "w").await;
    counts_settle(&app, &tq, Some(0), Some(2)).await;
    for id in [&a, &b] {
        wait_status(&app, id, Duration::from_secs(10) + tenths(20), |s| {
            s["state"] == "exception"
        })
        .await;
    }
    counts_settle(&app, &tq, Some(0), Some(0)).await;
}

/// A claim ends at `takenUntil`, not when the reaper comes by (as deployed it runs once a
/// minute; here once an hour): reclaimTask and the reports answer as they would after the
/// reaper, and the task's status says so at once, retry included.
#[tokio::test]
async fn a_claim_is_over_at_taken_until_however_late_the_reaper_comes() {
    let app = spawn_app_with(|cfg| {
        cfg.queue.claim_timeout_secs = claim_secs();
        cfg.reaper_interval_ms = 3_600_000;
    })
    .await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"retries": 1}))).await;
    claim_one(&app, &tq, "g", "w").await;
    // Still held: reclaiming works, and moves takenUntil a claim on.
    let r = q
        .reclaimTask(&id, "0")
        .await
        .expect("reclaim within the claim");
    let until = r["takenUntil"].as_str().unwrap().to_string();
    tokio::time::sleep(tenths(15)).await;
    assert_eq!(err_status(q.reclaimTask(&id, "0").await), 409);
    let s = q.status(&id).await.unwrap()["status"].clone();
    assert_eq!(s["runs"][0]["state"], "exception");
    assert_eq!(s["runs"][0]["reasonResolved"], "claim-expired");
    assert_eq!(s["runs"][0]["takenUntil"], until.as_str());
    assert_eq!(s["runs"][1]["state"], "pending");
    assert_eq!(s["runs"][1]["reasonCreated"], "retry");
    for report in ["completed", "failed", "exception"] {
        let r = match report {
            "completed" => q.reportCompleted(&id, "0").await,
            "failed" => q.reportFailed(&id, "0").await,
            _ => {
                q.reportException(&id, "0", &json!({"reason": "worker-shutdown"}))
                    .await
            }
        };
        assert_eq!(err_status(r), 409, "report{report} after takenUntil");
    }
    wait_events(&app, &id, "task-exception", Some(0), 1).await;
    wait_events(&app, &id, "task-pending", Some(1), 1).await;
    // The retry is claimable at once.
    let c = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(c["runId"], 1);
}
