//! Many workers at once: every task is claimed exactly once.

use crate::common::*;
use blackbox::*;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const WORKERS: usize = 20;

/// Tasks the twenty workers drain: 500, or `TCQ_RACE_TASKS` (the test command's DynamoDB pass
/// takes 100: there every claim is a conditional write to LocalStack, and 500 took 300 s
/// beside the other tests; reliability's racers claim 1,000 there too).
fn race_tasks() -> usize {
    env_num("TCQ_RACE_TASKS", 500usize).max(WORKERS) / WORKERS * WORKERS
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_workers_claim_five_hundred_tasks_exactly_once() {
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 500).await;
    let root = app.root_url();
    let tq = task_queue_id();
    let tasks_n = race_tasks();

    // Create the tasks from 20 concurrent clients.
    let creators: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (root, tq) = (root.clone(), tq.clone());
            tokio::spawn(async move {
                let q = queue_client(&root);
                let mut ids = vec![];
                for _ in 0..tasks_n / WORKERS {
                    let id = slugid();
                    q.createTask(&id, &task_def(&tq)).await.expect("create");
                    ids.push(id);
                }
                ids
            })
        })
        .collect();
    let mut created = HashSet::new();
    for c in creators {
        created.extend(c.await.unwrap());
    }
    assert_eq!(created.len(), tasks_n);
    counts_settle(&app, &tq, Some(tasks_n as u64), None).await;
    assert_eq!(
        app.queue().pendingTasks(&tq).await.unwrap()["pendingTasks"],
        tasks_n as u64
    );

    // 20 workers claim (1-4 at a time) and complete until the queue is drained.
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (root, tq) = (root.clone(), tq.clone());
            tokio::spawn(async move {
                let q = queue_client(&root);
                let wid = format!("worker-{w}");
                let mut claimed: Vec<(String, u64)> = vec![];
                loop {
                    let n = 1 + (w % 4) as u32;
                    let r = q
                        .claimWork(&tq, &worker("pool", &wid, n))
                        .await
                        .expect("claimWork");
                    let tasks = r["tasks"].as_array().cloned().unwrap_or_default();
                    assert!(tasks.len() <= n as usize, "more than asked for");
                    if tasks.is_empty() {
                        let left = q.pendingTasks(&tq).await.expect("pendingTasks");
                        if left["pendingTasks"] == 0 {
                            break;
                        }
                        continue;
                    }
                    for t in tasks {
                        let id = t["status"]["taskId"].as_str().unwrap().to_string();
                        let run = t["runId"].as_u64().unwrap();
                        assert_eq!(t["workerId"], wid.as_str());
                        q.reportCompleted(&id, &run.to_string())
                            .await
                            .unwrap_or_else(|e| panic!("{wid} completing {id}: {e:#}"));
                        claimed.push((id, run));
                    }
                }
                (wid, claimed)
            })
        })
        .collect();
    let mut claims: HashMap<String, Vec<String>> = HashMap::new();
    let mut busy_workers = 0;
    for w in workers {
        let (wid, got) = w.await.unwrap();
        if !got.is_empty() {
            busy_workers += 1;
        }
        for (id, run) in got {
            assert_eq!(run, 0, "no task needed a second run");
            claims.entry(id).or_default().push(wid.clone());
        }
    }
    let took = started.elapsed();
    eprintln!("drained {tasks_n} tasks with {WORKERS} workers in {took:?}");
    let twice: Vec<_> = claims.iter().filter(|(_, w)| w.len() > 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    assert_eq!(claims.len(), tasks_n, "every task claimed");
    assert!(claims.keys().all(|id| created.contains(id)));
    assert!(busy_workers > 1, "work was shared between workers");

    // Every task is completed with exactly one run.
    // A hundred ids a call, every page: one call over all 500 outlasted its function's 15 s
    // on a loaded LocalStack, and a reply may stop short by size.
    let ids: Vec<String> = created.iter().cloned().collect();
    let statuses = statuses_of(&app.queue(), &ids, 100)
        .await
        .expect("statuses");
    assert_eq!(statuses.len(), tasks_n);
    for s in &statuses {
        let s = &s["status"];
        assert_eq!(s["state"], "completed", "{s:#}");
        assert_eq!(s["runs"].as_array().unwrap().len(), 1);
    }
    counts_settle(&app, &tq, Some(0), Some(0)).await;

    // One task-running message per task.
    let running = poll(
        Duration::from_secs(10),
        "all task-running events",
        || async {
            let ids: HashSet<String> = app
                .events()
                .iter()
                .filter(|e| short_name(e) == "task-running")
                .filter_map(|e| e.payload["status"]["taskId"].as_str().map(String::from))
                .filter(|id| created.contains(id))
                .collect();
            (ids.len() == tasks_n).then_some(ids)
        },
    )
    .await;
    assert_eq!(running, created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_workers_claiming_one_run_yield_one_winner() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    for _ in 0..5 {
        let id = create(&app, &task_def(&tq)).await;
        let calls: Vec<_> = (0..10)
            .map(|i| {
                let (root, id) = (app.root_url(), id.clone());
                tokio::spawn(async move {
                    queue_client(&root)
                        .claimTask(&id, "0", &claimer("g", &format!("w{i}")))
                        .await
                })
            })
            .collect();
        let mut winners = vec![];
        for c in calls {
            match c.await.unwrap() {
                Ok(r) => winners.push(r["workerId"].as_str().unwrap().to_string()),
                Err(e) => assert_eq!(status_of(&e), Some(409), "{e:#}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one claim wins");
        assert_eq!(
            status(&app, &id).await["runs"][0]["workerId"],
            winners[0].as_str()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_resolutions_leave_one_outcome() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    for _ in 0..5 {
        let id = create(&app, &def_with(&tq, json!({"retries": 0}))).await;
        claim_one(&app, &tq, "g", "w").await;
        let root = app.root_url();
        let calls: Vec<_> = ["completed", "failed", "exception", "cancel"]
            .into_iter()
            .map(|how| {
                let (root, id) = (root.clone(), id.clone());
                tokio::spawn(async move {
                    let q = queue_client(&root);
                    let r = match how {
                        "completed" => q.reportCompleted(&id, "0").await,
                        "failed" => q.reportFailed(&id, "0").await,
                        "exception" => {
                            q.reportException(&id, "0", &json!({"reason": "internal-error"}))
                                .await
                        }
                        _ => q.cancelTask(&id).await,
                    };
                    (how, r)
                })
            })
            .collect();
        let mut ok = vec![];
        for c in calls {
            let (how, r) = c.await.unwrap();
            match r {
                Ok(v) => ok.push((how, v)),
                Err(e) => assert_eq!(status_of(&e), Some(409), "{how}: {e:#}"),
            }
        }
        let final_status = status(&app, &id).await;
        assert_eq!(final_status["runs"].as_array().unwrap().len(), 1);
        assert!(
            ["completed", "failed", "exception"].contains(&final_status["state"].as_str().unwrap())
        );
        // Every successful reply shows the same, final resolution (a late cancel of a resolved
        // task is a no-op that returns it too).
        assert!(!ok.is_empty());
        for (how, v) in ok {
            assert_eq!(v["status"], final_status, "{how}");
        }
    }
}
