//! Priority aging under sustained overload (issue 42): each priority's wait with aging on and
//! off, side by side in one run.
//!
//! Run (embedded SQLite, no services, about a minute):
//!   cargo bench -p blackbox --bench aging
//!
//! A pool of `BENCH_WORKERS` (10) workers takes one task at a time and runs it for
//! `BENCH_RUN_MIN` (10) minutes; tasks arrive at random (exponential gaps) at
//! `BENCH_LOAD` (1.2) times the pool's rate, each of one of the 7 priorities with equal
//! chance, for `BENCH_HOURS` (24) hours. The clock is virtual: every operation is the queue's
//! own (`create_task`, `try_claim_work`, `record_seen`, `resolve`, and the priority ager's
//! `age_pending_once` every `BENCH_AGER_SECS` (60, the deployed schedule)) over an embedded
//! store, given the simulated `now`, so a day of load runs in about a minute and the order
//! is exactly what the index gives. The same arrivals (seed `BENCH_SEED`) run with aging at
//! `BENCH_AGING_MIN` (30, the default) minutes and with aging off.
//!
//! Printed per priority and setting: tasks created, claimed, the claimed ones' p50/p99/max
//! wait, and the tasks still pending at the end with the oldest one's age (a task that is
//! never claimed has no wait, so the oldest pending age is its part of the picture).

use blackbox::env_num;
use serde_json::{json, Value};
use shared::ids::{TaskId, TaskQueueId};
use shared::queue::QueueConfig;
use shared::records::task::{Priority, ReasonResolved};
use shared::time::{Budget, Ts, MINUTE};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The simulation's parameters.
#[derive(Clone, Copy)]
struct Sim {
    workers: usize,
    run_ms: i64,
    load: f64,
    hours: i64,
    ager_ms: i64,
    seed: u64,
}

/// A task that arrived: when, with what priority.
#[derive(Clone, Copy)]
struct Arrival {
    at: i64,
    priority: Priority,
}

/// xorshift64*: the same arrivals for both settings, with no dependency on a RNG crate's
/// version.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

fn arrivals(sim: &Sim) -> Vec<Arrival> {
    let mut rng = Rng(sim.seed.max(1));
    // The pool's rate is workers / run time; arrivals come `load` times as fast.
    let mean_gap = sim.run_ms as f64 / sim.workers as f64 / sim.load;
    let end = sim.hours * 60 * MINUTE;
    let mut out = vec![];
    let mut t = 0.0;
    loop {
        t += -mean_gap * rng.unit().ln();
        if t as i64 >= end {
            return out;
        }
        let priority = Priority::ALL[(rng.next() % 7) as usize];
        out.push(Arrival {
            at: t as i64,
            priority,
        });
    }
}

/// What one setting gave, per priority: the claimed tasks' waits (ms) and the pending ones'
/// ages at the end.
#[derive(Default)]
struct Outcome {
    waits: BTreeMap<Priority, Vec<i64>>,
    pending: BTreeMap<Priority, Vec<i64>>,
}

fn definition(tq: &TaskQueueId, priority: Priority, now: Ts) -> Value {
    json!({
        "taskQueueId": tq.as_str(),
        "created": now,
        // Upstream's longest deadline: no task of the run dies of it.
        "deadline": now.plus(5 * 24 * 60 * MINUTE - MINUTE),
        "priority": priority.as_str(),
        "payload": {},
        "metadata": {
            "name": "aging bench",
            "description": "a task of the aging bench",
            "owner": "bench@example.com",
            "source": "https://example.com/bench"
        }
    })
}

async fn simulate(sim: Sim, aging_ms: i64, arrivals: &[Arrival]) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = blackbox::embedded_queue(
        &dir.path().join("queue.db"),
        QueueConfig {
            priority_aging_ms: aging_ms,
            ..QueueConfig::default()
        },
    );
    let tq = TaskQueueId::parse(&blackbox::task_queue_id()).expect("task queue id");
    // The run starts at a real date (definitions are checked against it) and moves on.
    let base = Ts::now().millis();
    let at = |t: i64| Ts(base + t);
    let end = sim.hours * 60 * MINUTE;
    // Per worker: the task it runs and when that ends.
    let mut busy: Vec<Option<(TaskId, u32, i64)>> = vec![None; sim.workers];
    let mut created: BTreeMap<String, (Priority, i64)> = BTreeMap::new();
    let mut out = Outcome::default();
    let mut next = 0;
    let mut ager_at = sim.ager_ms;
    let mut t = 0;
    let budget = Budget::of(Duration::from_secs(60));
    while t < end {
        while next < arrivals.len() && arrivals[next].at <= t {
            let a = arrivals[next];
            let id = TaskId::parse(&blackbox::slugid()).expect("id");
            let mut body = definition(&tq, a.priority, at(a.at));
            shared::schema::validate_input("create-task-request", &mut body).expect("valid");
            queue
                .create_task(&id, body, false, at(a.at))
                .await
                .expect("createTask");
            created.insert(id.as_str().to_string(), (a.priority, a.at));
            next += 1;
        }
        if t >= ager_at {
            queue
                .age_pending_once(at(t), 100, &budget)
                .await
                .expect("aging pass");
            ager_at += sim.ager_ms;
        }
        for (w, slot) in busy.iter_mut().enumerate() {
            if let Some((id, run, until)) = slot {
                if *until <= t {
                    queue
                        .resolve(id, *run, ReasonResolved::Completed, at(*until))
                        .await
                        .expect("reportCompleted");
                    *slot = None;
                }
            }
            if slot.is_some() {
                continue;
            }
            let worker = format!("w{w}");
            let pass = queue
                .try_claim_work(&tq, "pool", &worker, 1, at(t))
                .await
                .expect("claimWork");
            let Some(claim) = pass.claims.into_iter().next() else {
                continue;
            };
            let runs = [claim.task_run()];
            queue
                .record_seen(
                    tq.as_str(),
                    Some(("pool", &worker)),
                    &runs,
                    None,
                    at(t),
                    false,
                )
                .await;
            let id = claim.record.task_id.clone();
            let (priority, arrived) = created.remove(&id).expect("a task of this run");
            out.waits.entry(priority).or_default().push(t - arrived);
            let task_id = TaskId::parse(&id).expect("id");
            *slot = Some((task_id, claim.run.run_id, t + sim.run_ms));
        }
        // The next thing that happens: an arrival, a task's end, the ager.
        let soonest = [
            arrivals.get(next).map(|a| a.at),
            busy.iter().flatten().map(|(_, _, u)| *u).min(),
            Some(ager_at),
        ];
        t = soonest
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end)
            .max(t + 1);
    }
    for (priority, arrived) in created.into_values() {
        out.pending.entry(priority).or_default().push(end - arrived);
    }
    out
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn minutes(ms: i64) -> String {
    format!("{:.0}", ms as f64 / MINUTE as f64)
}

fn main() {
    let sim = Sim {
        workers: env_num("BENCH_WORKERS", 10usize),
        run_ms: env_num("BENCH_RUN_MIN", 10i64) * MINUTE,
        load: std::env::var("BENCH_LOAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1.2),
        hours: env_num("BENCH_HOURS", 24i64),
        ager_ms: env_num("BENCH_AGER_SECS", 60i64) * 1000,
        seed: env_num("BENCH_SEED", 42u64),
    };
    let aging_ms = env_num("BENCH_AGING_MIN", 30i64) * MINUTE;
    let arrivals = arrivals(&sim);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("== Priority aging under sustained overload ==");
    println!(
        "{} workers, {} min per task (pool: {:.2} tasks/min), arrivals {:.2}x that ({} tasks in \
         {} h, 7 priorities equally likely), ager every {} s; virtual clock, embedded store",
        sim.workers,
        sim.run_ms / MINUTE,
        sim.workers as f64 * MINUTE as f64 / sim.run_ms as f64,
        sim.load,
        arrivals.len(),
        sim.hours,
        sim.ager_ms / 1000,
    );
    let mut outcomes = vec![];
    for (label, threshold) in [
        (format!("aging {} min", aging_ms / MINUTE), aging_ms),
        ("aging off".to_string(), 0),
    ] {
        let started = Instant::now();
        let o = rt.block_on(simulate(sim, threshold, &arrivals));
        eprintln!(
            "{label}: simulated in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        outcomes.push((label, o));
    }
    println!();
    println!(
        "| priority | setting | created | claimed | wait p50 / p99 / max (min) | pending at the end | oldest pending (min) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for p in Priority::ALL {
        for (label, o) in &outcomes {
            let mut waits = o.waits.get(&p).cloned().unwrap_or_default();
            waits.sort_unstable();
            let pending = o.pending.get(&p).cloned().unwrap_or_default();
            let oldest = pending.iter().copied().max();
            println!(
                "| {} | {label} | {} | {} | {} / {} / {} | {} | {} |",
                p.as_str(),
                waits.len() + pending.len(),
                waits.len(),
                minutes(pct(&waits, 0.50)),
                minutes(pct(&waits, 0.99)),
                minutes(waits.last().copied().unwrap_or(0)),
                pending.len(),
                oldest.map_or("-".into(), minutes),
            );
        }
    }
}
