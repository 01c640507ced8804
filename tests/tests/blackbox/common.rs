//! Helpers shared by the black-box test modules.

use blackbox::*;
use serde_json::{json, Value};
use shared::events::Event;
use std::future::Future;
use std::time::{Duration, Instant};

/// Full exchange name for a short one such as `task-pending`.
pub fn exchange(short: &str) -> String {
    format!("exchange/taskcluster-queue/v1/{short}")
}

/// The short exchange name of an event (`task-pending`).
pub fn short_name(e: &Event) -> &str {
    e.exchange
        .strip_prefix("exchange/taskcluster-queue/v1/")
        .unwrap_or(&e.exchange)
}

/// A claimWork/claimTask body.
pub fn worker(group: &str, id: &str, tasks: u32) -> Value {
    json!({ "workerGroup": group, "workerId": id, "tasks": tasks })
}

/// A claimTask body.
pub fn claimer(group: &str, id: &str) -> Value {
    json!({ "workerGroup": group, "workerId": id })
}

/// `task_def` with extra top-level fields merged in.
pub fn def_with(tq: &str, extra: Value) -> Value {
    let mut d = task_def(tq);
    if let (Some(o), Some(e)) = (d.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    d
}

/// A definition whose deadline passes in `deadline_ms` (created 5 s in the past, which the
/// 15 minute drift allowance permits).
pub fn short_deadline_def(tq: &str, deadline_ms: i64) -> Value {
    def_with(
        tq,
        json!({ "created": ts(-5_000), "deadline": ts(deadline_ms) }),
    )
}

/// Creates a task with a fresh id and returns the id; panics on failure.
pub async fn create(app: &TestServer, def: &Value) -> String {
    let id = slugid();
    let r = app
        .queue()
        .createTask(&id, def)
        .await
        .unwrap_or_else(|e| panic!("createTask failed: {e:#}"));
    assert_eq!(r["status"]["taskId"], id.as_str());
    id
}

/// Claims exactly one task from `tq` with claimWork and returns the claim item.
pub async fn claim_one(app: &TestServer, tq: &str, group: &str, id: &str) -> Value {
    let r = app
        .queue()
        .claimWork(tq, &worker(group, id, 1))
        .await
        .unwrap_or_else(|e| panic!("claimWork failed: {e:#}"));
    let tasks = r["tasks"].as_array().cloned().unwrap_or_default();
    assert_eq!(tasks.len(), 1, "expected one claim, got {r}");
    tasks[0].clone()
}

/// The status of a task (panics if the call fails).
pub async fn status(app: &TestServer, id: &str) -> Value {
    app.queue()
        .status(id)
        .await
        .unwrap_or_else(|e| panic!("status({id}) failed: {e:#}"))["status"]
        .clone()
}

/// Polls `f` every 50 ms until it yields `Some`, or panics after `timeout` naming `what`.
pub async fn poll<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The task queue's counts (taskQueueCounts) once they show `pending` pending and `claimed`
/// claimed runs (`None`: any). They come from secondary indexes, which on DynamoDB lag the
/// writes (by up to about a second; by `TCQ_INDEX_LAG_MS` on the embedded backend), so a
/// caller that has just written reads them until they agree, as any client on AWS would.
pub async fn counts_settle(
    app: &TestServer,
    tq: &str,
    pending: Option<u64>,
    claimed: Option<u64>,
) -> Value {
    let q = app.queue();
    let mut last = Value::Null;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let c = q.taskQueueCounts(tq).await.expect("taskQueueCounts");
        let fits = |key: &str, want: Option<u64>| want.is_none_or(|n| c[key].as_u64() == Some(n));
        if fits("pendingTasks", pending) && fits("claimedTasks", claimed) {
            return c;
        }
        assert!(
            Instant::now() < until,
            "counts of {tq} never showed pending {pending:?}, claimed {claimed:?}: last {last}"
        );
        last = c;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to `timeout` until task queue `tq` has `n` pending tasks.
pub async fn all_pending(app: &TestServer, tq: &str, n: usize, timeout: Duration) {
    let q = app.queue();
    poll(
        timeout,
        &format!("all {n} tasks of {tq} pending"),
        || async {
            let pending = q.pendingTasks(tq).await.unwrap()["pendingTasks"].clone();
            (pending == n).then_some(())
        },
    )
    .await
}

/// Polls the status of `id` until `pred` holds; returns that status.
pub async fn wait_status(
    app: &TestServer,
    id: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + timeout;
    loop {
        let s = status(app, id).await;
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting on the status of {id}; last: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Raw HTTP call: `(status, JSON body or Null)`. `body` is sent as `application/json`.
pub async fn raw(app: &TestServer, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let bytes = body.map(|b| b.to_string().into_bytes());
    raw_bytes(app, method, path, Some("application/json"), bytes).await
}

/// Raw HTTP call with an arbitrary body and content type.
pub async fn raw_bytes(
    app: &TestServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    raw_url(&app.url(path), method, content_type, body).await
}

/// Raw HTTP call to a full URL, signed with the root credentials.
pub async fn raw_url(
    url: &str,
    method: &str,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    let authz = root_authorization(method, url);
    raw_url_with(url, method, content_type, body, Some(&authz)).await
}

/// Raw HTTP call to a full URL with the given `Authorization` header (if any).
pub async fn raw_url_with(
    url: &str,
    method: &str,
    content_type: Option<&str>,
    body: Option<Vec<u8>>,
    authorization: Option<&str>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client.request(m, url);
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    if let Some(b) = body {
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        req = req.body(b);
    }
    let resp = req.send().await.expect("request sent");
    let code = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let v = serde_json::from_str(&text).unwrap_or(Value::Null);
    (code, v)
}

/// Asserts that an error reply has the given status and code, and Taskcluster's error shape
/// `{code, message, requestInfo}`. Returns the message.
pub fn assert_error(got: &(u16, Value), status: u16, code: &str) -> String {
    let (s, body) = got;
    assert_eq!(*s, status, "expected {status} {code}, got {s}: {body:#}");
    assert_eq!(body["code"], code, "wrong code in {body:#}");
    assert_error_shape(body);
    body["message"].as_str().unwrap_or_default().to_string()
}

/// Every error body is `{code, message, requestInfo: {method, params, payload, time}}`.
pub fn assert_error_shape(body: &Value) {
    assert!(body["code"].is_string(), "no code: {body:#}");
    assert!(body["message"].is_string(), "no message: {body:#}");
    let info = &body["requestInfo"];
    assert!(info.is_object(), "no requestInfo: {body:#}");
    for k in ["method", "params", "payload", "time"] {
        assert!(info.get(k).is_some(), "requestInfo lacks {k}: {body:#}");
    }
    if let Err(errs) = shared::schema::check("error", body) {
        panic!("error body fails the error schema: {errs:?}\n{body:#}");
    }
}

/// The HTTP status of a failed client call, asserting that it did fail.
pub fn err_status(r: anyhow::Result<Value>) -> u16 {
    match r {
        Ok(v) => panic!("expected an error, got {v:#}"),
        Err(e) => status_of(&e).unwrap_or_else(|| panic!("no HTTP status in {e:#}")),
    }
}

/// True if `s` is `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn is_js_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() == 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && b[23] == b'Z'
}

const DATE_KEYS: &[&str] = &[
    "created",
    "deadline",
    "expires",
    "takenUntil",
    "scheduled",
    "started",
    "resolved",
    "inserted",
    "claimed",
];

/// Asserts that every date-valued field anywhere in `v` has the millisecond UTC form; returns
/// how many were checked.
pub fn assert_dates(v: &Value) -> usize {
    let mut n = 0;
    walk_dates(v, &mut n);
    n
}

fn walk_dates(v: &Value, n: &mut usize) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if DATE_KEYS.contains(&k.as_str()) {
                    if let Some(s) = x.as_str() {
                        assert!(is_js_date(s), "{k} = {s:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ");
                        *n += 1;
                    }
                }
                walk_dates(x, n);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| walk_dates(x, n)),
        _ => {}
    }
}

/// Events about one task, in publication order.
pub fn events_of(app: &TestServer, task_id: &str) -> Vec<Event> {
    app.events()
        .into_iter()
        .filter(|e| e.payload["status"]["taskId"] == task_id)
        .collect()
}

/// The short exchange names of the events about one task.
pub fn names_of(app: &TestServer, task_id: &str) -> Vec<String> {
    events_of(app, task_id)
        .iter()
        .map(|e| short_name(e).to_string())
        .collect()
}

/// Waits until at least `n` events on `short` exchange (optionally with `runId`) exist for
/// `task_id`; returns them.
pub async fn wait_events(
    app: &TestServer,
    task_id: &str,
    short: &str,
    run_id: Option<u64>,
    n: usize,
) -> Vec<Event> {
    poll(
        Duration::from_secs(10),
        &format!("{n} {short} event(s) for {task_id} (run {run_id:?})"),
        || async {
            let got: Vec<Event> = events_of(app, task_id)
                .into_iter()
                .filter(|e| short_name(e) == short)
                .filter(|e| run_id.is_none_or(|r| e.payload["runId"] == r))
                .collect();
            (got.len() >= n).then_some(got)
        },
    )
    .await
}

/// Validates every recorded event against `<exchange short name>-message`.
pub fn assert_event_schemas(app: &TestServer) -> usize {
    let events = app.events();
    for e in &events {
        let schema = format!("{}-message", short_name(e));
        if let Err(errs) = shared::schema::check(&schema, &e.payload) {
            panic!(
                "event on {} fails {schema}: {errs:?}\n{:#}",
                e.exchange, e.payload
            );
        }
    }
    events.len()
}

/// Reports a run completed with raw HTTP (no body), returning the status code.
pub async fn complete(app: &TestServer, id: &str, run: u64) -> Value {
    app.queue()
        .reportCompleted(id, &run.to_string())
        .await
        .unwrap_or_else(|e| panic!("reportCompleted({id}, {run}) failed: {e:#}"))
}

/// Runs `tests/python/<script>` with the official Python client (`TCQ_PYTHON`) as root
/// against `app`, with `envs` besides, and returns the one JSON line it prints; `None` (and a
/// note) when `TCQ_PYTHON` is not set.
pub async fn run_python(app: &TestServer, script: &str, envs: &[(&str, String)]) -> Option<Value> {
    let Ok(python) = std::env::var("TCQ_PYTHON") else {
        eprintln!(
            "TCQ_PYTHON is not set: run through scripts/test.sh, which installs the Python client"
        );
        return None;
    };
    let script = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    Some(run_client_script(app, &python, &script, envs).await)
}

/// Runs `tests/node/<script>` with the official npm client (installed by scripts/test.sh in
/// `TCQ_NODE_CLIENT`) as root against `app`, with `envs` besides, and returns the one JSON
/// line it prints; `None` (and a note) when `TCQ_NODE_CLIENT` is not set.
pub async fn run_node(app: &TestServer, script: &str, envs: &[(&str, String)]) -> Option<Value> {
    let Ok(dir) = std::env::var("TCQ_NODE_CLIENT") else {
        eprintln!(
            "TCQ_NODE_CLIENT is not set: run through scripts/test.sh, which installs the npm client"
        );
        return None;
    };
    Some(run_client_script(app, "node", &format!("{dir}/{script}"), envs).await)
}

/// Runs `program script` with the root credentials and `app`'s rootUrl in the environment
/// (as the official clients read them), and `envs`; asserts that it succeeds and returns the
/// one JSON line it prints.
async fn run_client_script(
    app: &TestServer,
    program: &str,
    script: &str,
    envs: &[(&str, String)],
) -> Value {
    let (program, path) = (program.to_string(), script.to_string());
    let envs: Vec<(String, String)> = envs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let root_url = app.root_url();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&program)
            .arg(&path)
            .env("TASKCLUSTER_ROOT_URL", root_url)
            .env("TASKCLUSTER_CLIENT_ID", ROOT_CLIENT_ID)
            .env("TASKCLUSTER_ACCESS_TOKEN", ROOT_ACCESS_TOKEN)
            .env_remove("TASKCLUSTER_CERTIFICATE")
            .envs(envs)
            .output()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"))
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

/// A child server process (see `spawn_child_server`), killed when dropped.
pub struct ChildServer {
    child: std::process::Child,
    /// Its rootUrl.
    pub root: String,
}

impl ChildServer {
    /// Starts the test binary's ignored `test_name` as a server on `dir` and waits until it
    /// answers.
    pub async fn start(test_name: &str, dir: &std::path::Path, envs: &[(&str, String)]) -> Self {
        Self::start_to(test_name, dir, envs, std::process::Stdio::null()).await
    }

    /// [`ChildServer::start`], its stdout (its log) written to the file `log`.
    pub async fn start_logging(
        test_name: &str,
        dir: &std::path::Path,
        envs: &[(&str, String)],
        log: &std::path::Path,
    ) -> Self {
        let file = std::fs::File::create(log).expect("log file");
        Self::start_to(test_name, dir, envs, file.into()).await
    }

    async fn start_to(
        test_name: &str,
        dir: &std::path::Path,
        envs: &[(&str, String)],
        stdout: std::process::Stdio,
    ) -> Self {
        let port = free_port();
        let child = spawn_child_server_to(test_name, dir, port, envs, stdout);
        let server = ChildServer {
            child,
            root: format!("http://127.0.0.1:{port}"),
        };
        assert!(
            wait_until_up(&server.root, Duration::from_secs(30)).await,
            "child server did not come up"
        );
        server
    }
}

impl ChildServer {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("wait for the child");
        assert!(!status.success(), "killed, not exited: {status:?}");
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every item of a paged listing: calls `page` with each continuation token (none first)
/// until a page has none, checking that no page holds more than `limit` items of `key`.
pub async fn all_pages<F, Fut>(key: &str, limit: usize, mut page: F) -> Vec<Value>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Value>,
{
    let mut out = vec![];
    let mut token = None;
    loop {
        let got = page(token.take()).await;
        let items = got[key].as_array().expect("a list");
        assert!(items.len() <= limit, "limit={limit}: {got}");
        out.extend(items.iter().cloned());
        match got["continuationToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => return out,
        }
    }
}

/// Creates a client holding exactly `scopes` (via the auth API, as root); returns its
/// credentials.
pub async fn client_with(app: &TestServer, scopes: &[String]) -> taskcluster::Credentials {
    let id = format!("test/{}", slugid());
    let r = app
        .auth()
        .createClient(
            &id,
            &json!({"description": "black-box test client", "expires": ts(3_600_000), "scopes": scopes}),
        )
        .await
        .unwrap_or_else(|e| panic!("createClient failed: {e:#}"));
    assert_eq!(r["clientId"], id.as_str());
    taskcluster::Credentials::new(id, r["accessToken"].as_str().expect("accessToken"))
}

/// The temporary credentials of a reply that carries them (a claim, a reclaim, an object
/// artifact's createArtifact or artifact).
pub fn credentials_of(reply: &Value) -> taskcluster::Credentials {
    let c = &reply["credentials"];
    taskcluster::Credentials::new_with_certificate(
        c["clientId"].as_str().expect("clientId"),
        c["accessToken"].as_str().expect("accessToken"),
        c["certificate"].as_str().expect("certificate"),
    )
}

/// The HTTP status of a failed client call without a reply body, asserting that it failed.
pub fn unit_err_status(r: anyhow::Result<()>) -> u16 {
    err_status(r.map(|()| Value::Null))
}
