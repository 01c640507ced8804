//! Racing claimers: many workers claim from a few task queues full of tasks of mixed
//! priorities, through the official client over HTTP, as fast as they can. Used by the
//! bounded test (`reliability::`) and the full bench (`cargo bench --bench racers`).
//!
//! What it checks, from the clients' records and the server's statuses afterwards:
//! - no run was handed out twice (every task claimed once, as run 0, and `running` with one
//!   run at the end);
//! - nothing left pending (each queue's pending count is 0);
//! - priority order: a claimWork call that got a task of priority `q` and *ended* before
//!   another call on the same queue *began* means every task that second call got was pending
//!   (all were created before the race) while the first chose; if the second got a higher
//!   priority `p > q`, the first skipped it: a priority inversion.

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Upstream's priorities, lowest first (their rank is the index).
pub const PRIORITIES: [&str; 7] = [
    "lowest",
    "very-low",
    "low",
    "medium",
    "high",
    "very-high",
    "highest",
];

/// How a race is run.
#[derive(Debug, Clone)]
pub struct RaceSpec {
    /// Tasks in all.
    pub tasks: usize,
    /// Task queues they are spread over.
    pub queues: usize,
    /// Claiming workers (spread evenly over the queues).
    pub workers: usize,
    /// Concurrent clients creating the tasks.
    pub creators: usize,
}

/// What a race found.
#[derive(Debug, Clone, Default)]
pub struct RaceReport {
    /// Tasks created.
    pub tasks: usize,
    /// Claims handed out.
    pub claims: usize,
    /// Tasks claimed more than once (must be 0).
    pub double_claims: usize,
    /// Tasks not `running` with exactly one run at the end (must be 0).
    pub wrong_state: usize,
    /// Tasks still pending, by the queues' counts (must be 0).
    pub left_pending: u64,
    /// Priority inversions as defined in the module header (must be 0).
    pub inversions: usize,
    /// Seconds to create the tasks.
    pub create_secs: f64,
    /// Seconds from the first claim to the last.
    pub claim_secs: f64,
    /// claimWork calls made (empty ones included).
    pub calls: usize,
}

impl RaceReport {
    /// Claims per second over the claiming phase.
    pub fn claims_per_sec(&self) -> f64 {
        self.claims as f64 / self.claim_secs.max(1e-9)
    }
}

/// One claimWork call: when it began and ended, and the priorities it got.
struct Call {
    queue: usize,
    began: Duration,
    ended: Duration,
    ranks: Vec<usize>,
}

/// A task's priority, spread over every level (a fixed pattern, so runs compare).
fn rank_of(i: usize) -> usize {
    (i * 5 + i / 7) % PRIORITIES.len()
}

/// Runs a race against the queue at `root` (root credentials), on queues named
/// `<prefix>-<n>`. The server should answer an empty claimWork quickly (a short
/// `claim_work_timeout`), since workers stop only once their queue is drained.
pub async fn race(root: &str, prefix: &str, spec: &RaceSpec) -> RaceReport {
    let queues: Vec<String> = (0..spec.queues).map(|q| format!("{prefix}-{q}")).collect();
    let started = Instant::now();
    let per = spec.tasks.div_ceil(spec.creators.max(1));
    let creators: Vec<_> = (0..spec.creators.max(1))
        .map(|c| {
            let (root, queues) = (root.to_string(), queues.clone());
            let total = spec.tasks;
            tokio::spawn(async move {
                let q = crate::queue_client(&root);
                let mut made = vec![];
                for i in (c * per)..((c + 1) * per).min(total) {
                    let id = crate::slugid();
                    let mut def = crate::task_def(&queues[i % queues.len()]);
                    def["priority"] = json!(PRIORITIES[rank_of(i)]);
                    q.createTask(&id, &def).await.expect("createTask");
                    made.push(id);
                }
                made
            })
        })
        .collect();
    let mut ids = vec![];
    for c in creators {
        ids.extend(c.await.expect("creator"));
    }
    let create_secs = started.elapsed().as_secs_f64();

    let t0 = Instant::now();
    let workers: Vec<_> = (0..spec.workers)
        .map(|w| {
            let root = root.to_string();
            let qi = w % queues.len();
            let tq = queues[qi].clone();
            tokio::spawn(async move {
                let q = crate::queue_client(&root);
                let (mut calls, mut got) = (vec![], vec![]);
                let body = json!({
                    "workerGroup": "racers", "workerId": format!("w{w}"),
                    "tasks": 1 + (w % 4),
                });
                loop {
                    let began = t0.elapsed();
                    let r = q.claimWork(&tq, &body).await.expect("claimWork");
                    let ended = t0.elapsed();
                    let tasks = r["tasks"].as_array().cloned().unwrap_or_default();
                    if tasks.is_empty() {
                        let left = q.pendingTasks(&tq).await.expect("pendingTasks");
                        if left["pendingTasks"] == 0 {
                            break;
                        }
                        continue;
                    }
                    let mut ranks = vec![];
                    for t in &tasks {
                        let p = t["task"]["priority"].as_str().unwrap_or_default();
                        ranks.push(PRIORITIES.iter().position(|x| *x == p).unwrap_or(0));
                        let id = t["status"]["taskId"].as_str().unwrap_or_default();
                        got.push((id.to_string(), t["runId"].as_u64().unwrap_or(u64::MAX)));
                    }
                    calls.push(Call {
                        queue: qi,
                        began,
                        ended,
                        ranks,
                    });
                }
                (calls, got, t0.elapsed())
            })
        })
        .collect();
    let (mut calls, mut claimed, mut last) = (vec![], vec![], Duration::ZERO);
    let mut n_calls = 0;
    for w in workers {
        let (c, g, at) = w.await.expect("worker");
        n_calls += c.len();
        calls.extend(c);
        claimed.extend(g);
        last = last.max(at);
    }
    let mut report = RaceReport {
        tasks: ids.len(),
        claims: claimed.len(),
        create_secs,
        claim_secs: last.as_secs_f64(),
        calls: n_calls,
        inversions: inversions(&calls),
        ..Default::default()
    };
    let mut times: HashMap<&str, usize> = HashMap::new();
    for (id, run) in &claimed {
        *times.entry(id.as_str()).or_default() += 1;
        if *run != 0 {
            report.double_claims += 1;
        }
    }
    report.double_claims += times.values().filter(|n| **n > 1).count();
    let created: HashSet<&str> = ids.iter().map(String::as_str).collect();
    report.wrong_state += created.iter().filter(|id| !times.contains_key(*id)).count();

    let q = crate::queue_client(root);
    // Small chunks: a loaded LocalStack answers 500 strong reads slower than the client waits.
    for s in crate::statuses_of(&q, &ids, 100).await.expect("statuses") {
        let runs = s["status"]["runs"].as_array().map_or(0, Vec::len);
        if s["status"]["state"] != "running" || runs != 1 {
            report.wrong_state += 1;
        }
    }
    for tq in &queues {
        let c: Value = q.taskQueueCounts(tq).await.expect("taskQueueCounts");
        report.left_pending += c["pendingTasks"].as_u64().unwrap_or(u64::MAX);
    }
    report
}

/// Counts pairs of calls on one queue where the earlier (ended before the later began) got a
/// lower priority than the later's highest (see the module header).
fn inversions(calls: &[Call]) -> usize {
    let mut by_queue: HashMap<usize, Vec<&Call>> = HashMap::new();
    for c in calls {
        by_queue.entry(c.queue).or_default().push(c);
    }
    let mut found = 0;
    for (_, mut cs) in by_queue {
        cs.sort_by_key(|c| c.ended);
        // The lowest rank among calls ended so far, as the later calls begin.
        let mut starts: Vec<&Call> = cs.clone();
        starts.sort_by_key(|c| c.began);
        let (mut i, mut lowest) = (0, usize::MAX);
        for later in starts {
            while i < cs.len() && cs[i].ended < later.began {
                lowest = lowest.min(cs[i].ranks.iter().copied().min().unwrap_or(usize::MAX));
                i += 1;
            }
            let highest = later.ranks.iter().copied().max().unwrap_or(0);
            if lowest < highest {
                found += 1;
            }
        }
    }
    found
}

/// The report as printed by the bench and the test.
pub fn print(spec: &RaceSpec, r: &RaceReport) -> String {
    format!(
        "{} tasks over {} queues, {} workers: {} claims in {:.1} s ({:.0} claims/s, {} claimWork calls; created in {:.1} s); double claims {}, wrong state {}, left pending {}, priority inversions {}",
        r.tasks, spec.queues, spec.workers, r.claims, r.claim_secs, r.claims_per_sec(), r.calls,
        r.create_secs, r.double_claims, r.wrong_state, r.left_pending, r.inversions
    )
}

/// Spec of the bounded race the test command runs.
pub fn bounded(tasks: usize) -> RaceSpec {
    RaceSpec {
        tasks,
        queues: 8,
        workers: 32,
        creators: 16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(queue: usize, began: u64, ended: u64, ranks: &[usize]) -> Call {
        Call {
            queue,
            began: Duration::from_millis(began),
            ended: Duration::from_millis(ended),
            ranks: ranks.to_vec(),
        }
    }

    #[test]
    fn an_earlier_call_that_took_less_than_a_later_one_is_an_inversion() {
        // Descending priorities, overlapping calls, other queues: none.
        let fine = [
            call(0, 0, 10, &[6, 6]),
            call(0, 5, 20, &[6, 5]),
            call(0, 21, 30, &[4]),
            call(1, 0, 10, &[0]),
            call(0, 8, 40, &[6]),
        ];
        assert_eq!(inversions(&fine), 0);
        // A call that ended at 10 with rank 2, and one that began at 11 and got rank 5.
        let bad = [call(0, 0, 10, &[6, 2]), call(0, 11, 20, &[5])];
        assert_eq!(inversions(&bad), 1);
    }
}
