//! The claim and deadline reapers: each pass walks a sharded, time-ordered index (never a
//! scan) and applies the state machine's expiry to every entry that is due.

use super::core::{chunked, Pass, Queue};
use crate::error::{ApiResult, ErrorCode};
use crate::records::task::{index, TaskRecord, TASKS};
use crate::time::{Budget, Ts};

/// A reaper's answer for one task: a task that is gone has nothing left to reap. Its index
/// entry was read before the expiry job deleted it (or, in DynamoDB, from an index that had
/// not caught up with the deletion yet); failing the pass on it would leave every other due
/// task of the pass waiting for the next invocation.
fn gone_is_done(reaped: ApiResult<(TaskRecord, bool)>) -> ApiResult<bool> {
    match reaped {
        Ok((_, resolved)) => Ok(resolved),
        Err(e) if e.code == ErrorCode::ResourceNotFound => Ok(false),
        Err(e) => Err(e),
    }
}

impl Queue {
    /// Claim reaper, one task: expires its claim if still due. True if resolved; false too if
    /// the task is gone.
    pub async fn reap_claim(
        &self,
        task_id: &str,
        run_id: u32,
        taken_until: Ts,
        now: Ts,
    ) -> ApiResult<bool> {
        gone_is_done(
            self.mutate(task_id, |r| Ok(r.expire_claim(run_id, taken_until, now)))
                .await,
        )
    }

    /// Deadline reaper, one task: resolves it if unresolved past its deadline, after
    /// expiring a claim that ran out before it (whichever passed first decides, whichever
    /// reaper comes first). True if resolved; false too if the task is gone.
    pub async fn reap_deadline(&self, task_id: &str, now: Ts) -> ApiResult<bool> {
        gone_is_done(self.mutate(task_id, |r| Ok(r.settle(now))).await)
    }

    /// One pass of the claim reaper over every shard: expires the claims due at `now`, a few
    /// at a time, while `budget` lasts.
    pub async fn reap_claims_once(
        &self,
        now: Ts,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let due = self.due_in(TASKS, index::CLAIMS, now, batch).await?;
        let mut claims = vec![];
        for item in due.items {
            let rec: TaskRecord = item.data.decode()?;
            if let Some((run, Some(until))) = rec.runs.last().map(|r| (r.run_id, r.taken_until)) {
                claims.push((rec.task_id, run, until));
            }
        }
        let (reaped, cut) = chunked(&claims, budget, |(id, run, until)| {
            self.reap_claim(id, *run, *until, now)
        })
        .await?;
        Ok(Pass {
            done: reaped.into_iter().filter(|r| *r).count(),
            more: due.more || cut,
        })
    }

    /// One pass of the deadline reaper over every shard: resolves the tasks whose deadline
    /// passed by `now`, a few at a time, while `budget` lasts.
    pub async fn reap_deadlines_once(
        &self,
        now: Ts,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let due = self.due_in(TASKS, index::DEADLINE, now, batch).await?;
        let (reaped, cut) = chunked(&due.items, budget, |i| self.reap_deadline(&i.pk, now)).await?;
        Ok(Pass {
            done: reaped.into_iter().filter(|r| *r).count(),
            more: due.more || cut,
        })
    }
}
