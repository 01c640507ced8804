//! The reliability suite's bounded parts (RELIABILITY.md has the full runs and their figures):
//! racing claimers and the crash loop, on both backends.

use blackbox::crash_loop::{crash_loop, CrashSpec};
use blackbox::race::{bounded, print, race};
use blackbox::*;

/// 32 workers race over 8 task queues of mixed priorities (10,000 tasks on the embedded
/// backend, 1,000 on LocalStack, `TCQ_RACE_TASKS` to change): every task claimed once, none
/// left pending, no priority inversion. `cargo bench -p blackbox --bench racers` runs 100,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_claimers_claim_every_task_once_in_priority_order() {
    if not_in_shape("the race runs against one server, with a short claimWork wait") {
        return;
    }
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 200).await;
    let tasks = env_num(
        "TCQ_RACE_TASKS",
        if on_localstack() { 1_000 } else { 10_000 },
    );
    let spec = bounded(tasks);
    let r = race(&app.root_url(), &task_queue_id(), &spec).await;
    eprintln!("racing claimers: {}", print(&spec, &r));
    assert_eq!(r.tasks, tasks);
    assert_eq!(r.claims, tasks, "every task claimed once");
    assert_eq!(r.double_claims, 0, "{}", print(&spec, &r));
    assert_eq!(r.wrong_state, 0, "{}", print(&spec, &r));
    assert_eq!(r.left_pending, 0, "{}", print(&spec, &r));
    assert_eq!(r.inversions, 0, "{}", print(&spec, &r));
}

/// The crash loop's server: this test binary again, as a process of its own.
#[ignore]
#[test]
fn child_server() {
    blackbox::run_child_server()
}

/// 16 clients run life cycles while the server is SIGKILLed 3 times (`TCQ_CRASH_KILLS`) at
/// seeded moments and restarted on the same data: nothing acknowledged is lost, every task
/// resolves, no run is claimed twice, every state change has a message and no message is a
/// phantom. `cargo bench -p blackbox --bench crash_loop` runs 25 kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_loop_loses_nothing_acknowledged() {
    if not_in_shape("it kills and restarts one server process") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = CrashSpec {
        clients: 16,
        kills: env_num("TCQ_CRASH_KILLS", 3),
        seed: env_num("TCQ_CRASH_SEED", 20261125),
        max_gap_ms: 2_000,
    };
    let report = crash_loop(&spec, |port, envs| {
        spawn_child_server("reliability::child_server", dir.path(), port, envs)
    })
    .await;
    eprintln!("crash loop: {}", report.line());
    assert!(report.tasks > 0, "{}", report.line());
    assert_eq!(report.kills, spec.kills);
    assert!(report.passed(), "{}", report.line());
}
