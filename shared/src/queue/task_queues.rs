//! Task queues: pending and claimed counts, and listings of both.

use super::core::Queue;
use crate::error::{ApiError, ApiResult};
use crate::ids::TaskQueueId;
use crate::page::{encode_token, Filler, PageReq};
use crate::records::task::{index, TaskRecord, TASKS};
use crate::store::{SkRange, MAX_BATCH_GET};
use serde_json::{json, Map, Value};

impl Queue {
    /// pendingTasks: number of pending runs in a task queue.
    pub async fn pending_count(&self, q: &TaskQueueId) -> ApiResult<u64> {
        self.store
            .count_index(TASKS, index::PENDING, q.as_str(), &SkRange::default())
            .await
            .map_err(ApiError::from)
    }

    /// taskQueueCounts' claimed half: runs currently claimed from a task queue.
    pub async fn claimed_count(&self, q: &TaskQueueId) -> ApiResult<u64> {
        self.store
            .count_index(TASKS, index::CLAIMED, q.as_str(), &SkRange::default())
            .await
            .map_err(ApiError::from)
    }

    /// listPendingTasks / listClaimedTasks.
    pub async fn list_queue(
        &self,
        q: &TaskQueueId,
        claimed: bool,
        page: &PageReq,
    ) -> ApiResult<(Vec<Value>, Option<String>)> {
        let after = page.cursor()?;
        let idx = if claimed {
            index::CLAIMED
        } else {
            index::PENDING
        };
        let res = self
            .store
            .query_index(
                TASKS,
                idx,
                q.as_str(),
                &SkRange::default(),
                after.as_ref(),
                page.limit,
            )
            .await?;
        let mut out = Filler::default();
        let mut next = res.next;
        // The cursor just after the last run taken: its index entry and its keys.
        let mut last = after;
        let mut listed = Vec::with_capacity(res.items.len());
        for item in res.items {
            let rec: TaskRecord = item.data.decode()?;
            listed.push((rec, item.pk, item.sk));
        }
        // Definitions are read in batches, a few at once, as a task group's listing reads
        // them: one read per task made a page of a thousand take seconds on DynamoDB.
        'page: for chunk in listed.chunks(MAX_BATCH_GET * 2) {
            let ids: Vec<&str> = chunk.iter().map(|(r, _, _)| r.task_id.as_str()).collect();
            let defs = self.load_defs(&ids).await?;
            for ((rec, pk, sk), def) in chunk.iter().zip(defs) {
                let Some(run) = rec.runs.last() else { continue };
                let mut task = def.ok_or_else(|| {
                    ApiError::internal(format!("task {} has no definition", rec.task_id))
                })?;
                task["priority"] = json!(rec.priority.as_str());
                let mut entry = Map::new();
                entry.insert("taskId".into(), json!(rec.task_id));
                entry.insert("runId".into(), json!(run.run_id));
                if claimed {
                    entry.insert("workerGroup".into(), json!(run.worker_group));
                    entry.insert("workerId".into(), json!(run.worker_id));
                    entry.insert("claimed".into(), json!(run.started));
                } else {
                    entry.insert("inserted".into(), json!(run.scheduled));
                }
                entry.insert("task".into(), task);
                if !out.push(Value::Object(entry)) {
                    // Full: the next page starts at this run (just after the one before it).
                    next = last;
                    break 'page;
                }
                last = rec
                    .index_entries()
                    .into_iter()
                    .find(|e| e.index == idx)
                    .map(|e| (e.sk, pk.clone(), sk.clone()));
            }
        }
        Ok((out.into_items(), next.as_ref().map(encode_token)))
    }
}
