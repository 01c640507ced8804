//! The web inspector (issue 21). Over HTTP: the server answers the inspector's paths with its
//! embedded bundle and everything else as before. In a browser: Debian's Chromium, headless,
//! driven by playwright-core (`ui/e2e/inspector.mjs`, one scenario per test) against a real
//! server whose data the official Rust client made; the test then checks the server's side
//! (a task the page canceled is canceled). The browser tests need `TCQ_CHROMIUM` and `ui/`'s
//! npm packages, which `scripts/test.sh` installs; screenshots go to the test target folder,
//! and with `TCQ_BLESS=1` to `docs/screenshots/` (shown in docs/inspector.md).

use crate::common::*;
use blackbox::scheduler::*;
use blackbox::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A server whose unsigned callers get the default read-only role, as a deployment's: the
/// inspector's anonymous view.
async fn ui_app() -> TestServer {
    spawn_app_with(|c| c.queue.anonymous_scopes = None).await
}

/// Kills the browser script if the test fails before it ends.
struct Script(std::process::Child);

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The browser to drive: `TCQ_CHROMIUM`; `None`, with a note, where none is set up (it is
/// unset) or on LocalStack (the inspector reads through the API only, which the rest of the
/// suite checks on both backends). Checked before a test makes its server and data.
fn chromium() -> Option<String> {
    let Ok(chromium) = std::env::var("TCQ_CHROMIUM") else {
        eprintln!("TCQ_CHROMIUM is not set: run through scripts/test.sh, which installs Chromium");
        return None;
    };
    if on_localstack() {
        eprintln!("the browser tests run on the embedded backend only");
        return None;
    }
    Some(chromium)
}

/// Runs scenario `scenario` of `ui/e2e/inspector.mjs` in `chromium` against `app` with `data`.
/// Each time the script asks (`{"ready": what}`), `on_ready(what)` runs and the script goes
/// on. Returns the script's result (its last line).
async fn browse<F, Fut>(
    chromium: &str,
    app: &TestServer,
    scenario: &str,
    data: Value,
    mut on_ready: F,
) -> Value
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let ui = repo().join("ui");
    let mut shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    if std::env::var("TCQ_BLESS").as_deref() == Ok("1") {
        shots = repo().join("docs/screenshots");
    }
    let mut child = std::process::Command::new("node")
        .arg(ui.join("e2e/inspector.mjs"))
        .current_dir(&ui)
        .env("TCQ_CHROMIUM", chromium)
        .env("UI_ROOT_URL", app.root_url())
        .env("UI_SCENARIO", scenario)
        .env("UI_DATA", data.to_string())
        .env("UI_SCREENSHOTS", &shots)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node runs (Node.js 20+)");
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut stdin = child.stdin.take().expect("stdin");
    let mut script = Script(child);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout.expect("stdout")).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr.expect("stderr"), &mut s);
        s
    });
    let mut result = None;
    loop {
        let line = tokio::time::timeout(Duration::from_secs(300), rx.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("{scenario}: the browser script said nothing for 5 minutes")
            });
        let Some(line) = line else { break };
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("{scenario}: not a JSON line: {line}"));
        match v.get("ready").and_then(Value::as_str) {
            Some(what) => {
                on_ready(what.to_string()).await;
                writeln!(stdin, "go").expect("the script reads on");
            }
            None => result = Some(v),
        }
    }
    drop(stdin);
    let status = tokio::task::spawn_blocking(move || script.0.wait())
        .await
        .expect("join")
        .expect("wait for node");
    let log = errors.join().unwrap_or_default();
    assert!(
        status.success(),
        "browser scenario {scenario} failed:\n{log}"
    );
    let result = result.unwrap_or_else(|| panic!("{scenario} printed no result:\n{log}"));
    eprintln!("browser scenario {scenario}: {result}");
    result
}

/// A task of `group` on `tq` named `name`, with `extra` fields, under a fresh id.
async fn task(app: &TestServer, tq: &str, group: &str, name: &str, extra: Value) -> String {
    let id = slugid();
    let mut def = def_with(tq, extra);
    def["taskGroupId"] = json!(group);
    def["metadata"]["name"] = json!(name);
    app.queue()
        .createTask(&id, &def)
        .await
        .unwrap_or_else(|e| panic!("createTask {name}: {e:#}"));
    id
}

/// Claims run `run` of `id` as worker `wg/w1`.
async fn claim(app: &TestServer, id: &str, run: u64) {
    app.queue()
        .claimTask(id, &run.to_string(), &claimer("wg", "w1"))
        .await
        .unwrap_or_else(|e| panic!("claimTask {id}/{run}: {e:#}"));
}

/// A task of `group` brought to `state` (unscheduled: it depends on itself).
async fn task_in(app: &TestServer, tq: &str, group: &str, name: &str, state: &str) -> String {
    let id = if state == "unscheduled" {
        let id = slugid();
        let mut def = task_def(tq);
        def["taskGroupId"] = json!(group);
        def["metadata"]["name"] = json!(name);
        def["dependencies"] = json!([id]);
        app.queue().createTask(&id, &def).await.expect("createTask");
        return id;
    } else {
        task(app, tq, group, name, json!({})).await
    };
    let q = app.queue();
    match state {
        "pending" => {}
        "exception" => {
            q.cancelTask(&id).await.expect("cancelTask");
        }
        _ => {
            claim(app, &id, 0).await;
            match state {
                "running" => {}
                "completed" => {
                    complete(app, &id, 0).await;
                }
                "failed" => {
                    q.reportFailed(&id, "0").await.expect("reportFailed");
                }
                other => panic!("no state {other}"),
            }
        }
    }
    id
}

/// Creates an s3 artifact on a claimed run and uploads `bytes` to it.
async fn upload(app: &TestServer, id: &str, run: u64, name: &str, bytes: &[u8]) {
    let r = app
        .queue()
        .createArtifact(
            id,
            &run.to_string(),
            name,
            &json!({ "storageType": "s3", "expires": ts(3_600_000), "contentType": "application/octet-stream" }),
        )
        .await
        .expect("createArtifact");
    let put = r["putUrl"].as_str().expect("putUrl");
    let s = reqwest::Client::new()
        .put(put)
        .header("content-type", "application/octet-stream")
        .body(bytes.to_vec())
        .send()
        .await
        .expect("PUT sent")
        .status();
    assert!(s.is_success(), "upload of {name}: {s}");
}

#[tokio::test]
async fn the_server_serves_the_inspector_beside_the_api() {
    let app = ui_app().await;
    let root = app.root_url();
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(format!("{root}{path}")).send();
    let page = get("/").await.expect("GET /");
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert!(h["content-type"]
        .to_str()
        .unwrap_or_default()
        .starts_with("text/html"));
    assert_eq!(h["cache-control"], "no-cache");
    assert!(h.contains_key("content-security-policy"));
    let html = page.text().await.expect("body");
    assert!(html.contains("<div id=\"app\">"), "{html}");
    // Every client-side route gets the same page.
    for path in [
        "/tasks/groups/fN1SbArXTPSVFNUvaOlinQ",
        "/tasks/x/runs/0",
        "/task-queues/a/b",
        "/task-graphs/x",
    ] {
        let r = get(path).await.expect("GET");
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.text().await.expect("body"), html, "{path}");
    }
    // The page's script: hashed, cached for a year, served as JavaScript.
    let script = html
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a script in the page")
        .to_string();
    assert!(
        script.starts_with("/assets/") && script.ends_with(".js"),
        "{script}"
    );
    let r = get(&script).await.expect("GET script");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap_or_default()
        .contains("immutable"));
    let script_len = r.bytes().await.expect("the script").len();
    let head = client
        .head(format!("{root}{script}"))
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.status(), 200);
    // HEAD gives the length a GET sends.
    assert_eq!(
        head.headers()["content-length"].to_str().ok(),
        Some(script_len.to_string().as_str())
    );
    assert_eq!(
        get("/assets/missing-0000.js").await.expect("GET").status(),
        404
    );
    // The API is unchanged around it: its routes, its 404 for unknown ones, its methods.
    let (s, ping) = raw(&app, "GET", "/ping", None).await;
    assert_eq!((s, ping["alive"].clone()), (200, json!(true)));
    assert_error(
        &raw(&app, "GET", "/no-such-endpoint", None).await,
        404,
        "ResourceNotFound",
    );
    // A browser's page request for a path nobody serves gets the inspector's "not found" as a
    // 404; any other client gets the API's.
    let r = client
        .get(format!("{root}/nothing-here"))
        .header("accept", "text/html,*/*;q=0.8")
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status(), 404);
    assert_eq!(r.text().await.expect("body"), html);
    assert_error(
        &raw_url(&format!("{root}/nothing-here"), "GET", None, None).await,
        404,
        "ResourceNotFound",
    );
    let r = client
        .post(format!("{root}/tasks/x"))
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.expect("JSON");
    assert_eq!(body["code"], "ResourceNotFound");
}

#[tokio::test]
async fn the_group_page_counts_every_state_and_follows_a_completion() {
    let Some(chromium) = chromium() else { return };
    let app = ui_app().await;
    let (tq, group) = (task_queue_id(), slugid());
    let mut tasks = vec![];
    let mut counts = BTreeMap::new();
    for (state, n) in [
        ("unscheduled", 1),
        ("pending", 2),
        ("running", 1),
        ("completed", 3),
        ("failed", 1),
        ("exception", 1),
    ] {
        counts.insert(state, n);
        for i in 0..n {
            let name = format!("{state}-{i}");
            let id = task_in(&app, &tq, &group, &name, state).await;
            tasks.push(json!({ "taskId": id, "name": name, "state": state }));
        }
    }
    let running = tasks
        .iter()
        .find(|t| t["state"] == "running")
        .cloned()
        .expect("a running task");
    let data = json!({
        "taskGroupId": group,
        "tasks": tasks,
        "counts": counts,
        "unresolved": 4,
        "running": running,
    });
    let id = running["taskId"].as_str().expect("id").to_string();
    let result = browse(&chromium, &app, "group", data, |what| {
        assert_eq!(what, "complete");
        let (app, id) = (&app, id.clone());
        async move {
            complete(app, &id, 0).await;
        }
    })
    .await;
    assert_eq!(result["rows"], 9);
    assert_eq!(status(&app, &id).await["state"], "completed");
}

#[tokio::test]
async fn the_task_page_lists_runs_artifacts_and_links_and_a_public_artifact_downloads_and_follows_new_ones(
) {
    let Some(chromium) = chromium() else { return };
    let app = ui_app().await;
    let (tq, group) = (task_queue_id(), slugid());
    let dependency = task_in(&app, &tq, &group, "dependency", "completed").await;
    let id = task(
        &app,
        &tq,
        &group,
        "build-linux64",
        json!({ "dependencies": [dependency] }),
    )
    .await;
    // Run 0: the worker shut down; run 1 uploads and completes.
    claim(&app, &id, 0).await;
    let q = app.queue();
    q.reportException(&id, "0", &json!({ "reason": "worker-shutdown" }))
        .await
        .expect("reportException");
    claim(&app, &id, 1).await;
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    upload(&app, &id, 1, "public/build/target.tar.gz", &bytes).await;
    upload(&app, &id, 1, "private/secret.bin", b"not for everyone").await;
    q.createArtifact(
        &id,
        "1",
        "public/missing.log",
        &json!({ "storageType": "error", "expires": ts(3_600_000), "reason": "file-missing-on-worker", "message": "no such file" }),
    )
    .await
    .expect("error artifact");
    complete(&app, &id, 1).await;
    let dependent = task(
        &app,
        &tq,
        &group,
        "test-linux64",
        json!({ "dependencies": [id] }),
    )
    .await;
    // A run still going, to which an artifact is added while its page is open.
    let running = task_in(&app, &tq, &group, "still-running", "running").await;
    let data = json!({
        "taskId": id,
        "name": "build-linux64",
        "runs": [
            { "runId": 0, "state": "exception", "reasonResolved": "worker-shutdown", "worker": "wg/w1" },
            { "runId": 1, "state": "completed", "reasonResolved": "completed", "worker": "wg/w1" },
        ],
        "artifacts": [
            { "runId": 1, "name": "public/build/target.tar.gz", "link": true },
            { "runId": 1, "name": "private/secret.bin", "link": false },
            { "runId": 1, "name": "public/missing.log", "link": false },
        ],
        "public": { "name": "public/build/target.tar.gz", "base64": base64(&bytes) },
        "dependency": dependency,
        "dependent": dependent,
        "unknown": slugid(),
        "running": { "taskId": running, "artifact": "public/logs/live.log" },
    });
    let result = browse(&chromium, &app, "task", data, |what| {
        assert_eq!(what, "upload");
        let (app, running) = (&app, running.clone());
        async move { upload(app, &running, 0, "public/logs/live.log", b"still going").await }
    })
    .await;
    assert_eq!(result["downloaded"], 3000);
    let listed = app
        .queue()
        .listArtifacts(&running, "0", None, None)
        .await
        .expect("listArtifacts");
    assert_eq!(listed["artifacts"][0]["name"], "public/logs/live.log");
}

#[tokio::test]
async fn a_client_that_may_cancel_sees_the_action_and_cancels_the_task() {
    let Some(chromium) = chromium() else { return };
    let app = ui_app().await;
    let (tq, group) = (task_queue_id(), slugid());
    let id = task_in(&app, &tq, &group, "long-job", "pending").await;
    let other = task_in(&app, &tq, &group, "other-job", "pending").await;
    let done = task(&app, &tq, &group, "with-private", json!({})).await;
    claim(&app, &done, 0).await;
    upload(
        &app,
        &done,
        0,
        "private/report.bin",
        b"private bytes\x00\x01",
    )
    .await;
    complete(&app, &done, 0).await;
    let s = status(&app, &id).await;
    let scheduler = s["schedulerId"].as_str().expect("schedulerId");
    let creds = client_with(
        &app,
        &[
            format!("queue:cancel-task:{scheduler}/{group}/{id}"),
            "queue:get-artifact:private/*".to_string(),
        ],
    )
    .await;
    let data = json!({
        "taskId": id,
        "otherTaskId": other,
        "clientId": creds.client_id,
        "accessToken": creds.access_token,
        "private": { "taskId": done, "name": "private/report.bin", "base64": base64(b"private bytes\x00\x01") },
        "taskQueueId": tq,
    });
    browse(&chromium, &app, "cancel", data, |_| async {}).await;
    // The page's click canceled it on the server; the other task is untouched.
    let after = status(&app, &id).await;
    assert_eq!(after["state"], "exception", "{after:#}");
    assert_eq!(after["runs"][0]["reasonResolved"], "canceled", "{after:#}");
    assert_eq!(status(&app, &other).await["state"], "pending");
}

#[tokio::test]
async fn a_twenty_task_graph_is_drawn_with_its_nodes_and_edges() {
    let Some(chromium) = chromium() else { return };
    let app = ui_app().await;
    let tq = task_queue_id();
    let gid = slugid();
    // decision -> 4 builds -> 2 tests each -> 4 uploads (one per build's tests) -> release,
    // with a lint beside the builds: 1 + 4 + 8 + 4 + 1 + 1 + 1 (docs) = 20 tasks.
    let mut nodes = serde_json::Map::new();
    let mut add = |label: String, requires: Vec<String>, reruns: u32| {
        let mut def = task_def(&tq);
        def["metadata"]["name"] = json!(label);
        let req: Vec<&str> = requires.iter().map(String::as_str).collect();
        nodes.insert(label, node(&req, reruns, def));
    };
    add("decision".into(), vec![], 0);
    add("lint".into(), vec!["decision".into()], 1);
    add("docs".into(), vec!["decision".into()], 0);
    for p in ["linux", "macos", "windows", "android"] {
        add(format!("build-{p}"), vec!["decision".into()], 2);
        for t in 1..=2 {
            add(format!("test-{p}-{t}"), vec![format!("build-{p}")], 1);
        }
        add(
            format!("upload-{p}"),
            vec![format!("test-{p}-1"), format!("test-{p}-2")],
            0,
        );
    }
    add(
        "release".into(),
        ["linux", "macos", "windows", "android"]
            .iter()
            .map(|p| format!("upload-{p}"))
            .chain(["lint".to_string()])
            .collect(),
        0,
    );
    assert_eq!(nodes.len(), 20);
    let body = json!({
        "routing": "ui",
        "metadata": { "name": "release pipeline", "description": "a graph for the inspector", "owner": "tests@example.com", "source": "https://example.com/tests" },
        "tags": {},
        "tasks": nodes,
    });
    let s = Scheduler::root(&app);
    let (code, created) = s.create(&gid, &body).await;
    assert_eq!(code, 200, "{created:#}");
    let (code, inspect) = s.inspect(&gid).await;
    assert_eq!(code, 200, "{inspect:#}");
    let list = inspect["tasks"].as_array().expect("tasks").clone();
    let by_label: BTreeMap<String, String> = list
        .iter()
        .map(|t| {
            (
                t["label"].as_str().unwrap_or_default().to_string(),
                t["taskId"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    // Some progress for the colours: the decision completes, a build runs.
    let decision = &by_label["decision"];
    claim(&app, decision, 0).await;
    complete(&app, decision, 0).await;
    let build = by_label["build-linux"].clone();
    poll(Duration::from_secs(30), "build-linux pending", || {
        let (app, build) = (&app, build.clone());
        async move { (status(app, &build).await["state"] == "pending").then_some(()) }
    })
    .await;
    claim(&app, &build, 0).await;
    let edges: Vec<String> = list
        .iter()
        .flat_map(|t| {
            let to = t["taskId"].as_str().unwrap_or_default().to_string();
            t["requires"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |r| format!("{}>{to}", r.as_str().unwrap_or_default()))
        })
        .collect();
    // lint and docs; per platform its build, two tests, an upload of both; release of five.
    assert_eq!(edges.len(), 2 + 4 * (1 + 2 + 2) + 5);
    let data = json!({
        "taskGraphId": gid,
        "nodes": list.iter().map(|t| json!({
            "taskId": t["taskId"],
            "label": t["label"],
            "state": match t["label"].as_str() {
                Some("decision") => Some("completed"),
                Some("build-linux") => Some("running"),
                _ => None,
            },
        })).collect::<Vec<_>>(),
        "edges": edges,
    });
    let result = browse(&chromium, &app, "graph", data, |_| async {}).await;
    assert_eq!(result["nodes"], 20);
    assert_eq!(result["edges"], edges.len());
}

#[tokio::test]
async fn the_task_queue_and_start_pages_work_and_fit_a_phone() {
    let Some(chromium) = chromium() else { return };
    // Aging after 2 s, so that a task waits past the threshold before the page is read.
    let app = spawn_app_with(|c| {
        c.queue.anonymous_scopes = None;
        c.queue.priority_aging_ms = 2_000;
    })
    .await;
    let (tq, group) = (task_queue_id(), slugid());
    // A claim records the task queue, which the priority ager then looks at.
    let claimed = task_in(&app, &tq, &group, "in-progress", "running").await;
    let aged = task_in(&app, &tq, &group, "waited-long", "pending").await;
    let queue = app.domain_queue().await;
    poll(Duration::from_secs(30), "a pending run aged", || async {
        (queue.aged_count(&tq).await.ok()? == 1).then_some(())
    })
    .await;
    for i in 0..3 {
        task_in(&app, &tq, &group, &format!("waiting-{i}"), "pending").await;
    }
    // The claim's worker is recorded within a tick of the local server.
    poll(Duration::from_secs(30), "the worker recorded", || async {
        let (p, wt) = tq.split_once('/').expect("a task queue id");
        let r = app.queue().getWorker(p, wt, "wg", "w1").await.ok()?;
        (!r["recentTasks"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let data = json!({
        "taskQueueId": tq,
        "taskGroupId": group,
        "pending": 4,
        "agedTaskId": aged,
        "claimed": 1,
        "workers": 1,
        "worker": "wg/w1",
        "claimedTaskId": claimed,
        "rootClientId": ROOT_CLIENT_ID,
        "rootAccessToken": ROOT_ACCESS_TOKEN,
    });
    browse(&chromium, &app, "pages", data, |_| async {}).await;
}
