//! Priority aging: a pending run that has waited past the threshold
//! ([`QueueConfig::priority_aging_ms`](super::QueueConfig::priority_aging_ms)) is claimed
//! before any run that has waited less, whatever their priorities.
//!
//! The priority ager marks such runs ([`TaskRecord::age`]); a marked run's pending entry moves
//! to the rank that sorts first ([`PendingRank::Aged`]), ordered by age. Claims read the head
//! of the pending index as before, so aging adds no read to a claim: its cost is the ager's,
//! one query per priority and task queue per pass (usually empty: 0.5 read units each on
//! DynamoDB) and one write per run that ages.

use super::core::{chunked, Pass, Queue, PARALLEL};
use crate::error::ApiResult;
use crate::records::task::{index, PendingRank, TaskRecord, TASKS};
use crate::store::shard::due_upto;
use crate::store::SkRange;
use crate::time::{Budget, Ts};

impl Queue {
    /// One pass of the priority ager at `now`: in every live task queue, marks aged the
    /// pending runs of every priority that became pending at least the threshold ago, up to
    /// `batch` per priority and queue. Nothing when aging is off.
    pub async fn age_pending_once(
        &self,
        now: Ts,
        batch: usize,
        budget: &Budget,
    ) -> ApiResult<Pass> {
        let threshold = self.cfg.priority_aging_ms;
        if threshold <= 0 {
            return Ok(Pass::default());
        }
        let mut queues: Vec<String> = self
            .live_task_queues(&SkRange::default(), now)
            .await?
            .into_iter()
            .map(|q| q.task_queue_id)
            .collect();
        // A pass the budget cuts short starts the next one elsewhere, so that no queue waits
        // behind the same ones every time.
        if !queues.is_empty() {
            let start = (rand::random::<u64>() % queues.len() as u64) as usize;
            queues.rotate_left(start);
        }
        let cutoff = now.plus(-threshold);
        let (done, cut) = chunked(&queues, budget, |tq| {
            self.age_queue(tq.as_str(), cutoff, batch)
        })
        .await?;
        Ok(Pass {
            done: done.iter().map(|(n, _)| n).sum(),
            more: cut || done.iter().any(|(_, full)| *full),
        })
    }

    /// Ages the runs of one task queue pending since `cutoff` or earlier; how many it aged,
    /// and whether a priority had more than `batch` of them.
    async fn age_queue(&self, tq: &str, cutoff: Ts, batch: usize) -> ApiResult<(usize, bool)> {
        let reads = PendingRank::ALL
            .into_iter()
            .filter(|r| *r != PendingRank::Aged)
            .map(|rank| {
                let range = SkRange {
                    prefix: Some(rank.prefix()),
                    upto: Some(format!("{}{}", rank.prefix(), due_upto(cutoff))),
                };
                async move {
                    self.store
                        .query_index(TASKS, index::PENDING, tq, &range, None, batch)
                        .await
                }
            });
        let pages = futures_util::future::try_join_all(reads).await?;
        let full = pages.iter().any(|p| p.items.len() >= batch);
        let mut aged = 0;
        let items: Vec<_> = pages.into_iter().flat_map(|p| p.items).collect();
        for chunk in items.chunks(PARALLEL) {
            let writes = chunk.iter().map(|item| async move {
                let rec: TaskRecord = item.data.decode()?;
                self.age_run(rec, item.version).await
            });
            aged += futures_util::future::try_join_all(writes)
                .await?
                .into_iter()
                .filter(|a| *a)
                .count();
        }
        Ok((aged, full))
    }

    /// Marks the last run of a record as seen in the index aged: written at the version seen,
    /// else (the index was behind, or a claim or another write came first) decided again on
    /// the stored record. True if this call aged it.
    async fn age_run(&self, mut rec: TaskRecord, version: u64) -> ApiResult<bool> {
        let Some(run_id) = rec.runs.last().map(|r| r.run_id) else {
            return Ok(false);
        };
        if !rec.age(run_id) {
            return Ok(false);
        }
        match self.save(&rec, version).await? {
            Ok(()) => Ok(true),
            Err(e) if e.is_condition_failed() => {
                match self.mutate(&rec.task_id, |r| Ok(r.age(run_id))).await {
                    Ok((_, aged)) => Ok(aged),
                    // Expired meanwhile.
                    Err(e) if e.status() == 404 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// How many pending runs of a task queue are aged (eventually consistent).
    pub async fn aged_count(&self, tq: &str) -> ApiResult<u64> {
        let range = SkRange {
            prefix: Some(PendingRank::Aged.prefix()),
            upto: None,
        };
        Ok(self
            .store
            .count_index(TASKS, index::PENDING, tq, &range)
            .await?)
    }
}
