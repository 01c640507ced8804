//! The queue's metrics: declared once ([`METRICS`], upstream's names and labels plus a few of
//! our own), recorded in process ([`Metrics`]) and read out two ways:
//! - [`Metrics::prometheus`]: Prometheus text, cumulative since the process started (the
//!   local server's `/metrics`);
//! - [`Metrics::drain_emf`]: CloudWatch Embedded Metric Format lines holding what was recorded
//!   since the last drain (a Lambda function drains after each invocation, before its answer,
//!   so a frozen or recycled instance holds nothing back and no API call is made).
//!
//! Counters are recorded where the thing happens (a request answered, a task's write
//! committed); the gauges per task queue are figures read from the store
//! ([`crate::queue::figures`]) and set whole with [`Metrics::set_gauge`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Only goes up (per process).
    Counter,
    /// A value as of its last setting.
    Gauge,
    /// Observations, in these upper bounds (Prometheus buckets).
    Histogram(&'static [f64]),
}

/// How a gauge's series add up to its total (its `[]` dimension set).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rollup {
    /// The sum of the series (runs, workers).
    Sum,
    /// The largest series (an age).
    Max,
}

/// One metric, declared once.
#[derive(Debug)]
pub struct Metric {
    /// Its name (Prometheus and CloudWatch alike).
    pub name: &'static str,
    /// What it is.
    pub kind: Kind,
    /// One line on what it counts.
    pub help: &'static str,
    /// Its label names, in order (CloudWatch: its dimensions).
    pub labels: &'static [&'static str],
    /// Its CloudWatch unit.
    pub unit: &'static str,
    /// Its dimension sets as deployed (each a subset of its labels; `[]` is the total over
    /// every series). Each set and value is a CloudWatch metric of its own, billed by the
    /// hour it has data, so sets are few: Lambda already counts each endpoint's calls, errors
    /// and durations per function. Every label still goes into the EMF line, for Logs
    /// Insights.
    pub dimensions: &'static [&'static [&'static str]],
    /// A gauge's total over its series (counters and histograms add up in CloudWatch).
    pub rollup: Rollup,
}

const HTTP_LABELS: &[&str] = &["method", "name", "status", "service"];
const QUEUE_LABELS: &[&str] = &["provisionerId", "workerType"];
const REASON_LABELS: &[&str] = &["provisionerId", "workerType", "reasonResolved"];
/// Upstream's request-duration buckets, in seconds.
const HTTP_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];
/// Buckets for a wait (a pending run's for its claim, a change's for its stream), in seconds.
const WAIT_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// The total over every series.
const TOTAL: &[&str] = &[];
/// Per task queue, and the total.
const PER_QUEUE: &[&[&str]] = &[QUEUE_LABELS, TOTAL];
/// The total only.
const TOTAL_ONLY: &[&[&str]] = &[TOTAL];

const fn counter(
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    dimensions: &'static [&'static [&'static str]],
) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        help,
        labels,
        unit: "Count",
        dimensions,
        rollup: Rollup::Sum,
    }
}

const fn gauge(
    name: &'static str,
    help: &'static str,
    unit: &'static str,
    dimensions: &'static [&'static [&'static str]],
    rollup: Rollup,
) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        help,
        labels: QUEUE_LABELS,
        unit,
        dimensions,
        rollup,
    }
}

/// API calls answered (upstream's).
pub static HTTP_REQUESTS: Metric = counter(
    "http_requests_total",
    "API calls answered, by HTTP method, API method, status and service",
    HTTP_LABELS,
    &[&["status"]],
);
/// API call durations (upstream's).
pub static HTTP_DURATION: Metric = Metric {
    name: "http_request_duration_seconds",
    kind: Kind::Histogram(HTTP_BUCKETS),
    help: "Time from a request's arrival to its answer, in seconds",
    labels: HTTP_LABELS,
    unit: "Seconds",
    dimensions: &[&["service"]],
    rollup: Rollup::Sum,
};
/// Signed requests that authenticated (upstream's auth service's).
pub static AUTH_SUCCESS: Metric = counter(
    "auth_success_total",
    "Signed requests that authenticated, by clientId (task-client/* and worker/* folded) and scheme",
    &["clientId", "scheme"],
    TOTAL_ONLY,
);
/// Signed requests that failed to authenticate (upstream's auth service's).
pub static AUTH_FAILURE: Metric = counter(
    "auth_failure_total",
    "Signed requests that failed to authenticate, by reason and scheme",
    &["reason", "scheme"],
    &[&["reason"]],
);
/// Authentications answered by the deployment's auth service when it is delegated to, by
/// whether the cache answered (`hit`) or the deployment was asked (`miss`).
pub static AUTH_DELEGATED: Metric = counter(
    "auth_delegated_total",
    "Authentications delegated to the deployment's auth service, by cache hit or miss",
    &["cache"],
    &[&["cache"]],
);
/// Runs resolved completed.
pub static COMPLETED: Metric = counter(
    "queue_completed_tasks",
    "Runs resolved completed",
    QUEUE_LABELS,
    TOTAL_ONLY,
);
/// Runs resolved failed.
pub static FAILED: Metric = counter(
    "queue_failed_tasks",
    "Runs resolved failed",
    REASON_LABELS,
    TOTAL_ONLY,
);
/// Runs resolved exception, by reason (claim-expired, deadline-exceeded, canceled, ...).
pub static EXCEPTION: Metric = counter(
    "queue_exception_tasks",
    "Runs resolved exception, by reasonResolved",
    REASON_LABELS,
    &[&["reasonResolved"]],
);
/// Pending to claimed (ours).
pub static PICKUP: Metric = Metric {
    name: "queue_claim_pickup_seconds",
    kind: Kind::Histogram(WAIT_BUCKETS),
    help: "Time from a run becoming pending to its claim, in seconds",
    labels: QUEUE_LABELS,
    unit: "Seconds",
    dimensions: TOTAL_ONLY,
    rollup: Rollup::Sum,
};
/// How far behind their tables' streams the stream-triggered jobs are (ours; deployed only).
pub static STREAM_LAG: Metric = Metric {
    name: "queue_stream_lag_seconds",
    kind: Kind::Histogram(WAIT_BUCKETS),
    help: "Time from a table change to the end of the stream batch that handled it, by job (the publisher's: an event's age once the broker confirmed it), in seconds",
    labels: &["job"],
    unit: "Seconds",
    dimensions: &[&["job"]],
    rollup: Rollup::Sum,
};
/// How long the oldest event a publisher could not deliver has waited (ours): set by the
/// stream publisher when a batch fails (its oldest change's age; deployed) and by the outbox
/// sweeper on each pass (the oldest held event's wait, 0 once none waits).
pub static UNPUBLISHED_AGE: Metric = Metric {
    name: "queue_unpublished_event_age_seconds",
    kind: Kind::Gauge,
    help: "Age of the oldest event a publisher found undelivered, in seconds (0 when none waits)",
    labels: &["job"],
    unit: "Seconds",
    dimensions: &[&["job"]],
    rollup: Rollup::Max,
};
/// Pending runs per task queue (upstream's gauge).
pub static PENDING: Metric = gauge(
    "queue_pending_tasks",
    "Runs pending in the task queue",
    "Count",
    PER_QUEUE,
    Rollup::Sum,
);
/// Claimed runs per task queue (upstream's gauge).
pub static CLAIMED: Metric = gauge(
    "queue_claimed_tasks",
    "Runs claimed from the task queue",
    "Count",
    PER_QUEUE,
    Rollup::Sum,
);
/// The oldest pending run's age per task queue (ours).
pub static OLDEST_PENDING: Metric = gauge(
    "queue_oldest_pending_task_age_seconds",
    "Age of the task queue's oldest pending run, in seconds (0 when none waits)",
    "Seconds",
    PER_QUEUE,
    Rollup::Max,
);
/// Workers seen and not expired (upstream's gauge).
pub static WORKERS: Metric = gauge(
    "queue_workers_total",
    "Workers of the task queue seen recently enough not to have expired",
    "Count",
    PER_QUEUE,
    Rollup::Sum,
);
/// Workers running a task (upstream's gauge: one per claimed run).
pub static RUNNING_WORKERS: Metric = gauge(
    "queue_running_workers",
    "Workers of the task queue running a task (one per claimed run)",
    "Count",
    TOTAL_ONLY,
    Rollup::Sum,
);
/// Workers neither running nor quarantined (upstream's gauge).
pub static IDLE_WORKERS: Metric = gauge(
    "queue_idle_workers",
    "Workers of the task queue neither running a task nor quarantined",
    "Count",
    TOTAL_ONLY,
    Rollup::Sum,
);
/// Quarantined workers (upstream's gauge).
pub static QUARANTINED_WORKERS: Metric = gauge(
    "queue_quarantined_workers",
    "Workers of the task queue in quarantine",
    "Count",
    TOTAL_ONLY,
    Rollup::Sum,
);

/// Every metric, in the order they are rendered.
pub static METRICS: &[&Metric] = &[
    &HTTP_REQUESTS,
    &HTTP_DURATION,
    &AUTH_SUCCESS,
    &AUTH_FAILURE,
    &AUTH_DELEGATED,
    &COMPLETED,
    &FAILED,
    &EXCEPTION,
    &PICKUP,
    &STREAM_LAG,
    &UNPUBLISHED_AGE,
    &PENDING,
    &CLAIMED,
    &OLDEST_PENDING,
    &WORKERS,
    &RUNNING_WORKERS,
    &IDLE_WORKERS,
    &QUARANTINED_WORKERS,
];

/// Most observations one EMF document carries per metric (CloudWatch's limit).
const EMF_MAX_VALUES: usize = 100;

/// One series' value.
#[derive(Debug, Clone, Default)]
struct Series {
    /// Counter or gauge value.
    value: f64,
    /// Histogram: observations per bucket (not cumulative), then the `+Inf` one.
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
    /// Observations since the last EMF drain (kept only when draining).
    recent: Vec<f64>,
}

/// A series: its metric's name (the map's order) and its label values.
type Key = (&'static str, Vec<String>);
type Table = BTreeMap<Key, (&'static Metric, Series)>;

/// The metrics one process recorded.
#[derive(Debug, Default)]
pub struct Metrics {
    series: Mutex<Table>,
    /// True where [`Metrics::drain_emf`] reads them (a Lambda function): observations are
    /// kept as they are until the drain.
    keeps_observations: bool,
    /// Deploy the dimension set per task queue (see [`Metric::dimensions`]).
    per_queue: bool,
}

impl Metrics {
    /// Metrics read as Prometheus text (cumulative).
    pub fn new() -> Self {
        Self::default()
    }

    /// Metrics drained as EMF lines after each invocation; `per_queue`: with the dimension
    /// set per task queue (a CloudWatch metric per task queue and gauge), else totals only
    /// (the per-queue figures stay in the lines, for Logs Insights).
    pub fn draining(per_queue: bool) -> Self {
        Metrics {
            keeps_observations: true,
            per_queue,
            ..Self::default()
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        // A panic while holding the lock leaves numbers, never a broken invariant.
        let mut g = self.series.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    fn key(metric: &'static Metric, labels: &[&str]) -> Key {
        debug_assert_eq!(labels.len(), metric.labels.len(), "{}", metric.name);
        (metric.name, labels.iter().map(|l| l.to_string()).collect())
    }

    /// Adds `n` to a counter.
    pub fn add(&self, metric: &'static Metric, labels: &[&str], n: f64) {
        let key = Self::key(metric, labels);
        self.with(|m| m.entry(key).or_insert((metric, Series::default())).1.value += n);
    }

    /// Records one observation of a histogram.
    pub fn observe(&self, metric: &'static Metric, labels: &[&str], v: f64) {
        let Kind::Histogram(bounds) = metric.kind else {
            return;
        };
        let key = Self::key(metric, labels);
        let keep = self.keeps_observations;
        self.with(|m| {
            let s = &mut m.entry(key).or_insert((metric, Series::default())).1;
            if s.buckets.is_empty() {
                s.buckets = vec![0; bounds.len() + 1];
            }
            let i = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
            s.buckets[i] += 1;
            s.sum += v;
            s.count += 1;
            if keep {
                s.recent.push(v);
            }
        });
    }

    /// Sets every series of a gauge at once: series not in `values` are dropped (a task queue
    /// that emptied and expired leaves no stale figure behind). Drained as EMF, its total
    /// ([`Metric::rollup`]) is kept too, as the series without labels: CloudWatch can not
    /// add up gauges, whose lines may come twice in a period or not at all.
    pub fn set_gauge(&self, metric: &'static Metric, values: Vec<(Vec<String>, f64)>) {
        let total = values.iter().map(|(_, v)| *v);
        let total = match metric.rollup {
            Rollup::Sum => total.sum(),
            Rollup::Max => total.fold(0.0, f64::max),
        };
        let keep_total = self.keeps_observations && metric.dimensions.contains(&TOTAL);
        self.with(|m| {
            m.retain(|(name, _), _| *name != metric.name);
            if keep_total {
                let s = Series {
                    value: total,
                    ..Series::default()
                };
                m.insert((metric.name, vec![]), (metric, s));
            }
            for (labels, value) in values {
                let s = Series {
                    value,
                    ..Series::default()
                };
                m.insert((metric.name, labels), (metric, s));
            }
        });
    }

    /// The value of a counter or gauge series (0 when never recorded); a histogram's count.
    pub fn value(&self, metric: &'static Metric, labels: &[&str]) -> f64 {
        let key = Self::key(metric, labels);
        self.with(|m| match (metric.kind, m.get(&key)) {
            (_, None) => 0.0,
            (Kind::Histogram(_), Some((_, s))) => s.count as f64,
            (_, Some((_, s))) => s.value,
        })
    }

    /// Everything recorded, as Prometheus text (exposition format 0.0.4).
    pub fn prometheus(&self) -> String {
        let snapshot = self.with(|m| m.clone());
        let mut out = String::new();
        for metric in METRICS {
            let kind = match metric.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram(_) => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}", metric.name, metric.help);
            let _ = writeln!(out, "# TYPE {} {kind}", metric.name);
            let series = snapshot.range((metric.name, vec![])..);
            for ((_, values), (_, s)) in series.take_while(|(_, (m, _))| std::ptr::eq(*m, *metric))
            {
                let labels = |extra: Option<String>| {
                    let mut parts: Vec<String> = metric
                        .labels
                        .iter()
                        .zip(values)
                        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                        .collect();
                    parts.extend(extra);
                    if parts.is_empty() {
                        String::new()
                    } else {
                        format!("{{{}}}", parts.join(","))
                    }
                };
                match metric.kind {
                    Kind::Histogram(bounds) => {
                        let mut cumulative = 0;
                        for (i, n) in s.buckets.iter().enumerate() {
                            cumulative += n;
                            let le = bounds
                                .get(i)
                                .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
                            let _ = writeln!(
                                out,
                                "{}_bucket{} {cumulative}",
                                metric.name,
                                labels(Some(format!("le=\"{le}\"")))
                            );
                        }
                        let _ = writeln!(out, "{}_sum{} {}", metric.name, labels(None), s.sum);
                        let _ = writeln!(out, "{}_count{} {}", metric.name, labels(None), s.count);
                    }
                    _ => {
                        let _ = writeln!(out, "{}{} {}", metric.name, labels(None), s.value);
                    }
                }
            }
        }
        out
    }

    /// What was recorded since the last drain, as CloudWatch EMF documents under
    /// `namespace`, then forgotten: one JSON line per set of labels (its dimensions), holding
    /// every metric recorded with those labels. Counters carry their increase, gauges their
    /// value, histograms their observations (at most [`EMF_MAX_VALUES`] per line; more go
    /// to further lines).
    pub fn drain_emf(&self, namespace: &str, timestamp_ms: i64) -> Vec<String> {
        type Group = Vec<(&'static Metric, Vec<serde_json::Value>)>;
        let taken = self.with(std::mem::take);
        let mut groups: BTreeMap<(&'static [&'static str], Vec<String>), Group> = BTreeMap::new();
        for ((_, values), (metric, s)) in taken {
            let parts = match metric.kind {
                Kind::Histogram(_) => s
                    .recent
                    .chunks(EMF_MAX_VALUES)
                    .map(|c| serde_json::json!(c))
                    .collect(),
                _ => vec![serde_json::json!(s.value)],
            };
            // A gauge's total has no labels (see [`Metrics::set_gauge`]).
            let labels = match values.is_empty() {
                true => TOTAL,
                false => metric.labels,
            };
            groups
                .entry((labels, values))
                .or_default()
                .push((metric, parts));
        }
        let mut out = Vec::new();
        for ((labels, values), mut metrics) in groups {
            // Line `i` holds each metric's `i`th part (a histogram's further observations).
            for i in 0.. {
                let line: Vec<(&Metric, serde_json::Value)> = metrics
                    .iter_mut()
                    .filter_map(|(m, parts)| {
                        let part = parts.get_mut(i)?;
                        Some((*m, std::mem::take(part)))
                    })
                    .collect();
                if line.is_empty() {
                    break;
                }
                // One directive per distinct set of dimension sets.
                let mut directives: Vec<(Vec<&[&str]>, Vec<serde_json::Value>)> = vec![];
                for (m, _) in &line {
                    // A gauge's series declare its per-queue set, its total line the total.
                    let gauge = m.kind == Kind::Gauge;
                    let sets: Vec<&[&str]> = m
                        .dimensions
                        .iter()
                        .copied()
                        .filter(|d| self.per_queue || *d != QUEUE_LABELS)
                        .filter(|d| !gauge || (*d == TOTAL) == labels.is_empty())
                        .collect();
                    if sets.is_empty() {
                        continue;
                    }
                    let declared = serde_json::json!({ "Name": m.name, "Unit": m.unit });
                    match directives.iter_mut().find(|(d, _)| *d == sets) {
                        Some((_, names)) => names.push(declared),
                        None => directives.push((sets, vec![declared])),
                    }
                }
                let directives: Vec<serde_json::Value> = directives
                    .into_iter()
                    .map(|(sets, names)| {
                        crate::json::object([
                            ("Namespace", namespace.into()),
                            ("Dimensions", serde_json::json!(sets)),
                            ("Metrics", serde_json::Value::Array(names)),
                        ])
                    })
                    .collect();
                let mut doc = serde_json::Map::new();
                doc.insert(
                    "_aws".into(),
                    crate::json::object([
                        ("Timestamp", timestamp_ms.into()),
                        ("CloudWatchMetrics", serde_json::Value::Array(directives)),
                    ]),
                );
                for (k, v) in labels.iter().zip(&values) {
                    doc.insert(k.to_string(), serde_json::json!(v));
                }
                for (m, v) in line {
                    doc.insert(m.name.into(), v);
                }
                out.push(serde_json::Value::Object(doc).to_string());
            }
        }
        out
    }
}

/// Escapes a label value for the Prometheus text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A task queue's two labels, as upstream splits its id.
pub fn queue_labels(task_queue_id: &str) -> [&str; 2] {
    match task_queue_id.split_once('/') {
        Some((p, w)) => [p, w],
        None => [task_queue_id, ""],
    }
}

/// The clientId label of `auth_success_total`: per-task and per-worker clients folded into
/// one series each, as upstream does, so that the series stay few.
pub fn client_label(client_id: &str) -> &str {
    if client_id.starts_with("task-client/") {
        "task-client/*"
    } else if client_id.starts_with("worker/") {
        "worker/*"
    } else {
        client_id
    }
}

/// The reason label of `auth_failure_total`, read from the failure's message as upstream
/// reads it.
pub fn failure_reason(message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.contains("client") && m.contains("not found") {
        "client_not_found"
    } else if m.contains("signature") || m.contains("mac") {
        "invalid_signature"
    } else if m.contains("timestamp") || m.contains("time") {
        "timestamp_error"
    } else if m.contains("certificate") {
        "certificate_error"
    } else if m.contains("ext") {
        "ext_validation_error"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
    }

    #[test]
    fn prometheus_text_is_cumulative_and_escaped() {
        let m = Metrics::new();
        m.add(&COMPLETED, &["p", "w"], 1.0);
        m.add(&COMPLETED, &["p", "w"], 2.0);
        m.add(&EXCEPTION, &["p", "w\"x", "claim-expired"], 1.0);
        m.observe(&PICKUP, &["p", "w"], 0.2);
        m.observe(&PICKUP, &["p", "w"], 100.0);
        let text = m.prometheus();
        assert!(text.contains("queue_completed_tasks{provisionerId=\"p\",workerType=\"w\"} 3\n"));
        assert!(text.contains(
            "queue_exception_tasks{provisionerId=\"p\",workerType=\"w\\\"x\",reasonResolved=\"claim-expired\"} 1\n"
        ));
        assert!(text.contains(
            "queue_claim_pickup_seconds_bucket{provisionerId=\"p\",workerType=\"w\",le=\"0.25\"} 1\n"
        ));
        assert!(text.contains(
            "queue_claim_pickup_seconds_bucket{provisionerId=\"p\",workerType=\"w\",le=\"+Inf\"} 2\n"
        ));
        assert!(text.contains(
            "queue_claim_pickup_seconds_count{provisionerId=\"p\",workerType=\"w\"} 2\n"
        ));
        assert!(text.contains("# TYPE http_request_duration_seconds histogram\n"));
        // Nothing is forgotten by reading.
        assert_eq!(m.value(&COMPLETED, &["p", "w"]), 3.0);
    }

    #[test]
    fn gauges_are_set_whole() {
        let m = Metrics::new();
        let l = |p: &str| vec![p.to_string(), "w".to_string()];
        m.set_gauge(&PENDING, vec![(l("a"), 2.0), (l("b"), 1.0)]);
        m.set_gauge(&PENDING, vec![(l("b"), 5.0)]);
        assert_eq!(m.value(&PENDING, &["a", "w"]), 0.0);
        assert_eq!(m.value(&PENDING, &["b", "w"]), 5.0);
    }

    #[test]
    fn emf_lines_carry_what_was_recorded_since_the_last_drain() {
        let m = Metrics::draining(true);
        m.add(&COMPLETED, &["p", "w"], 2.0);
        m.observe(&HTTP_DURATION, &["POST", "claimWork", "200", "queue"], 0.5);
        m.observe(&HTTP_DURATION, &["POST", "claimWork", "200", "queue"], 0.25);
        m.add(&HTTP_REQUESTS, &["POST", "claimWork", "200", "queue"], 2.0);
        for _ in 0..EMF_MAX_VALUES {
            m.observe(&PICKUP, &["p", "w"], 1.0);
        }
        m.observe(&PICKUP, &["p", "w"], 2.0);
        let lines = m.drain_emf("tcq", 1_700_000_000_000);
        // One line per label set; the 101st pickup on a line of its own.
        assert_eq!(lines.len(), 3, "{lines:#?}");
        let docs: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        let completed = docs
            .iter()
            .find(|d| d.get("queue_completed_tasks").is_some())
            .expect("completed");
        assert_eq!(completed["queue_completed_tasks"], 2.0);
        assert_eq!(completed["provisionerId"], "p");
        let cw = &completed["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], "tcq");
        // Completions and pickups deploy their totals only; the labels stay in the line.
        assert_eq!(cw["Dimensions"], serde_json::json!([[]]));
        let duration = docs
            .iter()
            .find(|d| d.get("http_request_duration_seconds").is_some())
            .expect("duration");
        assert_eq!(
            duration["http_request_duration_seconds"],
            serde_json::json!([0.5, 0.25])
        );
        assert_eq!(duration["name"], "claimWork");
        assert!(m.drain_emf("tcq", 0).is_empty(), "drained");
    }

    #[test]
    fn gauges_print_their_queues_and_their_total_on_lines_of_their_own() {
        for per_queue in [true, false] {
            let m = Metrics::draining(per_queue);
            let l = |p: &str| vec![p.to_string(), "w".to_string()];
            m.set_gauge(&PENDING, vec![(l("a"), 3.0), (l("b"), 4.0)]);
            m.set_gauge(&OLDEST_PENDING, vec![(l("a"), 30.0), (l("b"), 5.0)]);
            let docs: Vec<serde_json::Value> = m
                .drain_emf("tcq", 0)
                .iter()
                .map(|l| serde_json::from_str(l).expect("JSON"))
                .collect();
            assert_eq!(docs.len(), 3, "{docs:#?}");
            let total = docs
                .iter()
                .find(|d| d.get("provisionerId").is_none())
                .expect("the totals line");
            assert_eq!(total["queue_pending_tasks"], 7.0, "summed");
            assert_eq!(
                total["queue_oldest_pending_task_age_seconds"], 30.0,
                "the largest"
            );
            let cw = &total["_aws"]["CloudWatchMetrics"];
            assert_eq!(cw[0]["Dimensions"], serde_json::json!([[]]));
            assert_eq!(cw[0]["Metrics"].as_array().map(Vec::len), Some(2));
            let a = docs
                .iter()
                .find(|d| d["provisionerId"] == "a")
                .expect("queue a");
            assert_eq!(a["queue_pending_tasks"], 3.0);
            let declared = &a["_aws"]["CloudWatchMetrics"];
            match per_queue {
                true => assert_eq!(
                    declared[0]["Dimensions"],
                    serde_json::json!([["provisionerId", "workerType"]])
                ),
                // The figures stay in the line, for Logs Insights, but make no metric.
                false => assert_eq!(declared, &serde_json::json!([])),
            }
        }
    }

    #[test]
    fn labels_fold_as_upstream() {
        assert_eq!(queue_labels("prov/wt"), ["prov", "wt"]);
        assert_eq!(client_label("task-client/abc/0/on/x"), "task-client/*");
        assert_eq!(client_label("worker/g/i"), "worker/*");
        assert_eq!(client_label("static/root"), "static/root");
        assert_eq!(failure_reason("Client \"x\" not found"), "client_not_found");
        assert_eq!(failure_reason("Bad mac"), "invalid_signature");
        assert_eq!(failure_reason("Stale timestamp"), "timestamp_error");
        assert_eq!(failure_reason("Unknown"), "other");
    }
}
