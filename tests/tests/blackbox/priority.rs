//! Priorities: claim order, changeTaskPriority, and the removed `normal` priority.

use crate::common::*;
use blackbox::*;
use serde_json::json;
use std::time::{Duration, Instant};

const ORDER: [&str; 7] = [
    "highest",
    "very-high",
    "high",
    "medium",
    "low",
    "very-low",
    "lowest",
];

#[tokio::test]
async fn a_high_task_is_claimed_before_an_older_lowest_one() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let low = create(&app, &def_with(&tq, json!({"priority": "lowest"}))).await;
    let high = create(&app, &def_with(&tq, json!({"priority": "high"}))).await;
    // Claims order what the pending index shows: with an index that lags, a claim made at
    // once can find the older entry alone (the test failed so under TCQ_INDEX_LAG_MS, on
    // 2b5d9c6 as well).
    settle_indexes().await;
    let first = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(first["status"]["taskId"], high.as_str());
    assert_eq!(first["task"]["priority"], "high");
    let second = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(second["status"]["taskId"], low.as_str());
}

#[tokio::test]
async fn claims_follow_all_seven_priorities() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    // Created lowest first, so insertion order is the opposite of the claim order.
    let mut ids = vec![];
    for p in ORDER.iter().rev() {
        ids.push((
            *p,
            create(&app, &def_with(&tq, json!({ "priority": p }))).await,
        ));
    }
    // Claims order what the pending index shows.
    settle_indexes().await;
    for want in ORDER {
        let c = claim_one(&app, &tq, "g", "w").await;
        let (_, id) = ids.iter().find(|(p, _)| *p == want).unwrap();
        assert_eq!(
            c["status"]["taskId"],
            id.as_str(),
            "expected the {want} task"
        );
        assert_eq!(c["status"]["priority"], want);
    }
}

#[tokio::test]
async fn one_claim_work_call_returns_the_highest_priorities_first() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    for p in ["low", "lowest", "medium", "lowest", "highest", "low"] {
        create(&app, &def_with(&tq, json!({ "priority": p }))).await;
    }
    settle_indexes().await;
    let r = q.claimWork(&tq, &worker("g", "w", 3)).await.unwrap();
    let mut got: Vec<&str> = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["priority"].as_str().unwrap())
        .collect();
    got.sort_by_key(|p| ORDER.iter().position(|o| o == p));
    assert_eq!(got, ["highest", "medium", "low"]);
}

#[tokio::test]
async fn change_task_priority_reorders_pending_work() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let a = create(&app, &def_with(&tq, json!({"priority": "lowest"}))).await;
    let b = create(&app, &def_with(&tq, json!({"priority": "medium"}))).await;
    let r = q
        .changeTaskPriority(&a, &json!({"newPriority": "highest"}))
        .await
        .unwrap();
    assert_eq!(r["status"]["priority"], "highest");
    assert_eq!(r["status"]["state"], "pending");
    assert_eq!(status(&app, &a).await["priority"], "highest");
    assert_eq!(q.task(&a).await.unwrap()["priority"], "highest");
    let ev = wait_events(&app, &a, "task-priority-changed", None, 1).await;
    assert_eq!(ev[0].payload["oldPriority"], "lowest");
    assert_eq!(ev[0].payload["newPriority"], "highest");
    // The pending index follows (at once here; within about a second on DynamoDB).
    poll(
        Duration::from_secs(10),
        "the pending index to follow",
        || async {
            let l = q.listPendingTasks(&tq, None, None).await.ok()?;
            (l["tasks"][0]["taskId"] == a.as_str()).then_some(())
        },
    )
    .await;
    // With an index that lags, the poll above can also pass before `b` shows at all (`a`
    // first under its old priority, alone), and the claim then finds `b` beside `a`'s old
    // entry: wait until the index shows every write made so far.
    settle_indexes().await;

    let first = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(first["status"]["taskId"], a.as_str());
    assert_eq!(first["task"]["priority"], "highest");
    let second = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(second["status"]["taskId"], b.as_str());
}

#[tokio::test]
async fn change_task_priority_of_a_running_task_works() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    claim_one(&app, &tq, "g", "w").await;
    let r = q
        .changeTaskPriority(&id, &json!({"newPriority": "low"}))
        .await
        .unwrap();
    assert_eq!(r["status"]["priority"], "low");
    assert_eq!(r["status"]["state"], "running");
}

#[tokio::test]
async fn change_task_priority_conflicts_on_resolved_tasks_and_same_priority() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &def_with(&tq, json!({"priority": "medium"}))).await;
    let same = raw(
        &app,
        "POST",
        &format!("/task/{id}/priority"),
        Some(&json!({"newPriority": "medium"})),
    )
    .await;
    assert_error(&same, 409, "RequestConflict");
    claim_one(&app, &tq, "g", "w").await;
    complete(&app, &id, 0).await;
    let resolved = raw(
        &app,
        "POST",
        &format!("/task/{id}/priority"),
        Some(&json!({"newPriority": "high"})),
    )
    .await;
    assert_error(&resolved, 409, "RequestConflict");
    assert_eq!(status(&app, &id).await["priority"], "medium");
    let missing = q
        .changeTaskPriority(&slugid(), &json!({"newPriority": "high"}))
        .await;
    assert_eq!(err_status(missing), 404);
}

#[tokio::test]
async fn normal_priority_is_rejected() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let id = slugid();
    let got = raw(
        &app,
        "PUT",
        &format!("/task/{id}"),
        Some(&def_with(&tq, json!({"priority": "normal"}))),
    )
    .await;
    let msg = assert_error(&got, 400, "InputValidationError");
    assert!(msg.contains("priority"), "{msg}");
    assert_eq!(
        err_status(app.queue().status(&id).await),
        404,
        "not created"
    );

    let pending = create(&app, &task_def(&tq)).await;
    for bad in [json!("normal"), json!("urgent"), json!(3), json!(null)] {
        let got = raw(
            &app,
            "POST",
            &format!("/task/{pending}/priority"),
            Some(&json!({ "newPriority": bad })),
        )
        .await;
        let msg = assert_error(&got, 400, "InputValidationError");
        assert!(msg.contains("newPriority"), "{msg}");
    }
    let got = raw(
        &app,
        "POST",
        &format!("/task/{pending}/priority"),
        Some(&json!({})),
    )
    .await;
    assert_error(&got, 400, "InputValidationError");
    assert_eq!(status(&app, &pending).await["priority"], "lowest");
}

#[tokio::test]
async fn a_priority_change_is_kept_by_a_rerun() {
    let app = spawn_app().await;
    let q = app.queue();
    let tq = task_queue_id();
    let id = create(&app, &task_def(&tq)).await;
    q.changeTaskPriority(&id, &json!({"newPriority": "very-high"}))
        .await
        .unwrap();
    claim_one(&app, &tq, "g", "w").await;
    complete(&app, &id, 0).await;
    create(&app, &def_with(&tq, json!({"priority": "high"}))).await;
    let r = q.rerunTask(&id).await.unwrap();
    assert_eq!(r["status"]["priority"], "very-high");
    // The rerun run outranks the newer high task.
    let c = claim_one(&app, &tq, "g", "w").await;
    assert_eq!(c["status"]["taskId"], id.as_str());
    assert_eq!(c["runId"], 1);
}

#[tokio::test]
async fn equal_priorities_are_claimed_oldest_first() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let mut ids = vec![];
    for _ in 0..6 {
        ids.push(create(&app, &task_def(&tq)).await);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for id in &ids {
        let c = claim_one(&app, &tq, "g", "w").await;
        assert_eq!(
            c["status"]["taskId"],
            id.as_str(),
            "claims follow insertion order"
        );
    }
}

/// What one run of [`starve`] saw.
struct Starved {
    /// How long after its creation the `lowest` task was claimed.
    lowest_waited: Duration,
    /// `highest` tasks created before the `lowest` task was claimed but claimed after it.
    overtaken: usize,
    /// `highest` tasks claimed before the `lowest` one.
    before: usize,
    /// `highest` tasks pending (created, and past any index lag) before the claim that got the
    /// `lowest` one was asked for.
    due: usize,
    /// Of those, the ones claimed after the `lowest` one.
    late: usize,
    /// `highest` tasks created in all.
    highest: usize,
    /// The longest time between two claims of one worker: a claim cycle.
    longest_cycle: Duration,
}

/// A pool of two workers under sustained `highest` load for `load_for`, with one `lowest`
/// task created first: each worker claims one task at a time and runs it for `run_for`, while
/// a feeder keeps a backlog of `highest` tasks waiting. The workers go on until the queue is
/// empty.
async fn starve(app: &TestServer, load_for: Duration, run_for: Duration) -> Starved {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let tq = task_queue_id();
    let start = Instant::now();
    let lowest = create(app, &def_with(&tq, json!({"priority": "lowest"}))).await;
    let claimed = AtomicUsize::new(0);
    let feeding = AtomicBool::new(true);
    // (taskId, created at), in creation order.
    let created: Mutex<Vec<(String, Duration)>> = Mutex::new(vec![]);
    // (taskId, claimed at), per worker, in claim order.
    let claims: Mutex<Vec<(usize, String, Duration)>> = Mutex::new(vec![]);
    // When the claim that got the lowest task was asked for.
    let lowest_asked: Mutex<Option<Duration>> = Mutex::new(None);
    // Under an index that lags, the tasks created within the lag are not yet claimable: the
    // backlog is larger by what two workers claim meanwhile (one per `RUN_FOR` each).
    let lag = index_lag();
    let backlog = 8 + 2 * (lag.as_millis() / RUN_FOR.as_millis()) as usize;
    let feed = || async {
        let batch = (0..4).map(|_| async {
            let id = create(app, &def_with(&tq, json!({"priority": "highest"}))).await;
            created.lock().unwrap().push((id, start.elapsed()));
        });
        futures_util::future::join_all(batch).await;
    };
    // The backlog is there before the workers start.
    while created.lock().unwrap().len() < backlog {
        feed().await;
    }
    settle_indexes().await;
    let feeder = async {
        while start.elapsed() < load_for {
            // Every task created (the lowest one too) less those claimed.
            let made = created.lock().unwrap().len() + 1;
            if made.saturating_sub(claimed.load(Ordering::SeqCst)) >= backlog {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            feed().await;
        }
        // The last tasks created are claimable before the workers may stop at an empty queue.
        settle_indexes().await;
        feeding.store(false, Ordering::SeqCst);
    };
    let work = |w: usize| {
        let (tq, claims, claimed, feeding) = (&tq, &claims, &claimed, &feeding);
        let (lowest, lowest_asked) = (&lowest, &lowest_asked);
        async move {
            let q = app.queue();
            loop {
                let asked = start.elapsed();
                let r = q
                    .claimWork(tq, &worker("pool", &format!("w{w}"), 1))
                    .await
                    .unwrap_or_else(|e| panic!("claimWork failed: {e:#}"));
                let Some(task) = r["tasks"].as_array().and_then(|t| t.first()).cloned() else {
                    if feeding.load(Ordering::SeqCst) {
                        continue;
                    }
                    return;
                };
                let id = task["status"]["taskId"].as_str().unwrap().to_string();
                if id == *lowest {
                    *lowest_asked.lock().unwrap() = Some(asked);
                }
                claims
                    .lock()
                    .unwrap()
                    .push((w, id.clone(), start.elapsed()));
                claimed.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(run_for).await;
                complete(app, &id, task["runId"].as_u64().unwrap()).await;
            }
        }
    };
    tokio::join!(feeder, work(0), work(1));
    let claims = claims.into_inner().unwrap();
    let created = created.into_inner().unwrap();
    let at = |id: &str| claims.iter().find(|(_, c, _)| c == id).map(|(_, _, t)| *t);
    let lowest_at = at(&lowest).expect("the lowest task was claimed");
    let overtaken = created
        .iter()
        .filter(|(id, made)| *made < lowest_at && at(id).is_some_and(|t| t > lowest_at))
        .count();
    let before = claims.iter().filter(|(_, _, t)| *t < lowest_at).count();
    let asked = lowest_asked
        .into_inner()
        .unwrap()
        .expect("the lowest task was claimed");
    let pending_before = |made: Duration| made + lag < asked;
    let due = created
        .iter()
        .filter(|(_, made)| pending_before(*made))
        .count();
    let late = created
        .iter()
        .filter(|(id, made)| pending_before(*made) && at(id).is_some_and(|t| t > lowest_at))
        .count();
    let mut longest_cycle = Duration::ZERO;
    for w in 0..2 {
        let mine: Vec<Duration> = claims.iter().filter(|c| c.0 == w).map(|c| c.2).collect();
        for pair in mine.windows(2) {
            longest_cycle = longest_cycle.max(pair[1] - pair[0]);
        }
    }
    assert_eq!(
        claims.len(),
        created.len() + 1,
        "every task was claimed once"
    );
    Starved {
        lowest_waited: lowest_at,
        overtaken,
        before,
        due,
        late,
        highest: created.len(),
        longest_cycle,
    }
}

/// The threshold of the aging tests and the time each task runs.
const THRESHOLD: Duration = Duration::from_secs(3);
const RUN_FOR: Duration = Duration::from_millis(200);

/// How long the load lasts: well past the threshold and two of the ager's periods (3 s in
/// the deployed shape).
fn load_for() -> Duration {
    THRESHOLD * 3 + minute_jobs_every(100) * 2
}

/// Priority aging: under sustained `highest` load, a `lowest` task is claimed once it has
/// waited the threshold (plus the ager's period and one claim cycle), ahead of `highest`
/// tasks that waited less.
#[tokio::test]
async fn a_lowest_task_is_claimed_after_the_aging_threshold_under_sustained_highest_load() {
    let app = spawn_app_with(|c| c.queue.priority_aging_ms = THRESHOLD.as_millis() as u64).await;
    let ager_every = minute_jobs_every(100);
    let on = starve(&app, load_for(), RUN_FOR).await;
    // The ager marks the run within one period of the threshold, plus its pass's own time
    // (passes do not overlap: at most another period); a worker then takes it at its next
    // claim.
    // The ager sees the task, and a worker the aged entry, each within the index's lag.
    let bound = THRESHOLD + ager_every * 2 + on.longest_cycle + index_lag() * 2;
    assert!(
        on.lowest_waited <= bound && on.lowest_waited >= THRESHOLD,
        "claimed {:?} after its creation; the threshold is {THRESHOLD:?}, the ager runs every \
         {ager_every:?} and a claim cycle took up to {:?}",
        on.lowest_waited,
        on.longest_cycle
    );
    assert!(
        on.overtaken > 0,
        "highest tasks waiting when the lowest one was claimed were left behind it ({} highest \
         in all)",
        on.highest
    );
    eprintln!(
        "aging on: lowest claimed after {:?} (bound {bound:?}), ahead of {} waiting highest \
         tasks; {} highest tasks",
        on.lowest_waited, on.overtaken, on.highest
    );
}

/// With aging off (0), upstream's strict order: under the same load, the `lowest` task is
/// claimed only after every `highest` task.
#[tokio::test]
async fn without_aging_a_lowest_task_waits_until_the_highest_tasks_run_out() {
    let app = spawn_app_with(|c| c.queue.priority_aging_ms = 0).await;
    let off = starve(&app, load_for(), RUN_FOR).await;
    // Every highest task that was pending when the lowest one's claim was asked for went
    // first. The feeder's last batch can still be on its way then: when its createTask calls
    // are slower than the workers drain the backlog, the queue holds only the lowest task for
    // a moment, and strict order hands it out. (That the load lasted is checked below.)
    assert_eq!(
        off.late, 0,
        "without aging, the lowest task is claimed after every highest one pending before it \
         ({} of {} highest tasks were pending; {} claimed before it)",
        off.due, off.highest, off.before
    );
    assert!(
        off.lowest_waited >= THRESHOLD * 2,
        "the load lasted past the threshold: lowest claimed after {:?}",
        off.lowest_waited
    );
    eprintln!(
        "aging off: lowest claimed after {:?}, after all {} highest tasks",
        off.lowest_waited, off.highest
    );
}
