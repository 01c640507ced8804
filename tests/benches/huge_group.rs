//! A huge task group (issue 39.3): changeTaskGroupPriority and cancelTaskGroup on a group of
//! `BENCH_TASKS` (50,000) tasks answer after `TCQ_GROUP_CALL_TASKS` (2,000) members, and the
//! `groupChanges` job finishes each in passes of the deployed budget (80 % of 300 s).
//!
//! Run (embedded SQLite, no services, a few minutes):
//!   cargo bench -p blackbox --bench huge_group
//!
//! Every operation is the queue's own over an embedded store, in this process. Printed: how
//! long each call took to answer and what it did, how many job passes and how long they took
//! to finish the change, and this process's CPU time per task changed.

use blackbox::env_num;
use futures_util::StreamExt;
use serde_json::json;
use shared::ids::{TaskId, TaskQueueId};
use shared::queue::{Queue, QueueConfig};
use shared::records::task::Priority;
use shared::time::{Budget, Ts, MINUTE};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cpu() -> Duration {
    blackbox::release::cpu_time("self").unwrap_or_default()
}

/// Runs the `groupChanges` job's passes until nothing is under way: (passes, wall time).
async fn finish(queue: &Queue) -> (usize, Duration) {
    let started = Instant::now();
    let mut passes = 0;
    loop {
        let budget = Budget::of(Duration::from_secs(240));
        let pass = queue
            .advance_group_changes_once(Ts::now(), 100, &budget)
            .await
            .expect("groupChanges pass");
        passes += 1;
        if !pass.more {
            return (passes, started.elapsed());
        }
    }
}

#[tokio::main]
async fn main() {
    let n: usize = env_num("BENCH_TASKS", 50_000);
    let per_call: u64 = env_num("TCQ_GROUP_CALL_TASKS", 2_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = Arc::new(blackbox::embedded_queue(
        &dir.path().join("queue.db"),
        QueueConfig {
            group_call_tasks: per_call,
            ..QueueConfig::default()
        },
    ));
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("task queue id");
    let group = blackbox::slugid();
    let created = Instant::now();
    futures_util::stream::iter(0..n)
        .for_each_concurrent(16, |_| {
            let (queue, tq, group) = (queue.clone(), tq.clone(), group.clone());
            async move {
                let now = Ts::now();
                let mut body = json!({
                    "taskQueueId": tq.as_str(),
                    "taskGroupId": group,
                    "created": now,
                    "deadline": now.plus(24 * 60 * MINUTE),
                    "payload": {},
                    "metadata": {"name": "n", "description": "d", "owner": "o@example.com",
                                 "source": "https://example.com/bench"}
                });
                shared::schema::validate_input("create-task-request", &mut body).expect("valid");
                let id = TaskId::parse(&blackbox::slugid()).expect("id");
                queue
                    .create_task(&id, body, false, now)
                    .await
                    .expect("createTask");
            }
        })
        .await;
    println!(
        "{n} tasks in one group, created in {:.1?}",
        created.elapsed()
    );

    let (c0, t0) = (cpu(), Instant::now());
    let r = queue
        .change_task_group_priority(&group, Priority::High, Ts::now())
        .await
        .expect("changeTaskGroupPriority");
    let answered = t0.elapsed();
    let (passes, took) = finish(&queue).await;
    let per_task = (cpu() - c0).as_secs_f64() * 1e6 / n as f64;
    println!(
        "changeTaskGroupPriority: answered in {answered:.1?} having changed {}; the job finished in {passes} pass(es), {took:.1?}; {per_task:.0} µs of CPU per task",
        r["tasksAffected"]
    );

    queue
        .seal_task_group(&group, Ts::now())
        .await
        .expect("seal");
    let (c0, t0) = (cpu(), Instant::now());
    let r = queue
        .cancel_task_group(&group, Ts::now())
        .await
        .expect("cancelTaskGroup");
    let answered = t0.elapsed();
    let (passes, took) = finish(&queue).await;
    let per_task = (cpu() - c0).as_secs_f64() * 1e6 / n as f64;
    println!(
        "cancelTaskGroup: answered in {answered:.1?} having cancelled {}; the job finished in {passes} pass(es), {took:.1?}; {per_task:.0} µs of CPU per task",
        r["cancelledCount"]
    );
    let group_now = queue.task_group(&group, Ts::now()).await.expect("group");
    assert!(group_now.change.is_none(), "nothing left under way");
}
