//! The claim and deadline reapers: each pass walks a sharded, time-ordered index (never a
//! scan) and applies the state machine's expiry to every entry that is due.

use super::core::Queue;
use crate::error::ApiResult;
use crate::records::task::{index, TaskRecord, TASKS};
use crate::time::Ts;

impl Queue {
    /// Claim reaper, one task: expires its claim if still due. True if resolved.
    pub async fn reap_claim(
        &self,
        task_id: &str,
        run_id: u32,
        taken_until: Ts,
        now: Ts,
    ) -> ApiResult<bool> {
        Ok(self
            .mutate(task_id, |r| Ok(r.expire_claim(run_id, taken_until, now)))
            .await?
            .1)
    }

    /// Deadline reaper, one task: resolves it if unresolved past its deadline. True if resolved.
    pub async fn reap_deadline(&self, task_id: &str, now: Ts) -> ApiResult<bool> {
        Ok(self
            .mutate(task_id, |r| Ok(r.deadline_exceeded(now)))
            .await?
            .1)
    }

    /// One pass of the claim reaper over every shard; returns how many claims expired.
    pub async fn reap_claims_once(&self, now: Ts, batch: usize) -> ApiResult<usize> {
        let mut n = 0;
        for item in self.due_in(TASKS, index::CLAIMS, now, batch).await? {
            let rec: TaskRecord = serde_json::from_value(item.data)?;
            let Some(run) = rec.runs.last() else { continue };
            let Some(taken_until) = run.taken_until else {
                continue;
            };
            n += self
                .reap_claim(&rec.task_id, run.run_id, taken_until, now)
                .await? as usize;
        }
        Ok(n)
    }

    /// One pass of the deadline reaper over every shard; returns how many tasks it resolved.
    pub async fn reap_deadlines_once(&self, now: Ts, batch: usize) -> ApiResult<usize> {
        let mut n = 0;
        for item in self.due_in(TASKS, index::DEADLINE, now, batch).await? {
            n += self.reap_deadline(&item.pk, now).await? as usize;
        }
        Ok(n)
    }
}
