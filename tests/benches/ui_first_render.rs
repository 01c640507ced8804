//! The web inspector's group page on a big group: time to first render and to the whole group,
//! one re-read's duration (the live update's cost), a filter's response; and the bundle's
//! gzipped size.
//!
//! Run: `TCQ_CHROMIUM=/usr/bin/chromium cargo bench -p blackbox --bench ui_first_render`
//! (needs `npm ci --prefix ui`). `BENCH_UI_TASKS` (default `2000,10000`): the group sizes;
//! `BENCH_UI_LOADS` (default 5): page loads per size, each in a fresh browser context (cold
//! cache), median and worst printed.
//!
//! One local server (release build, embedded SQLite backend) in this process; one group per
//! size, a tenth of its tasks completed (so rows have runs), the rest pending. The page is
//! Debian's Chromium, headless, driven by `ui/e2e/bench.mjs`; times are the page's own
//! (`performance.now()` from navigation start): first rows drawn (the first 1,000 tasks read
//! and rendered), the whole group read and counted, then what the page measured for its last
//! re-read, what a click on a state filter takes to redraw, and how long after a cancelTask
//! (of a pending task shown on the first page) its row says `exception`.

use blackbox::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn seed(app: &TestServer, n: usize) -> String {
    let (tq, group) = (task_queue_id(), slugid());
    let q = app.queue();
    let made = futures_util::stream::iter(0..n)
        .map(|i| {
            let (q, tq, group) = (&q, &tq, &group);
            async move {
                let id = slugid();
                let mut def = task_def(tq);
                def["taskGroupId"] = json!(group);
                def["metadata"]["name"] = json!(format!("task-{i:05}"));
                // Concurrent creations in one group may meet a 409 (contention on the group):
                // createTask is idempotent, so the same call again.
                let mut tries = 0;
                while let Err(e) = q.createTask(&id, &def).await {
                    tries += 1;
                    assert!(tries < 20, "createTask: {e:#}");
                }
                if i % 10 == 0 {
                    let w = json!({ "workerGroup": "bench", "workerId": "w1" });
                    q.claimTask(&id, "0", &w).await.expect("claimTask");
                    q.reportCompleted(&id, "0").await.expect("reportCompleted");
                }
            }
        })
        .buffer_unordered(32)
        .count()
        .await;
    assert_eq!(made, n);
    group
}

fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_UI_TASKS")
        .unwrap_or_else(|_| "2000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let loads: usize = env_num("BENCH_UI_LOADS", 5);
    let chromium = std::env::var("TCQ_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let app = spawn_app_with(|c| c.queue.anonymous_scopes = None).await;
        let mut groups = vec![];
        for &n in &sizes {
            let t = std::time::Instant::now();
            groups.push(json!({ "tasks": n, "taskGroupId": seed(&app, n).await }));
            eprintln!("seeded {n} tasks in {:.1} s", t.elapsed().as_secs_f64());
        }
        let ui = repo().join("ui");
        let out = std::process::Command::new("node")
            .arg(ui.join("e2e/bench.mjs"))
            .current_dir(&ui)
            .env("TCQ_CHROMIUM", chromium)
            .env("UI_ROOT_URL", app.root_url())
            .env(
                "UI_DATA",
                json!({ "groups": groups, "loads": loads, "clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN })
                    .to_string(),
            )
            .output()
            .expect("node runs");
        assert!(
            out.status.success(),
            "bench.mjs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        println!("web inspector bundle (gzip -9): {}", r["bundle"]);
        // The machine is shared: say how busy it was.
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "load average during the run: {} ({} cores)",
            load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        for g in r["groups"].as_array().into_iter().flatten() {
            println!(
                "group of {:>6} tasks: first rows {} ms (median of {loads}; worst {}), whole group {} ms (worst {}), one re-read {} ms, filter click to redraw {} ms, a row on screen shows a change in {} ms",
                g["tasks"], g["firstRows"]["median"], g["firstRows"]["max"], g["complete"]["median"], g["complete"]["max"], g["reread"], g["filter"], g["change"]
            );
        }
    });
}
