//! Bursts of tasks written straight through the queue's own operations (faster than over
//! HTTP, so that a burst can share one deadline), and the count of what a background pass
//! still has due. Shared by the deployed shape's tests and the benchmark.

use serde_json::Value;
use shared::ids::TaskId;
use shared::queue::Queue;
use shared::records::task::TASKS;
use shared::store::shard::{due_upto, shard_pk, SHARDS};
use shared::store::SkRange;
use shared::time::Ts;
use std::sync::Arc;

/// Tasks written at once while seeding: LocalStack's DynamoDB takes a lock per write, and
/// more at once only wait for it (at 32, some gave up waiting under load).
const AT_ONCE: usize = 8;

/// Creates `n` tasks (`AT_ONCE` at a time), each from `def(i)`, as if all at the moment
/// seeding began (a burst: a deadline it estimated too short for the store's pace is then
/// reached during seeding rather than refused as past); returns their ids.
pub async fn seed(queue: &Arc<Queue>, n: usize, def: impl Fn(usize) -> Value) -> Vec<TaskId> {
    let now = Ts::now();
    let ids: Vec<TaskId> = (0..n)
        .map(|_| TaskId::parse(&crate::slugid()).expect("a fresh slugid is a task id"))
        .collect();
    for (c, chunk) in ids.chunks(AT_ONCE).enumerate() {
        futures_util::future::try_join_all(chunk.iter().enumerate().map(|(i, id)| {
            let mut body = def(c * AT_ONCE + i);
            // Created when seeding began, as its write is: a definition made as its chunk
            // comes up would be created after a deadline held a second ahead.
            body["created"] = serde_json::json!(now.to_string());
            shared::schema::validate_input("create-task-request", &mut body)
                .expect("a valid definition");
            queue.create_task(id, body, false, now)
        }))
        .await
        .expect("seeded");
    }
    ids
}

/// Entries of the sharded index `idx` of the tasks table due at `now`, over every shard.
pub async fn due(queue: &Queue, idx: &'static str, now: Ts) -> usize {
    let mut n = 0;
    for shard in 0..SHARDS {
        let range = SkRange {
            upto: Some(due_upto(now)),
            ..Default::default()
        };
        n += queue
            .store
            .count_index(TASKS, idx, &shard_pk(idx, shard), &range)
            .await
            .expect("count") as usize;
    }
    n
}

/// The deadline of a burst whose reaper does not run while it is seeded (a deployed shape's
/// schedule disabled, [`crate::shape::Shape::set_schedule_enabled`]): a second from now.
/// [`seed`] writes every task as of the moment it begins, so each write is ahead of this
/// deadline however long seeding takes, and all the tasks are due once it ends: the reaper,
/// enabled again, finds the whole burst at once without the idle wait of
/// [`burst_deadline`]'s estimate.
pub fn held_deadline() -> Ts {
    Ts::now().plus(1_000)
}

/// A deadline far enough ahead that `n` more tasks can be seeded before it: one and a half
/// times the pace of a batch of `def` tasks (default deadlines) here, plus 10 s (LocalStack's
/// one DynamoDB process writes from a few to a few dozen tasks a second, with the load). The
/// batch timed follows one that is not: a fresh stack's first writes (cold functions, new
/// tables) went at a fifth of the pace, and a deadline set from them left a 5,000-task burst
/// idle for most of half an hour. Should seeding take longer, its last tasks are due as they
/// are written.
pub async fn burst_deadline(queue: &Arc<Queue>, n: usize, def: Value) -> Ts {
    seed(queue, 2 * AT_ONCE, |_| def.clone()).await;
    let t0 = std::time::Instant::now();
    seed(queue, 4 * AT_ONCE, |_| def.clone()).await;
    let per_task = t0.elapsed() / (4 * AT_ONCE) as u32;
    let ahead = std::time::Duration::from_secs(10) + per_task * (3 * n as u32) / 2;
    eprintln!(
        "{n} tasks to seed at {:.1} ms each: their deadline is {:.0} s ahead",
        per_task.as_secs_f64() * 1e3,
        ahead.as_secs_f64()
    );
    Ts::now().plus(ahead.as_millis() as i64)
}
