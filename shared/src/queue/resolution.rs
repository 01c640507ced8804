//! Changes of a task's state on request: schedule, rerun, cancel, change priority, and the
//! workers' reports. Each is one transition of the state machine under [`Queue::mutate`].

use super::core::Queue;
use crate::error::ApiResult;
use crate::ids::TaskId;
use crate::records::task::{index, Priority, ReasonResolved, TaskRecord, TASKS};
use crate::store::SkRange;
use crate::time::Ts;

impl Queue {
    /// scheduleTask.
    pub async fn schedule_task(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        Ok(self.mutate(task_id.as_str(), |r| r.schedule(now)).await?.0)
    }

    /// rerunTask.
    pub async fn rerun_task(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        Ok(self.mutate(task_id.as_str(), |r| r.rerun(now)).await?.0)
    }

    /// cancelTask.
    pub async fn cancel_task(&self, task_id: &TaskId, now: Ts) -> ApiResult<TaskRecord> {
        Ok(self.mutate(task_id.as_str(), |r| r.cancel(now)).await?.0)
    }

    /// changeTaskPriority.
    pub async fn change_priority(
        &self,
        task_id: &TaskId,
        p: Priority,
        now: Ts,
    ) -> ApiResult<TaskRecord> {
        Ok(self
            .mutate(task_id.as_str(), |r| r.change_priority(p, now))
            .await?
            .0)
    }

    /// reportCompleted / reportFailed / reportException.
    pub async fn resolve(
        &self,
        task_id: &TaskId,
        run_id: u32,
        outcome: ReasonResolved,
        now: Ts,
    ) -> ApiResult<TaskRecord> {
        Ok(self
            .mutate_settled(task_id.as_str(), now, |r| r.resolve(run_id, outcome, now))
            .await?
            .0)
    }

    /// worker-manager's worker-stopped or worker-removed for the `workers` (`(workerGroup,
    /// workerId)` pairs) of task queue `task_queue_id` (their worker pool): each run they still
    /// hold is resolved `exception`/`worker-shutdown` at `now` and retried as reportException
    /// retries (see [`TaskRecord::resolve_gone_worker`]). The runs are found in the task
    /// queue's claimed index, a page at a time, once for all the workers: it reads every claimed
    /// run of the queue, which upstream finds by worker. Idempotent; what it resolved.
    pub async fn resolve_gone_workers(
        &self,
        task_queue_id: &str,
        workers: &std::collections::BTreeSet<(String, String)>,
        now: Ts,
    ) -> ApiResult<usize> {
        let mut after = None;
        let mut resolved = 0;
        loop {
            let page = self
                .store
                .query_index(
                    TASKS,
                    index::CLAIMED,
                    task_queue_id,
                    &SkRange::default(),
                    after.as_ref(),
                    crate::page::MAX_PAGE,
                )
                .await?;
            for item in page.items {
                let rec: TaskRecord = item.data.decode()?;
                let Some(run) = rec.runs.last() else { continue };
                let (Some(group), Some(worker)) = (&run.worker_group, &run.worker_id) else {
                    continue;
                };
                if !workers.contains(&(group.clone(), worker.clone())) {
                    continue;
                }
                let run_id = run.run_id;
                let outcome = self
                    .mutate_settled(&rec.task_id, now, |r| {
                        r.resolve_gone_worker(run_id, group, worker, now)
                    })
                    .await;
                match outcome {
                    Ok((_, done)) => resolved += done as usize,
                    // Expired and deleted since the index was read: nothing to resolve.
                    Err(e) if e.code == crate::error::ErrorCode::ResourceNotFound => {}
                    Err(e) => return Err(e),
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(resolved),
            }
        }
    }
}
