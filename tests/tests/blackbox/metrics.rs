//! Operating the local server (issue 38): after a scripted mix of calls, its `/metrics`
//! (parsed by a Prometheus text parser) holds exactly the counts and gauges the mix implies,
//! and its log holds one JSON line per call and none of the credentials the mix used.

use crate::common::*;
use blackbox::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The server the test below starts as a process of its own, logging JSON to its stdout.
#[test]
#[ignore = "the server process of metrics::a_mix_of_calls_is_counted_and_logged"]
fn child_server() {
    if std::env::var(CHILD_ENV).is_ok() {
        functions::init_tracing(true);
    }
    run_child_server();
}

/// A series the mix should leave: metric, labels it includes, value.
type Expect<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);

/// Series of one metric, by their labels.
type Series = HashMap<String, Vec<(HashMap<String, String>, f64)>>;

async fn scrape(url: &str) -> Series {
    let text = reqwest::get(url)
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("text");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let mut out: Series = HashMap::new();
    for s in parsed.samples {
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => continue,
        };
        let labels = s
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        out.entry(s.metric).or_default().push((labels, v));
    }
    out
}

/// The value of the series of `metric` whose labels include `want`, if there is one.
fn value(m: &Series, metric: &str, want: &[(&str, &str)]) -> Option<f64> {
    m.get(metric)?
        .iter()
        .find(|(labels, _)| {
            want.iter()
                .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
}

#[tokio::test]
async fn a_mix_of_calls_is_counted_and_logged() {
    if not_in_shape("reads the local server's /metrics and log (the shape prints EMF)") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let log_path = dir.path().join("server.log");
    let metrics_port = free_port();
    let server = ChildServer::start_logging(
        "metrics::child_server",
        &dir.path().join("data"),
        &[
            ("TCQ_METRICS_PORT", metrics_port.to_string()),
            ("TCQ_CLAIM_TIMEOUT", claim_secs().to_string()),
            ("TCQ_CLAIM_WORK_TIMEOUT_MS", "500".into()),
            ("TCQ_REAPER_INTERVAL_MS", "100".into()),
            ("RUST_LOG", "info,lapin=off".into()),
        ],
        &log_path,
    )
    .await;
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    let mix = run_mix(&server.root).await;
    let m = until_matched(&mix, &[], || scrape(&metrics_url)).await;
    check_figures(&server.root, &mix, &m).await;
    let log = std::fs::read_to_string(&log_path).expect("log");
    check(&mix, &m, &log);
}

/// The same mix against the deployed shape: the EMF lines its functions print (summed, the
/// gauges' latest) hold the same figures, and their logs the same lines.
#[tokio::test]
async fn the_functions_print_the_mix_as_emf() {
    if !in_shape() || claims_on_service() {
        eprintln!("for the deployed shape with claim functions (the claim service prints no EMF)");
        return;
    }
    let app = spawn_app_alone_with(|cfg| {
        cfg.metrics_port = Some(0);
        cfg.queue.claim_timeout_secs = claim_secs();
        cfg.queue.claim_work_timeout_ms = 500;
    })
    .await;
    let logs = app.function_logs().expect("the functions' output is kept");
    let mix = run_mix(&app.root_url()).await;
    // The publisher says how old the events were when the broker confirmed them.
    let lag = (
        "queue_stream_lag_seconds_count",
        vec![("job", "publisher")],
        1.0,
    );
    let m = until_matched(&mix, &[lag], || async { emf_series(&logs) }).await;
    check_figures(&app.root_url(), &mix, &m).await;
    check(&mix, &m, &all_logs(&logs));
}

/// A server that serves no metrics port but prints EMF every second (the claim service of
/// `ClaimMode=service`, whose log group CloudWatch reads): its lines add up to its calls.
#[tokio::test]
async fn a_server_printing_emf_counts_each_call_once() {
    if not_in_shape("runs a local server process") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).expect("log dir");
    let server = ChildServer::start_logging(
        "metrics::child_server",
        &dir.path().join("data"),
        &[
            ("TCQ_METRICS_EMF_SECS", "1".into()),
            ("TCQ_CLAIM_WORK_TIMEOUT_MS", "500".into()),
        ],
        &logs.join("server.log"),
    )
    .await;
    let q = queue_client(&server.root);
    let tq = task_queue_id();
    for _ in 0..3 {
        q.createTask(&slugid(), &task_def(&tq))
            .await
            .expect("createTask");
    }
    settle_indexes().await;
    let r = q
        .claimWork(&tq, &worker("g", "w", 2))
        .await
        .expect("claimWork");
    assert_eq!(r["tasks"].as_array().map(Vec::len), Some(2));
    let (prov, wt) = tq.split_once('/').expect("prov/wt");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let m = emf_series(&logs);
        let created = value(
            &m,
            "http_requests_total",
            &[("name", "createTask"), ("status", "200")],
        );
        let pickups = value(
            &m,
            "queue_claim_pickup_seconds_count",
            &[("provisionerId", prov), ("workerType", wt)],
        );
        if created == Some(3.0) && pickups == Some(2.0) {
            break;
        }
        assert!(
            Instant::now() < until,
            "EMF lines never added up: {created:?} {pickups:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Two more periods print nothing counted twice.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let m = emf_series(&logs);
    let created = value(
        &m,
        "http_requests_total",
        &[("name", "createTask"), ("status", "200")],
    );
    assert_eq!(created, Some(3.0));
}

/// What the mix did, for the checks.
struct Mix {
    tq: String,
    /// Resolved completed, failed, exception.
    resolved: Vec<String>,
    pending_since: Instant,
    secrets: Vec<String>,
    keep: tokio::task::JoinHandle<()>,
    reclaimed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// The claim timeout of the mix, in seconds: long enough for the kept claim's reclaims
/// (every half second) to outlast a loaded machine's pauses, and longer over LocalStack
/// (the deployed shape included), where a call takes up to a second.
fn claim_secs() -> u64 {
    if on_localstack() || in_shape() {
        8
    } else {
        3
    }
}

/// Three workers (one quarantined), a claim left to expire, a completion, a failure, a
/// worker's exception, a cancelation, a claim kept by its worker's reclaims, two runs left
/// pending, a bad signature and a signed URL read.
async fn run_mix(root: &str) -> Mix {
    let q = queue_client(root);
    let tq = task_queue_id();
    let (prov, wt) = tq.split_once('/').expect("prov/wt");
    let mut secrets = vec![ROOT_ACCESS_TOKEN.to_string()];
    let create = |extra: Value| {
        let q = &q;
        let def = def_with(&tq, extra);
        async move {
            let id = slugid();
            q.createTask(&id, &def).await.expect("createTask");
            // The next claim finds it through the pending index.
            settle_indexes().await;
            id
        }
    };
    let claim = || async {
        let r = q
            .claimWork(&tq, &worker("g", "w1", 1))
            .await
            .expect("claimWork");
        r["tasks"][0].clone()
    };

    // Two workers that find nothing (one then quarantined): the queue has three workers.
    for w in ["w2", "w3"] {
        let r = q
            .claimWork(&tq, &worker("g", w, 1))
            .await
            .expect("claimWork");
        assert_eq!(r["tasks"], json!([]));
    }
    q.quarantineWorker(
        prov,
        wt,
        "g",
        "w3",
        &json!({"quarantineUntil": ts(3_600_000)}),
    )
    .await
    .expect("quarantineWorker");

    // A claim left to expire (no retries): exception/claim-expired.
    let expired = create(json!({"retries": 0})).await;
    let c = claim().await;
    assert_eq!(c["status"]["taskId"], expired.as_str());
    secrets.push(
        c["credentials"]["accessToken"]
            .as_str()
            .expect("token")
            .into(),
    );

    // Completed, failed, and a worker's exception, each resolved as soon as claimed.
    let mut resolved = vec![];
    for i in 0..3 {
        let id = create(json!({})).await;
        let c = claim().await;
        assert_eq!(c["status"]["taskId"], id.as_str());
        match i {
            0 => q.reportCompleted(&id, "0").await.expect("completed"),
            1 => q.reportFailed(&id, "0").await.expect("failed"),
            _ => q
                .reportException(&id, "0", &json!({"reason": "malformed-payload"}))
                .await
                .expect("exception"),
        };
        resolved.push(id);
    }

    // Canceled while pending.
    let canceled = create(json!({})).await;
    q.cancelTask(&canceled).await.expect("cancel");

    // One claimed and kept (its worker's temporary credentials reclaim it), then two left
    // pending.
    let kept = create(json!({})).await;
    let c = claim().await;
    assert_eq!(c["status"]["taskId"], kept.as_str());
    let creds = credentials_of(&c);
    secrets.push(creds.access_token.clone());
    secrets.push(creds.certificate.clone().expect("certificate"));
    // Each reclaim signs with the credentials the last one handed out.
    let reclaimed = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let keep = {
        let (kept, root, reclaimed) = (kept.clone(), root.to_string(), reclaimed.clone());
        tokio::spawn(async move {
            let mut creds = creds;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let wq = taskcluster::Queue::new(builder(&root, Some(creds))).expect("client");
                let r = wq
                    .reclaimTask(&kept, "0")
                    .await
                    .unwrap_or_else(|e| panic!("reclaimTask: {e:#}"));
                creds = credentials_of(&r);
                let mut held = reclaimed.lock().expect("lock");
                held.push(creds.access_token.clone());
                held.push(creds.certificate.clone().unwrap_or_default());
            }
        })
    };
    let pending_since = Instant::now();
    for _ in 0..2 {
        create(json!({})).await;
    }

    // A bad signature, and a signed URL (a bewit) read.
    let wrong = format!("wrong-{}", slugid());
    secrets.push(wrong.clone());
    let bad = taskcluster::Queue::new(builder(
        root,
        Some(taskcluster::Credentials::new(ROOT_CLIENT_ID, &wrong)),
    ))
    .expect("client");
    assert_eq!(err_status(bad.status(&kept).await), 401);
    let signed = q
        .status_signed_url(&kept, Duration::from_secs(300))
        .expect("signed URL");
    let bewit = signed
        .split("bewit=")
        .nth(1)
        .expect("a bewit")
        .split('&')
        .next()
        .unwrap_or_default()
        .to_string();
    secrets.push(bewit);
    let got = reqwest::get(&signed).await.expect("GET");
    assert_eq!(got.status(), 200);

    // The expired claim is reaped within a claim timeout or so.
    wait_status_at(&q, &expired, |s| {
        s["runs"][0]["reasonResolved"] == "claim-expired"
    })
    .await;
    Mix {
        tq,
        resolved,
        pending_since,
        secrets,
        keep,
        reclaimed,
    }
}

/// Reads the metrics until they hold what the mix implies (the reaper and the worker
/// records settle shortly after); they are returned then.
/// `at_least` holds counts that only have to reach their figure; the worker's reclaims, for
/// one, go on in the background and a loaded machine may not have counted the first yet.
async fn until_matched<F, Fut>(mix: &Mix, at_least: &[Expect<'_>], mut read: F) -> Series
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Series>,
{
    let (prov, wt) = mix.tq.split_once('/').expect("prov/wt");

    let queue = |extra: &[(&'static str, &'static str)]| {
        let mut l = vec![("provisionerId", prov), ("workerType", wt)];
        l.extend_from_slice(extra);
        l
    };
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let m = read().await;
        let expected: Vec<Expect> = vec![
            ("queue_completed_tasks", queue(&[]), 1.0),
            (
                "queue_failed_tasks",
                queue(&[("reasonResolved", "failed")]),
                1.0,
            ),
            (
                "queue_exception_tasks",
                queue(&[("reasonResolved", "claim-expired")]),
                1.0,
            ),
            (
                "queue_exception_tasks",
                queue(&[("reasonResolved", "malformed-payload")]),
                1.0,
            ),
            (
                "queue_exception_tasks",
                queue(&[("reasonResolved", "canceled")]),
                1.0,
            ),
            ("queue_pending_tasks", queue(&[]), 2.0),
            ("queue_claimed_tasks", queue(&[]), 1.0),
            ("queue_running_workers", queue(&[]), 1.0),
            ("queue_workers_total", queue(&[]), 3.0),
            ("queue_quarantined_workers", queue(&[]), 1.0),
            ("queue_idle_workers", queue(&[]), 1.0),
            ("queue_claim_pickup_seconds_count", queue(&[]), 5.0),
            (
                "http_requests_total",
                vec![
                    ("name", "createTask"),
                    ("method", "PUT"),
                    ("status", "200"),
                    ("service", "queue"),
                ],
                8.0,
            ),
            (
                "http_requests_total",
                vec![("name", "status"), ("status", "401")],
                1.0,
            ),
            (
                "http_requests_total",
                vec![("name", "cancelTask"), ("status", "200")],
                1.0,
            ),
            (
                "auth_failure_total",
                vec![("reason", "invalid_signature"), ("scheme", "hawk")],
                1.0,
            ),
            (
                "auth_success_total",
                vec![("clientId", "static/taskcluster/root"), ("scheme", "bewit")],
                1.0,
            ),
        ];
        let reclaims: Expect = (
            "auth_success_total",
            vec![("clientId", "task-client/*"), ("scheme", "hawk")],
            1.0,
        );
        let short = std::iter::once(&reclaims).chain(at_least);
        let wrong: Vec<String> =
            expected
                .iter()
                .filter(|(name, labels, v)| value(&m, name, labels) != Some(*v))
                .chain(short.filter(|(name, labels, v)| {
                    !value(&m, name, labels).is_some_and(|got| got >= *v)
                }))
                .map(|(name, labels, v)| {
                    format!(
                        "{name}{labels:?}: {:?}, expected {v}",
                        value(&m, name, labels)
                    )
                })
                .collect();
        if wrong.is_empty() {
            return m;
        }
        assert!(
            Instant::now() < until,
            "metrics never matched the mix: {wrong:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The inspector's figures of the mix's queue (`taskQueueFigures`) are the gauges'.
async fn check_figures(root: &str, mix: &Mix, m: &Series) {
    let url = format!(
        "{root}/api/queue/v1/task-queues/{}/figures",
        mix.tq.replace('/', "%2F")
    );
    let r = reqwest::Client::new()
        .get(&url)
        .header("authorization", root_authorization("GET", &url))
        .send()
        .await
        .expect("taskQueueFigures");
    assert_eq!(r.status(), 200);
    let f: Value = r.json().await.expect("JSON");
    let (prov, wt) = mix.tq.split_once('/').expect("prov/wt");
    let labels = [("provisionerId", prov), ("workerType", wt)];
    for (field, metric) in [
        ("pendingTasks", "queue_pending_tasks"),
        ("claimedTasks", "queue_claimed_tasks"),
        ("workers", "queue_workers_total"),
        ("quarantinedWorkers", "queue_quarantined_workers"),
        ("idleWorkers", "queue_idle_workers"),
    ] {
        assert_eq!(f[field].as_f64(), value(m, metric, &labels), "{field}: {f}");
    }
    let age = f["oldestPendingAgeSeconds"].as_f64().expect("age");
    assert!(
        age > 0.0 && age <= mix.pending_since.elapsed().as_secs_f64() + 1.0,
        "{f}"
    );
    assert!(f["oldestPending"].as_str().is_some_and(is_js_date), "{f}");
}

/// What the metrics and the log hold beyond the counts.
fn check(mix: &Mix, m: &Series, log: &str) {
    let (prov, wt) = mix.tq.split_once('/').expect("prov/wt");
    let (tq, resolved) = (&mix.tq, &mix.resolved);
    let queue = |extra: &[(&'static str, &'static str)]| {
        let mut l: Vec<(&str, &str)> = vec![("provisionerId", prov), ("workerType", wt)];
        l.extend_from_slice(extra);
        l
    };
    let mut secrets = mix.secrets.clone();
    mix.keep.abort();
    secrets.extend(mix.reclaimed.lock().expect("lock").iter().cloned());
    let age = value(m, "queue_oldest_pending_task_age_seconds", &queue(&[])).expect("age");
    assert!(
        age > 0.0 && age <= mix.pending_since.elapsed().as_secs_f64() + 1.0,
        "oldest pending age {age}"
    );
    // Reclaims by the worker's temporary credentials count as that folded client.
    assert!(
        value(
            m,
            "auth_success_total",
            &[("clientId", "task-client/*"), ("scheme", "hawk")]
        )
        .is_some_and(|v| v >= 1.0),
        "{:?}",
        m.get("auth_success_total")
    );
    let duration = value(
        m,
        "http_request_duration_seconds_count",
        &[("name", "createTask"), ("status", "200")],
    );
    assert_eq!(duration, Some(8.0));

    // One log line per call, with what identifies it, and no credential anywhere.
    let calls: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "tcq::api")
        .map(|v| v["fields"].clone())
        .collect();
    let count = |name: &str, status: u64| {
        calls
            .iter()
            .filter(|f| f["name"] == name && f["status"] == status)
            .count()
    };
    assert_eq!(count("createTask", 200), 8, "{calls:#?}");
    assert_eq!(count("reportCompleted", 200), 1);
    assert_eq!(count("reportFailed", 200), 1);
    assert_eq!(count("reportException", 200), 1);
    assert_eq!(count("cancelTask", 200), 1);
    assert_eq!(count("quarantineWorker", 200), 1);
    assert_eq!(count("status", 401), 1);
    let completed = calls
        .iter()
        .find(|f| f["name"] == "reportCompleted")
        .expect("the reportCompleted line");
    assert_eq!(completed["task_id"], resolved[0].as_str());
    assert_eq!(completed["client_id"], ROOT_CLIENT_ID);
    assert_eq!(completed["method"], "POST");
    assert_eq!(completed["route"], "/task/<taskId>/runs/<runId>/completed");
    assert!(completed["duration_ms"].as_f64().is_some_and(|d| d > 0.0));
    assert!(completed["request_id"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));
    let claim_line = calls
        .iter()
        .find(|f| f["name"] == "claimWork")
        .expect("a claimWork line");
    assert_eq!(claim_line["task_queue_id"], tq.as_str());
    let failed_auth = calls
        .iter()
        .find(|f| f["status"] == 401)
        .expect("the 401 line");
    assert_eq!(failed_auth["code"], "AuthenticationFailed");
    assert_eq!(failed_auth["client_id"], "");
    for secret in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "the log holds a credential: {secret}"
        );
    }
}

async fn wait_status_at(q: &taskcluster::Queue, id: &str, pred: impl Fn(&Value) -> bool) {
    let until = Instant::now() + Duration::from_secs(claim_secs() * 5 + 10);
    loop {
        let s = q.status(id).await.expect("status")["status"].clone();
        if pred(&s) {
            return;
        }
        assert!(Instant::now() < until, "timed out on {id}: {s:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A series: its metric's name and its labels.
type SeriesKey = (String, Vec<(String, String)>);

/// Every line the deployed shape's functions printed, all files together.
fn all_logs(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).expect("the log directory").flatten() {
        out.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// The EMF lines of the functions' output as the series a scrape gives: counters summed
/// over every line, a histogram's observations counted (`<name>_count`), a gauge's latest
/// value; each with all its labels, as CloudWatch keeps them in the line.
fn emf_series(dir: &std::path::Path) -> Series {
    use shared::metrics::{Kind, METRICS};
    let mut sums: HashMap<SeriesKey, f64> = HashMap::new();
    let mut latest: HashMap<SeriesKey, (i64, f64)> = HashMap::new();
    for line in all_logs(dir).lines() {
        let Ok(doc) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(at) = doc["_aws"]["Timestamp"].as_i64() else {
            continue;
        };
        for metric in METRICS {
            let v = &doc[metric.name];
            if v.is_null() {
                continue;
            }
            let labels: Vec<(String, String)> = metric
                .labels
                .iter()
                .map(|l| {
                    (
                        l.to_string(),
                        doc[*l].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect();
            match metric.kind {
                Kind::Counter => {
                    *sums.entry((metric.name.into(), labels)).or_default() +=
                        v.as_f64().expect("a number")
                }
                Kind::Histogram(_) => {
                    let n = v.as_array().map_or(0, Vec::len) as f64;
                    *sums
                        .entry((format!("{}_count", metric.name), labels))
                        .or_default() += n
                }
                Kind::Gauge => {
                    let value = v.as_f64().expect("a number");
                    let e = latest
                        .entry((metric.name.into(), labels))
                        .or_insert((at, value));
                    if at >= e.0 {
                        *e = (at, value);
                    }
                }
            }
        }
    }
    let mut out: Series = HashMap::new();
    let latest = latest.into_iter().map(|(k, (_, v))| (k, v));
    for ((name, labels), v) in sums.into_iter().chain(latest) {
        out.entry(name)
            .or_default()
            .push((labels.into_iter().collect(), v));
    }
    out
}
