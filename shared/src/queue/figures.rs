//! What the queue's metrics count ([`crate::metrics`]): the resolutions and claims a write
//! committed, counted by the process that wrote them, and the figures per task queue
//! (pending, claimed, the oldest pending run, workers), read from the indexes.

use super::core::{Queue, PARALLEL};
use crate::error::ApiResult;
use crate::ids::TaskQueueId;
use crate::metrics::{self, queue_labels, Metrics};
use crate::records::task::{index, PendingRank, RunState, TaskRecord, TASKS};
use crate::records::worker::{pk_workers, TaskQueueRecord, WorkerRecord, PK_TASK_QUEUES, TABLE};
use crate::routing::Exchange;
use crate::store::{IndexKey, SkRange};
use crate::time::Ts;
use std::collections::BTreeMap;

/// Index keys read per page of a scan.
const SCAN_PAGE: usize = 1000;

/// One task queue's figures at a moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueFigures {
    /// Runs pending.
    pub pending: u64,
    /// Runs claimed (running).
    pub claimed: u64,
    /// When the oldest pending run became pending.
    pub oldest_pending: Option<Ts>,
    /// Of the pending runs, those that waited past the aging threshold and are claimed first
    /// ([`crate::queue::aging`]).
    pub aged: u64,
    /// Workers seen and not expired.
    pub workers: u64,
    /// Of those, the ones in quarantine.
    pub quarantined: u64,
}

impl QueueFigures {
    /// As the API answers them (`taskQueueFigures`), at `now`, under the deployment's aging
    /// threshold.
    pub fn to_json(&self, tq: &TaskQueueId, now: Ts, priority_aging_ms: i64) -> serde_json::Value {
        serde_json::json!({
            "taskQueueId": tq.as_str(),
            "provisionerId": tq.provisioner_id(),
            "workerType": tq.worker_type(),
            "pendingTasks": self.pending,
            "claimedTasks": self.claimed,
            "oldestPending": self.oldest_pending,
            "oldestPendingAgeSeconds": self.oldest_age_secs(now),
            "agedPendingTasks": self.aged,
            "priorityAgingMs": priority_aging_ms,
            "workers": self.workers,
            "quarantinedWorkers": self.quarantined,
            "idleWorkers": self.idle(),
        })
    }

    /// The oldest pending run's age at `now`, in seconds (0 when none waits).
    pub fn oldest_age_secs(&self, now: Ts) -> f64 {
        self.oldest_pending.map_or(0.0, |t| now.secs_since(t))
    }

    /// Adds the workers among `items` (a task queue's worker records) that live at `now`.
    fn count_workers(&mut self, items: &[crate::store::Item], now: Ts) {
        for w in items.iter().filter_map(WorkerRecord::from_item) {
            if !w.gone(now) {
                self.workers += 1;
                self.quarantined += u64::from(w.quarantined(now));
            }
        }
    }

    /// Workers neither running a task nor quarantined, as upstream derives them (one worker
    /// per claimed run).
    pub fn idle(&self) -> u64 {
        self.workers
            .saturating_sub(self.quarantined)
            .saturating_sub(self.claimed)
    }
}

impl Queue {
    /// Counts what a committed write of `rec` did: the runs it resolved (by state and
    /// reason) and the claims it made (their wait since pending). Its own events say which:
    /// only this write's are fresh.
    pub(crate) fn count_written(&self, rec: &TaskRecord) {
        let labels = queue_labels(&rec.task_queue_id);
        for event in rec.outbox.iter().filter(|e| e.fresh) {
            let Some(exchange) = Exchange::named(&event.exchange) else {
                continue;
            };
            let run = event
                .run_id
                .and_then(|id| rec.runs.get(usize::try_from(id).ok()?));
            let Some(run) = run else { continue };
            let reason = run.reason_resolved.map_or("", |r| r.as_str());
            let m = &self.metrics;
            match (exchange, run.state) {
                (Exchange::TaskCompleted, _) => m.add(&metrics::COMPLETED, &labels, 1.0),
                (Exchange::TaskFailed, _) => {
                    m.add(&metrics::FAILED, &[labels[0], labels[1], reason], 1.0)
                }
                (Exchange::TaskException, _) => {
                    m.add(&metrics::EXCEPTION, &[labels[0], labels[1], reason], 1.0)
                }
                (Exchange::TaskRunning, RunState::Running) => {
                    let started = run.started.unwrap_or(run.scheduled);
                    let wait = (started.millis() - run.scheduled.millis()).max(0) as f64;
                    m.observe(&metrics::PICKUP, &labels, wait / 1000.0);
                }
                _ => {}
            }
        }
    }

    /// Every task queue's figures at `now`: the queues with pending or claimed runs (one
    /// scan of each index's keys, whatever the number of queues) and those workers were
    /// seen on (their records, then each one's workers). Eventually consistent.
    pub async fn figures(&self, now: Ts) -> ApiResult<BTreeMap<String, QueueFigures>> {
        let mut out: BTreeMap<String, QueueFigures> = BTreeMap::new();
        let aged = PendingRank::Aged.prefix();
        self.each_key(index::PENDING, |key| {
            let f = out.entry(key.ipk.clone()).or_default();
            f.pending += 1;
            f.aged += u64::from(key.isk.starts_with(&aged));
            // `<rank>:<time key>:<taskId>:<runId>`.
            let since = key
                .isk
                .split(':')
                .nth(1)
                .and_then(|t| t.parse::<i64>().ok());
            if let Some(t) = since.map(Ts) {
                f.oldest_pending = Some(f.oldest_pending.map_or(t, |o| o.min(t)));
            }
        })
        .await?;
        self.each_key(index::CLAIMED, |key| {
            out.entry(key.ipk.clone()).or_default().claimed += 1
        })
        .await?;
        let queues = self.all_in(PK_TASK_QUEUES).await?;
        let live: Vec<TaskQueueRecord> = queues
            .iter()
            .filter_map(|i| TaskQueueRecord::live(i, now))
            .collect();
        // Each queue's workers, PARALLEL queries at a time.
        for chunk in live.chunks(PARALLEL) {
            let read = chunk.iter().map(|q| {
                let pk = pk_workers(&q.task_queue_id);
                async move { self.all_in(&pk).await }
            });
            let read = futures_util::future::try_join_all(read).await?;
            for (q, workers) in chunk.iter().zip(read) {
                out.entry(q.task_queue_id.clone())
                    .or_default()
                    .count_workers(&workers, now);
            }
        }
        Ok(out)
    }

    /// One task queue's figures at `now`, read as [`Queue::figures`] reads them for all (its
    /// index partitions and its workers), eventually consistent: the oldest pending run is
    /// the oldest of each priority's first.
    pub async fn queue_figures(&self, tq: &TaskQueueId, now: Ts) -> ApiResult<QueueFigures> {
        let all = &SkRange::default();
        let store = self.store.as_ref();
        let count = |idx| async move {
            Ok::<_, crate::error::ApiError>(store.count_index(TASKS, idx, tq.as_str(), all).await?)
        };
        let (pending, claimed, workers, aged) = futures_util::future::try_join4(
            count(index::PENDING),
            count(index::CLAIMED),
            self.all_in(&pk_workers(tq.as_str())),
            self.aged_count(tq.as_str()),
        )
        .await?;
        // Each rank's first is its oldest (aged runs are ordered by age alone).
        let firsts = PendingRank::ALL.map(|rank| {
            let range = SkRange {
                prefix: Some(rank.prefix()),
                upto: None,
            };
            async move {
                let page = store
                    .query_index(TASKS, index::PENDING, tq.as_str(), &range, None, 1)
                    .await?;
                let first = page.items.first().map(|i| i.data.decode::<TaskRecord>());
                Ok::<_, crate::error::ApiError>(match first {
                    Some(rec) => rec?.runs.last().map(|r| r.scheduled),
                    None => None,
                })
            }
        });
        let oldest_pending = futures_util::future::try_join_all(firsts)
            .await?
            .into_iter()
            .flatten()
            .min();
        let mut f = QueueFigures {
            pending,
            claimed,
            oldest_pending,
            aged,
            ..QueueFigures::default()
        };
        f.count_workers(&workers, now);
        Ok(f)
    }

    /// Calls `f` with every entry of a `tasks` index, all partitions, a page at a time.
    async fn each_key(&self, idx: &'static str, mut f: impl FnMut(&IndexKey)) -> ApiResult<()> {
        let mut after: Option<IndexKey> = None;
        loop {
            let page = self
                .store
                .scan_index_keys(TASKS, idx, after.as_ref(), SCAN_PAGE)
                .await?;
            page.keys.iter().for_each(&mut f);
            match page.next {
                Some(k) => after = Some(k),
                None => return Ok(()),
            }
        }
    }

    /// Every item of a partition of the workers' table, eventually consistent.
    async fn all_in(&self, pk: &str) -> ApiResult<Vec<crate::store::Item>> {
        let mut items = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .store
                .query_eventual(TABLE, pk, &SkRange::default(), after.as_ref(), SCAN_PAGE)
                .await?;
            items.extend(page.items);
            match page.next {
                Some(c) => after = Some(c),
                None => return Ok(items),
            }
        }
    }
}

/// Reads every task queue's figures at `now` into the queue's gauges; how many task queues
/// have a series.
pub async fn record_gauges(queue: &Queue, now: Ts) -> Result<usize, crate::jobs::JobError> {
    let figures = queue.figures(now).await?;
    Ok(set_gauges(&queue.metrics, &figures, now))
}

/// Sets the gauges per task queue from `figures` read at `now`; how many task queues have a
/// series. A queue with nothing pending or claimed and no live worker has none (deployed,
/// each series is billed by the hour), nor has one absent from `figures`.
pub fn set_gauges(m: &Metrics, figures: &BTreeMap<String, QueueFigures>, now: Ts) -> usize {
    let shown: Vec<(&String, &QueueFigures)> = figures
        .iter()
        .filter(|(_, f)| f.pending + f.claimed + f.workers > 0)
        .collect();
    type Of = fn(&QueueFigures, Ts) -> f64;
    let gauges: [(&'static metrics::Metric, Of); 7] = [
        (&metrics::PENDING, |f, _| f.pending as f64),
        (&metrics::CLAIMED, |f, _| f.claimed as f64),
        (&metrics::OLDEST_PENDING, |f, now| f.oldest_age_secs(now)),
        (&metrics::WORKERS, |f, _| f.workers as f64),
        (&metrics::RUNNING_WORKERS, |f, _| f.claimed as f64),
        (&metrics::IDLE_WORKERS, |f, _| f.idle() as f64),
        (&metrics::QUARANTINED_WORKERS, |f, _| f.quarantined as f64),
    ];
    for (metric, of) in gauges {
        let values = shown
            .iter()
            .map(|(tq, f)| {
                let [p, w] = queue_labels(tq);
                (vec![p.to_string(), w.to_string()], of(f, now))
            })
            .collect();
        m.set_gauge(metric, values);
    }
    shown.len()
}
