//! Changes of a task's state on request: schedule, rerun, cancel, change priority, and the
//! workers' reports. Each is one transition of the state machine under [`Queue::mutate`].

use super::core::Queue;
use crate::error::ApiResult;
use crate::ids::TaskId;
use crate::records::task::{Priority, ReasonResolved, TaskRecord};
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
}
