//! The task-graph scheduler (issue 9, /api/scheduler/v1/) end to end: graphs of tasks run on the
//! queue in dependency order by a simulated worker (the official client's claimWork and
//! reportCompleted/reportFailed), reruns, blocking, extension, `$subs`, input errors and scopes;
//! the scheduler's and the queue's messages about a graph checked on real RabbitMQ exchanges.
//!
//! The same tests run on SQLite and on LocalStack's DynamoDB (`TCQ_TEST_BACKEND=localstack`),
//! so every wait is a poll with a generous limit, never a sleep standing in for an assertion.
//!
//! RabbitMQ: the servers publish under the default exchange names
//! (`exchange/taskcluster-queue/v1/…`, `exchange/taskcluster-scheduler/v1/…`); every binding
//! names a fresh taskGraphId, so tests running at once never see each other's messages.

use crate::common::*;
use blackbox::amqp::{amqp_url, broker_addr, Msg};
use blackbox::scheduler::*;
use blackbox::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};
use taskcluster::Credentials;

/// Limit of every wait on the scheduler's reactions, claims and messages (LocalStack on a loaded
/// two-core machine can take seconds per step).
const WAIT: Duration = Duration::from_secs(90);

/// How long to keep listening for unexpected extra messages once the expected ones arrived.
const QUIET: Duration = Duration::from_secs(2);

/// A server that also publishes to the machine's RabbitMQ under the default exchange names.
async fn amqp_app() -> TestServer {
    spawn_app_with(|c| c.amqp_url = Some(amqp_url(&broker_addr()))).await
}

/// A createTask body for a graph node on `tq`, named `name`.
fn graph_task(tq: &str, name: &str) -> Value {
    let mut d = task_def(tq);
    d["metadata"]["name"] = json!(name);
    d
}

/// Graph metadata for create bodies.
fn graph_metadata(name: &str) -> Value {
    json!({
        "name": name,
        "description": "a task graph of the black-box suite",
        "owner": "tests@example.com",
        "source": "https://example.com/tests"
    })
}

/// The body of a 200 reply; panics with the reply otherwise.
#[track_caller]
fn ok(what: &str, reply: (u16, Value)) -> Value {
    assert_eq!(reply.0, 200, "{what}: expected 200, got {:#}", reply.1);
    reply.1
}

/// Asserts an error reply's status and code (at the caller's line) and Taskcluster's error
/// shape.
#[track_caller]
fn expect_error(got: &(u16, Value), status: u16, code: &str) {
    assert_eq!(got.0, status, "expected {status} {code}, got {:#}", got.1);
    assert_eq!(
        got.1["code"], code,
        "expected {status} {code}, got {:#}",
        got.1
    );
    assert_error_shape(&got.1);
}

/// Asserts the `status` of a createTaskGraph/extendTaskGraph/status/info/inspect reply.
#[track_caller]
fn assert_graph_status(reply: &Value, graph_id: &str, state: &str, routing: &str) {
    let s = &reply["status"];
    assert_eq!(s["taskGraphId"], graph_id, "{reply:#}");
    assert_eq!(s["schedulerId"], SCHEDULER_ID, "{reply:#}");
    assert_eq!(s["state"], state, "{reply:#}");
    assert_eq!(s["routing"], routing, "{reply:#}");
}

/// The nodes of an inspect reply by label, asserting that they come in label order.
#[track_caller]
fn nodes(inspect: &Value) -> BTreeMap<String, Value> {
    let list = inspect["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("inspect has no tasks array: {inspect:#}"));
    let labels: Vec<String> = list
        .iter()
        .map(|n| n["label"].as_str().expect("label").to_string())
        .collect();
    let mut sorted = labels.clone();
    sorted.sort();
    assert_eq!(labels, sorted, "inspect lists nodes in label order");
    list.iter()
        .map(|n| {
            (
                n["label"].as_str().unwrap_or_default().to_string(),
                n.clone(),
            )
        })
        .collect()
}

/// label → taskId of an inspect reply (every taskId a distinct slugid).
#[track_caller]
fn task_ids(inspect: &Value) -> BTreeMap<String, String> {
    let ids: BTreeMap<String, String> = nodes(inspect)
        .into_iter()
        .map(|(l, n)| {
            let id = n["taskId"].as_str().expect("taskId").to_string();
            assert!(
                id.len() == 22
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "taskId of {l} is a slugid: {id:?}"
            );
            (l, id)
        })
        .collect();
    let distinct: HashSet<&String> = ids.values().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "one fresh taskId per label: {ids:?}"
    );
    ids
}

/// A JSON array of strings, sorted.
#[track_caller]
fn sorted(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().expect("string").to_string())
        .collect();
    out.sort();
    out
}

/// Owned, sorted strings.
fn set<S: AsRef<str>>(ids: &[S]) -> Vec<String> {
    let mut out: Vec<String> = ids.iter().map(|s| s.as_ref().to_string()).collect();
    out.sort();
    out
}

/// Polls `f` every 100 ms until it yields `Some`; panics after [`WAIT`] with the last value
/// `f` described.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let until = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < until,
                "timed out waiting for {what}; last: {last}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the graph's state is `state`; returns the status reply.
async fn wait_graph_state(s: &Scheduler, graph_id: &str, state: &str) -> Value {
    eventually(&format!("graph {graph_id} to be {state}"), || async {
        let r = ok("status", s.status(graph_id).await);
        if r["status"]["state"] == state {
            Ok(r)
        } else {
            Err(r.to_string())
        }
    })
    .await
}

/// Waits until inspectTask of `task_id` satisfies `pred`; returns the node.
async fn wait_node(
    s: &Scheduler,
    graph_id: &str,
    task_id: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, || async {
        let n = ok("inspectTask", s.inspect_task(graph_id, task_id).await);
        if pred(&n) {
            Ok(n)
        } else {
            Err(n.to_string())
        }
    })
    .await
}

/// Claims from `tq` until each of `want` (label, taskId) has been claimed once, as a worker
/// would; panics if any other task (or one of them twice) is handed out meanwhile. Returns the
/// claimed (taskId, runId) in claim order.
async fn claim_exactly(app: &TestServer, tq: &str, want: &[(&str, &str)]) -> Vec<(String, u64)> {
    let q = app.queue();
    let until = Instant::now() + WAIT;
    let mut got: Vec<(String, u64)> = vec![];
    while got.len() < want.len() {
        let n = (want.len() - got.len()) as u32;
        let r = q
            .claimWork(tq, &worker("wg", "w1", n))
            .await
            .unwrap_or_else(|e| panic!("claimWork failed: {e:#}"));
        for t in r["tasks"].as_array().cloned().unwrap_or_default() {
            let id = t["status"]["taskId"].as_str().expect("taskId").to_string();
            let run = t["runId"].as_u64().expect("runId");
            let label = want
                .iter()
                .find(|(_, w)| *w == id)
                .map(|(l, _)| *l)
                .unwrap_or_else(|| {
                    panic!("claimed {id} (run {run}) while only {want:?} may be claimable")
                });
            assert!(
                !got.iter().any(|(g, _)| *g == id),
                "{label} ({id}) was handed out twice"
            );
            got.push((id, run));
        }
        assert!(
            got.len() == want.len() || Instant::now() < until,
            "timed out claiming {want:?}; claimed {got:?}"
        );
    }
    got
}

/// Asserts that a task exists on the queue and has never been scheduled.
async fn assert_never_scheduled(app: &TestServer, label: &str, id: &str) {
    let st = status(app, id).await;
    assert_eq!(st["state"], "unscheduled", "{label}: {st:#}");
    assert_eq!(
        st["runs"].as_array().map(Vec::len),
        Some(0),
        "{label} has no runs: {st:#}"
    );
}

/// Every taskId of a queue task group.
async fn group_members(app: &TestServer, group: &str) -> Vec<String> {
    let q = app.queue();
    let mut out = vec![];
    let mut token: Option<String> = None;
    loop {
        let r = q
            .listTaskGroup(group, token.as_deref(), None)
            .await
            .unwrap_or_else(|e| panic!("listTaskGroup({group}) failed: {e:#}"));
        for t in r["tasks"].as_array().cloned().unwrap_or_default() {
            out.push(
                t["status"]["taskId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        match r["continuationToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    out.sort();
    out
}

/// Asserts that nothing exists for `graph_id`: no graph, no queue task group.
async fn assert_nothing_created(app: &TestServer, s: &Scheduler, graph_id: &str, case: &str) {
    let st = s.status(graph_id).await;
    assert_eq!(
        st.0, 404,
        "{case}: graph status should be 404, got {:#}",
        st.1
    );
    expect_error(&st, 404, "ResourceNotFound");
    assert_eq!(
        err_status(app.queue().listTaskGroup(graph_id, None, None).await),
        404,
        "{case}: no task of the graph reached the queue"
    );
}

/// Asserts a scheduler message: exchange, key, no CCs, persistent JSON, body.
#[track_caller]
fn assert_graph_message(m: &Msg, short_name: &str, graph_id: &str, state: &str, routing: &str) {
    assert_eq!(short(m), short_name, "{m:#?}");
    assert_eq!(
        m.routing_key,
        graph_routing_key(graph_id, routing),
        "{m:#?}"
    );
    assert!(m.cc.is_empty(), "scheduler messages have no CCs: {m:#?}");
    assert!(m.persistent, "persistent delivery: {m:#?}");
    assert_eq!(m.content_type, "application/json", "{m:#?}");
    assert_eq!(m.payload["version"], 1, "{m:#?}");
    let s = &m.payload["status"];
    assert_eq!(s["taskGraphId"], graph_id, "{m:#?}");
    assert_eq!(s["schedulerId"], SCHEDULER_ID, "{m:#?}");
    assert_eq!(s["state"], state, "{m:#?}");
    assert_eq!(s["routing"], routing, "{m:#?}");
}

/// The scheduler's messages among `msgs`.
fn graph_msgs(msgs: &[Msg]) -> Vec<&Msg> {
    msgs.iter().filter(|m| is_scheduler_msg(m)).collect()
}

/// The short exchange names of the scheduler's messages among `msgs`, sorted.
fn graph_msg_names(msgs: &[Msg]) -> Vec<String> {
    let mut names: Vec<String> = graph_msgs(msgs)
        .iter()
        .map(|m| short(m).to_string())
        .collect();
    names.sort();
    names
}

/// The queue's messages about `task_id` among `msgs`, as (short exchange, runId) in order.
fn task_msgs(msgs: &[Msg], task_id: &str) -> Vec<(String, Option<u64>)> {
    msgs.iter()
        .filter(|m| !is_scheduler_msg(m) && m.payload["status"]["taskId"] == task_id)
        .map(|m| (short(m).to_string(), m.payload["runId"].as_u64()))
        .collect()
}

/// How many of the queue's `short_name` messages about `task_id` are among `msgs`.
fn count_of(msgs: &[Msg], task_id: &str, short_name: &str) -> usize {
    task_msgs(msgs, task_id)
        .iter()
        .filter(|(s, _)| s == short_name)
        .count()
}

/// The queue's messages in the lifecycle of a task that ran once to completion.
fn ran_once() -> Vec<(String, Option<u64>)> {
    vec![
        ("task-defined".into(), None),
        ("task-pending".into(), Some(0)),
        ("task-running".into(), Some(0)),
        ("task-completed".into(), Some(0)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_graph_runs_in_dependency_order_and_finishes() {
    let broker = graph_broker().await;
    let app = amqp_app().await;
    let s = Scheduler::root(&app);
    let tq = task_queue_id();
    let gid = slugid();
    let every_exchange = [scheduler_exchanges(), queue_exchanges()].concat();
    // Both services' primary keys about the graph, and the CC the queue adds for its tasks.
    let by_graph = bind_full(&broker, &every_exchange, &graph_pattern(&gid)).await;
    let by_route = bind_full(
        &broker,
        &every_exchange,
        &format!("route.{SCHEDULER_ID}.{gid}.#"),
    )
    .await;

    let body = json!({
        "routing": "r1",
        "metadata": graph_metadata("diamond"),
        "tags": {"shape": "diamond"},
        "tasks": {
            "A": node(&[], 0, graph_task(&tq, "A")),
            "B": node(&["A"], 0, graph_task(&tq, "B")),
            "C": node(&["A"], 0, graph_task(&tq, "C")),
            "D": node(&["B", "C"], 0, graph_task(&tq, "D")),
        }
    });
    let created = ok("createTaskGraph", s.create(&gid, &body).await);
    assert_graph_status(&created, &gid, "running", "r1");
    let info = ok("info", s.info(&gid).await);
    assert_graph_status(&info, &gid, "running", "r1");
    assert_eq!(info["metadata"], body["metadata"], "{info:#}");
    assert_eq!(info["tags"], body["tags"], "{info:#}");

    let inspect = ok("inspect", s.inspect(&gid).await);
    assert_graph_status(&inspect, &gid, "running", "r1");
    assert_eq!(inspect["metadata"], body["metadata"]);
    assert_eq!(inspect["tags"], body["tags"]);
    let ids = task_ids(&inspect);
    assert_eq!(
        ids.keys().cloned().collect::<Vec<_>>(),
        ["A", "B", "C", "D"]
    );
    let (a, b, c, d) = (&ids["A"], &ids["B"], &ids["C"], &ids["D"]);
    let n = nodes(&inspect);
    let expect = [
        ("A", vec![], set(&[b, c])),
        ("B", set(&[a]), set(&[d])),
        ("C", set(&[a]), set(&[d])),
        ("D", set(&[b, c]), vec![]),
    ];
    for (label, requires, dependents) in &expect {
        let node = &n[*label];
        assert_eq!(node["label"], *label);
        assert_eq!(sorted(&node["requires"]), *requires, "{label}: {node:#}");
        assert_eq!(
            sorted(&node["dependents"]),
            *dependents,
            "{label}: {node:#}"
        );
        assert_eq!(node["reruns"], 0, "{label}: {node:#}");
        assert_eq!(node["rerunsLeft"], 0, "{label}: {node:#}");
    }
    // Nothing B, C or D need has completed: they wait, unscheduled, on the queue too.
    for label in ["B", "C", "D"] {
        let node = &n[label];
        assert_eq!(node["state"], "unscheduled", "{label}: {node:#}");
        assert_eq!(
            sorted(&node["requiresLeft"]),
            sorted(&node["requires"]),
            "{label}: {node:#}"
        );
        assert_never_scheduled(&app, label, &ids[label]).await;
    }
    assert_eq!(
        ok("inspectTask", s.inspect_task(&gid, b).await),
        n["B"],
        "inspectTask gives the node inspect lists"
    );

    // A alone is claimable; B and C stay unscheduled while A runs.
    claim_exactly(&app, &tq, &[("A", a)]).await;
    for label in ["B", "C", "D"] {
        assert_never_scheduled(&app, label, &ids[label]).await;
    }
    complete(&app, a, 0).await;

    // Then B and C (and not D).
    claim_exactly(&app, &tq, &[("B", b), ("C", c)]).await;
    assert_never_scheduled(&app, "D", d).await;
    complete(&app, b, 0).await;
    // The scheduler marks B's node completed, then takes B off its dependents: wait for the
    // latter. D still waits for C.
    let dn = wait_node(&s, &gid, d, "D to stop waiting for B", |n| {
        !n["requiresLeft"]
            .as_array()
            .is_some_and(|l| l.contains(&json!(b)))
    })
    .await;
    let bn = ok("inspectTask B", s.inspect_task(&gid, b).await);
    assert_eq!(bn["state"], "completed", "{bn:#}");
    assert_eq!(dn["state"], "unscheduled", "{dn:#}");
    assert_eq!(sorted(&dn["requiresLeft"]), set(&[c]), "{dn:#}");
    assert_never_scheduled(&app, "D", d).await;
    assert_graph_status(&ok("status", s.status(&gid).await), &gid, "running", "r1");
    complete(&app, c, 0).await;

    // Finally D.
    claim_exactly(&app, &tq, &[("D", d)]).await;
    complete(&app, d, 0).await;

    let finished = wait_graph_state(&s, &gid, "finished").await;
    assert_graph_status(&finished, &gid, "finished", "r1");
    let inspect = ok("inspect", s.inspect(&gid).await);
    assert_graph_status(&inspect, &gid, "finished", "r1");
    for (label, node) in nodes(&inspect) {
        assert_eq!(node["state"], "completed", "{label}: {node:#}");
        assert_eq!(
            sorted(&node["requiresLeft"]),
            Vec::<String>::new(),
            "{label}"
        );
        let st = status(&app, &ids[&label]).await;
        assert_eq!(st["state"], "completed", "{label}: {st:#}");
        assert_eq!(
            st["runs"].as_array().map(Vec::len),
            Some(1),
            "{label}: {st:#}"
        );
    }

    // RabbitMQ, the graph's binding: the scheduler's running and finished, and every queue
    // message of the four tasks (CC'ed to the graph's route).
    let all = [a, b, c, d];
    let got = collect_until(&broker, &by_graph, WAIT, QUIET, |ms| {
        graph_msgs(ms)
            .iter()
            .any(|m| short(m) == "task-graph-finished")
            && all.iter().all(|id| count_of(ms, id, "task-completed") >= 1)
    })
    .await;
    assert_eq!(
        graph_msg_names(&got),
        ["task-graph-finished", "task-graph-running"],
        "exactly one running and one finished message"
    );
    for m in graph_msgs(&got) {
        let state = if short(m) == "task-graph-running" {
            "running"
        } else {
            "finished"
        };
        assert_graph_message(m, short(m), &gid, state, "r1");
    }
    let route_cc = format!("route.{}", graph_route(&gid, "r1"));
    assert_eq!(route_cc, format!("route.task-graph-scheduler.{gid}.r1"));
    let (prov, wt) = tq.split_once('/').expect("provisioner/workerType");
    for m in got.iter().filter(|m| !is_scheduler_msg(m)) {
        assert!(m.cc.contains(&route_cc), "{route_cc} among the CCs: {m:#?}");
        assert_eq!(m.payload["status"]["schedulerId"], SCHEDULER_ID, "{m:#?}");
        assert_eq!(m.payload["status"]["taskGroupId"], gid.as_str(), "{m:#?}");
    }
    for (label, id) in &ids {
        assert_eq!(
            task_msgs(&got, id),
            ran_once(),
            "{label}'s messages, in order"
        );
        let done = got
            .iter()
            .find(|m| short(m) == "task-completed" && m.payload["status"]["taskId"] == id.as_str())
            .expect("task-completed");
        assert_eq!(
            done.routing_key,
            format!("primary.{id}.0.wg.w1.{prov}.{wt}.{SCHEDULER_ID}.{gid}._")
        );
    }
    assert_eq!(
        got.len(),
        2 + 4 * 4,
        "nothing else matched the graph's binding: {:#?}",
        got.iter()
            .map(|m| (short(m).to_string(), m.routing_key.clone()))
            .collect::<Vec<_>>()
    );

    // RabbitMQ, the route binding: the same 16 queue messages, none of the scheduler's.
    let routed = collect_until(&broker, &by_route, WAIT, QUIET, |ms| {
        all.iter().all(|id| count_of(ms, id, "task-completed") >= 1)
    })
    .await;
    assert!(
        graph_msgs(&routed).is_empty(),
        "scheduler messages carry no CCs"
    );
    for (label, id) in &ids {
        assert_eq!(task_msgs(&routed, id), ran_once(), "{label} by route");
    }
    assert_eq!(routed.len(), 16, "one copy of each message per queue");
    for m in &routed {
        assert!(m.cc.contains(&route_cc), "{m:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_keeps_failing_is_rerun_then_blocks_the_graph() {
    let broker = graph_broker().await;
    let app = amqp_app().await;
    let s = Scheduler::root(&app);
    let q = app.queue();
    let tq = task_queue_id();
    let gid = slugid();
    let every_exchange = [scheduler_exchanges(), queue_exchanges()].concat();
    let by_graph = bind_full(&broker, &every_exchange, &graph_pattern(&gid)).await;

    // No routing: the default "" (rendered `_` in keys and routes).
    let body = json!({
        "tasks": {
            "flaky": node(&[], 2, graph_task(&tq, "flaky")),
            "after": node(&["flaky"], 0, graph_task(&tq, "after")),
            "other": node(&[], 0, graph_task(&tq, "other")),
        }
    });
    let created = ok("createTaskGraph", s.create(&gid, &body).await);
    assert_graph_status(&created, &gid, "running", "");
    let inspect = ok("inspect", s.inspect(&gid).await);
    let ids = task_ids(&inspect);
    let (f, after, other) = (&ids["flaky"], &ids["after"], &ids["other"]);
    let n = nodes(&inspect);
    assert_eq!(n["flaky"]["reruns"], 2, "{:#}", n["flaky"]);
    assert_eq!(n["flaky"]["rerunsLeft"], 2, "{:#}", n["flaky"]);
    let def = q.task(f).await.expect("task");
    assert!(
        sorted(&def["routes"]).contains(&graph_route(&gid, "")),
        "routing _ when empty: {def:#}"
    );
    assert_eq!(
        graph_route(&gid, ""),
        format!("task-graph-scheduler.{gid}._")
    );

    // Run 0 of flaky, and other, which completes.
    let first = claim_exactly(&app, &tq, &[("flaky", f), ("other", other)]).await;
    assert!(first.contains(&(f.clone(), 0)), "{first:?}");
    complete(&app, other, 0).await;
    q.reportFailed(f, "0").await.expect("reportFailed run 0");

    // Each failure with reruns left brings a new run.
    for run in 1..=2u64 {
        let claimed = claim_exactly(&app, &tq, &[("flaky", f)]).await;
        assert_eq!(claimed[0].1, run, "flaky's rerun is run {run}");
        wait_node(
            &s,
            &gid,
            f,
            &format!("flaky's rerunsLeft at {}", 2 - run),
            |n| n["rerunsLeft"] == 2 - run,
        )
        .await;
        // Not blocked while a rerun is under way; `after` still waits.
        assert_graph_status(&ok("status", s.status(&gid).await), &gid, "running", "");
        assert_never_scheduled(&app, "after", after).await;
        q.reportFailed(f, &run.to_string())
            .await
            .unwrap_or_else(|e| panic!("reportFailed run {run}: {e:#}"));
    }

    let blocked = wait_graph_state(&s, &gid, "blocked").await;
    assert_graph_status(&blocked, &gid, "blocked", "");
    let inspect = ok("inspect", s.inspect(&gid).await);
    assert_graph_status(&inspect, &gid, "blocked", "");
    let n = nodes(&inspect);
    assert_eq!(n["flaky"]["state"], "failed", "{:#}", n["flaky"]);
    assert_eq!(n["flaky"]["rerunsLeft"], 0, "{:#}", n["flaky"]);
    assert_eq!(n["flaky"]["reruns"], 2, "{:#}", n["flaky"]);
    assert_eq!(n["after"]["state"], "unscheduled", "{:#}", n["after"]);
    assert_eq!(sorted(&n["after"]["requiresLeft"]), set(&[f]));
    assert_eq!(n["other"]["state"], "completed", "{:#}", n["other"]);

    // Three runs in all, each failed; no fourth. The dependent never ran.
    let st = status(&app, f).await;
    assert_eq!(st["state"], "failed", "{st:#}");
    let runs = st["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 3, "1 run + 2 reruns: {st:#}");
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["runId"], i as u64, "{st:#}");
        assert_eq!(r["state"], "failed", "{st:#}");
        assert_eq!(r["reasonResolved"], "failed", "{st:#}");
    }
    assert_never_scheduled(&app, "after", after).await;

    // A blocked graph cannot be extended.
    let more = json!({"tasks": {"late": node(&[], 0, graph_task(&tq, "late"))}});
    expect_error(&s.extend(&gid, &more).await, 409, "RequestConflict");
    assert_eq!(
        task_ids(&ok("inspect", s.inspect(&gid).await)).len(),
        3,
        "the refused extension added nothing"
    );

    let got = collect_until(&broker, &by_graph, WAIT, QUIET, |ms| {
        graph_msgs(ms)
            .iter()
            .any(|m| short(m) == "task-graph-blocked")
            && count_of(ms, f, "task-failed") >= 3
    })
    .await;
    assert_eq!(
        graph_msg_names(&got),
        ["task-graph-blocked", "task-graph-running"],
        "one running and one blocked message, no finished"
    );
    for m in graph_msgs(&got) {
        let state = if short(m) == "task-graph-running" {
            "running"
        } else {
            "blocked"
        };
        assert_graph_message(m, short(m), &gid, state, "");
    }
    let failed_runs: Vec<Option<u64>> = task_msgs(&got, f)
        .into_iter()
        .filter(|(s, _)| s == "task-failed")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(failed_runs, [Some(0), Some(1), Some(2)]);
    assert_eq!(count_of(&got, f, "task-pending"), 3, "one pending per run");
    assert_eq!(
        task_msgs(&got, after),
        [("task-defined".to_string(), None)],
        "the dependent was defined, never scheduled"
    );
    let route_cc = format!("route.{}", graph_route(&gid, ""));
    for m in got.iter().filter(|m| !is_scheduler_msg(m)) {
        assert!(m.cc.contains(&route_cc), "{m:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_a_running_graph_adds_tasks_that_run_in_order() {
    let broker = graph_broker().await;
    let app = amqp_app().await;
    let s = Scheduler::root(&app);
    let tq = task_queue_id();
    let gid = slugid();
    let every_exchange = [scheduler_exchanges(), queue_exchanges()].concat();
    let by_graph = bind_full(&broker, &every_exchange, &graph_pattern(&gid)).await;

    let body = json!({
        "routing": "ext",
        "tasks": { "A": node(&[], 0, graph_task(&tq, "A")) }
    });
    assert_graph_status(
        &ok("createTaskGraph", s.create(&gid, &body).await),
        &gid,
        "running",
        "ext",
    );
    let a = task_ids(&ok("inspect", s.inspect(&gid).await))["A"].clone();
    // A is claimed, not completed, while the graph is extended.
    claim_exactly(&app, &tq, &[("A", &a)]).await;

    let b_node = node(&["A"], 0, graph_task(&tq, "B"));
    let extension = json!({
        "tasks": {
            "B": b_node,
            "C": node(&[], 0, graph_task(&tq, "C")),
        }
    });
    let extended = ok("extendTaskGraph", s.extend(&gid, &extension).await);
    assert_graph_status(&extended, &gid, "running", "ext");
    let inspect = ok("inspect", s.inspect(&gid).await);
    let ids = task_ids(&inspect);
    assert_eq!(ids.keys().cloned().collect::<Vec<_>>(), ["A", "B", "C"]);
    assert_eq!(ids["A"], a, "A keeps its taskId");
    let (b, c) = (&ids["B"], &ids["C"]);
    let n = nodes(&inspect);
    assert!(
        sorted(&n["A"]["dependents"]).contains(b),
        "A's dependents name B: {:#}",
        n["A"]
    );
    assert_eq!(sorted(&n["B"]["requires"]), set(&[&a]), "{:#}", n["B"]);
    assert_eq!(sorted(&n["B"]["requiresLeft"]), set(&[&a]), "{:#}", n["B"]);
    assert_eq!(n["B"]["state"], "unscheduled", "{:#}", n["B"]);
    assert_eq!(sorted(&n["C"]["requires"]), Vec::<String>::new());
    assert_never_scheduled(&app, "B", b).await;
    let tc = app.queue().task(c).await.expect("task C");
    assert_eq!(tc["taskGroupId"], gid.as_str(), "{tc:#}");
    assert_eq!(tc["schedulerId"], SCHEDULER_ID, "{tc:#}");

    // A label of the graph with another definition is a conflict, and changes nothing.
    let b_changed = json!({"tasks": {"B": node(&["A"], 0, graph_task(&tq, "B, changed"))}});
    expect_error(&s.extend(&gid, &b_changed).await, 409, "RequestConflict");
    let a_changed = json!({"tasks": {"A": node(&[], 3, graph_task(&tq, "A"))}});
    expect_error(&s.extend(&gid, &a_changed).await, 409, "RequestConflict");
    // Unknown labels and unknown graphs.
    let unknown = json!({"tasks": {"E": node(&["nope"], 0, graph_task(&tq, "E"))}});
    // Rules on the body: InputError (InvalidRequestArguments is for URL arguments).
    expect_error(&s.extend(&gid, &unknown).await, 400, "InputError");
    expect_error(
        &s.extend(&slugid(), &extension).await,
        404,
        "ResourceNotFound",
    );
    assert_eq!(
        task_ids(&ok("inspect", s.inspect(&gid).await)),
        ids,
        "refused extensions change nothing"
    );

    // C needs nothing: it runs while A is still running; B waits for A.
    claim_exactly(&app, &tq, &[("C", c)]).await;
    complete(&app, c, 0).await;
    assert_never_scheduled(&app, "B", b).await;
    complete(&app, &a, 0).await;
    claim_exactly(&app, &tq, &[("B", b)]).await;
    complete(&app, b, 0).await;

    let finished = wait_graph_state(&s, &gid, "finished").await;
    assert_graph_status(&finished, &gid, "finished", "ext");
    let inspect = ok("inspect", s.inspect(&gid).await);
    let n = nodes(&inspect);
    assert_eq!(n.len(), 3, "{inspect:#}");
    for (label, node) in &n {
        assert_eq!(node["state"], "completed", "{label}: {node:#}");
    }
    assert!(sorted(&n["A"]["dependents"]).contains(b));
    // A finished graph cannot be extended.
    let late = json!({"tasks": {"late": node(&[], 0, graph_task(&tq, "late"))}});
    expect_error(&s.extend(&gid, &late).await, 409, "RequestConflict");

    let got = collect_until(&broker, &by_graph, WAIT, QUIET, |ms| {
        graph_msgs(ms)
            .iter()
            .any(|m| short(m) == "task-graph-finished")
            && [&a, b, c]
                .iter()
                .all(|id| count_of(ms, id, "task-completed") >= 1)
    })
    .await;
    assert_eq!(
        graph_msg_names(&got),
        [
            "task-graph-extended",
            "task-graph-finished",
            "task-graph-running"
        ],
        "one message each; the refused extensions published nothing"
    );
    for m in graph_msgs(&got) {
        let state = if short(m) == "task-graph-finished" {
            "finished"
        } else {
            "running"
        };
        assert_graph_message(m, short(m), &gid, state, "ext");
    }
    for (label, id) in &ids {
        assert_eq!(task_msgs(&got, id), ran_once(), "{label}'s messages");
    }
}

#[tokio::test]
async fn subs_become_task_ids_and_tasks_carry_the_graph_identity() {
    let app = spawn_app().await;
    let s = Scheduler::root(&app);
    let q = app.queue();
    let tq = task_queue_id();
    let gid = slugid();

    let a_def = graph_task(&tq, "A");
    let mut b_def = graph_task(&tq, "B");
    b_def["payload"] = json!({
        "env": {"UPSTREAM": {"$subs": "taskId:A"}, "PLAIN": "x"},
        "deps": [{"$subs": "taskId:A"}, "literal", {"$subs": "taskId:B"}],
        "deep": {"list": [{"inner": {"$subs": "taskId:A"}}]}
    });
    b_def["extra"] = json!({"upstream": {"$subs": "taskId:A"}});
    b_def["routes"] = json!(["own.route"]);
    // Overwritten by the scheduler.
    b_def["taskGroupId"] = json!(slugid());
    b_def["schedulerId"] = json!("-");
    let body = json!({
        "routing": "subs",
        "tasks": {
            "A": node(&[], 0, a_def),
            "B": node(&[], 0, b_def),
        }
    });
    assert_graph_status(
        &ok("createTaskGraph", s.create(&gid, &body).await),
        &gid,
        "running",
        "subs",
    );
    let ids = task_ids(&ok("inspect", s.inspect(&gid).await));
    let (a, b) = (&ids["A"], &ids["B"]);

    let tb = q.task(b).await.unwrap_or_else(|e| panic!("task(B): {e:#}"));
    assert_eq!(
        tb["payload"],
        json!({
            "env": {"UPSTREAM": a, "PLAIN": "x"},
            "deps": [a, "literal", b],
            "deep": {"list": [{"inner": a}]}
        }),
        "{tb:#}"
    );
    assert_eq!(tb["extra"], json!({"upstream": a}), "{tb:#}");
    assert!(!tb.to_string().contains("$subs"), "{tb:#}");
    assert_eq!(tb["schedulerId"], SCHEDULER_ID, "{tb:#}");
    assert_eq!(tb["taskGroupId"], gid.as_str(), "{tb:#}");
    let route = graph_route(&gid, "subs");
    assert_eq!(route, format!("task-graph-scheduler.{gid}.subs"));
    assert_eq!(
        tb["routes"],
        json!(["own.route", route]),
        "the graph's route is appended: {tb:#}"
    );
    assert_eq!(tb["metadata"]["name"], "B");

    let ta = q.task(a).await.expect("task(A)");
    assert_eq!(ta["schedulerId"], SCHEDULER_ID, "{ta:#}");
    assert_eq!(ta["taskGroupId"], gid.as_str(), "{ta:#}");
    assert_eq!(ta["routes"], json!([route]), "{ta:#}");
    assert_eq!(ta["payload"], json!({}), "{ta:#}");

    // The graph is the queue's task group, under the scheduler's id.
    assert_eq!(group_members(&app, &gid).await, set(&[a, b]));
    let group = q.getTaskGroup(&gid).await.expect("getTaskGroup");
    assert_eq!(group["schedulerId"], SCHEDULER_ID, "{group:#}");

    // Neither requires anything: both get scheduled.
    for (label, id) in [("A", a), ("B", b)] {
        wait_node(&s, &gid, id, &format!("{label} scheduled"), |n| {
            n["state"] == "scheduled"
        })
        .await;
        let st = wait_status(&app, id, WAIT, |st| st["state"] == "pending").await;
        assert_eq!(st["runs"].as_array().map(Vec::len), Some(1), "{st:#}");
        let node = ok("inspectTask", s.inspect_task(&gid, id).await);
        assert_eq!(node["label"], label, "{node:#}");
        assert_eq!(node["taskId"], id.as_str(), "{node:#}");
    }

    // Unknown graphs and tasks.
    let other = slugid();
    expect_error(&s.status(&other).await, 404, "ResourceNotFound");
    expect_error(&s.info(&other).await, 404, "ResourceNotFound");
    expect_error(&s.inspect(&other).await, 404, "ResourceNotFound");
    expect_error(&s.inspect_task(&other, a).await, 404, "ResourceNotFound");
    expect_error(
        &s.inspect_task(&gid, &slugid()).await,
        404,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn invalid_graphs_are_rejected_and_create_nothing() {
    let app = spawn_app().await;
    let s = Scheduler::root(&app);
    let tq = task_queue_id();
    let t = |name: &str| graph_task(&tq, name);
    let mut subs_unknown = t("A");
    subs_unknown["payload"] = json!({"x": [{"$subs": "taskId:nope"}]});
    let mut bad_priority = t("B");
    bad_priority["priority"] = json!("bogus");
    let mut no_metadata = t("B");
    no_metadata
        .as_object_mut()
        .expect("object")
        .remove("metadata");
    let long_label = "l".repeat(65);

    // (case, body, status, code if the spec names one)
    let cases: Vec<(&str, Value, u16, Option<&str>)> = vec![
        (
            "unknown label in requires",
            json!({"tasks": {
                "A": node(&[], 0, t("A")),
                "B": node(&["A", "nope"], 0, t("B")),
            }}),
            400,
            Some("InputError"),
        ),
        (
            "unknown label in $subs",
            json!({"tasks": {
                "A": node(&[], 0, subs_unknown),
                "B": node(&[], 0, t("B")),
            }}),
            400,
            Some("InputError"),
        ),
        (
            "a cycle of two",
            json!({"tasks": {
                "A": node(&["B"], 0, t("A")),
                "B": node(&["A"], 0, t("B")),
                "C": node(&[], 0, t("C")),
            }}),
            400,
            Some("InputError"),
        ),
        (
            "a cycle of three",
            json!({"tasks": {
                "A": node(&["C"], 0, t("A")),
                "B": node(&["A"], 0, t("B")),
                "C": node(&["B"], 0, t("C")),
                "D": node(&[], 0, t("D")),
            }}),
            400,
            Some("InputError"),
        ),
        (
            "a task requiring itself",
            json!({"tasks": {"A": node(&["A"], 0, t("A"))}}),
            400,
            Some("InputError"),
        ),
        (
            "reruns 101",
            json!({"tasks": {"A": node(&[], 101, t("A"))}}),
            400,
            Some("InputValidationError"),
        ),
        (
            "reruns -1",
            json!({"tasks": {"A": {"requires": [], "reruns": -1, "task": t("A")}}}),
            400,
            Some("InputValidationError"),
        ),
        (
            "routing of 11 chars",
            json!({"routing": "abcdefghijk", "tasks": {"A": node(&[], 0, t("A"))}}),
            400,
            Some("InputValidationError"),
        ),
        (
            "routing with a character outside [A-Za-z0-9._-]",
            json!({"routing": "a/b", "tasks": {"A": node(&[], 0, t("A"))}}),
            400,
            None,
        ),
        (
            "label of 65 chars",
            json!({"tasks": {long_label.clone(): node(&[], 0, t("A"))}}),
            400,
            None,
        ),
        (
            "label with a character outside [A-Za-z0-9._-]",
            json!({"tasks": {"a/b": node(&[], 0, t("A"))}}),
            400,
            None,
        ),
        (
            "a task createTask would reject (priority)",
            json!({"tasks": {
                "A": node(&[], 0, t("A")),
                "B": node(&["A"], 0, bad_priority),
            }}),
            400,
            None,
        ),
        (
            "a task createTask would reject (no metadata)",
            json!({"tasks": {
                "A": node(&[], 0, t("A")),
                "B": node(&[], 0, no_metadata),
            }}),
            400,
            None,
        ),
    ];
    for (case, body, want, code) in cases {
        let gid = slugid();
        let got = s.create(&gid, &body).await;
        match code {
            Some(code) => {
                assert_eq!(got.0, want, "{case}: {:#}", got.1);
                assert_eq!(got.1["code"], code, "{case}: {:#}", got.1);
                expect_error(&got, want, code);
            }
            None => {
                assert_eq!(got.0, want, "{case}: {:#}", got.1);
                assert_error_shape(&got.1);
            }
        }
        assert_nothing_created(&app, &s, &gid, case).await;
    }

    // A taskGraphId that is not a slugid.
    let valid = json!({"tasks": {"A": node(&[], 0, t("A"))}});
    let got = s.create("not-a-slugid", &valid).await;
    assert_eq!(got.0, 400, "{:#}", got.1);
    assert_error_shape(&got.1);
}

#[tokio::test]
async fn creating_a_graph_again_is_idempotent_and_a_different_body_conflicts() {
    let app = spawn_app().await;
    let s = Scheduler::root(&app);
    let tq = task_queue_id();
    let gid = slugid();
    let body = json!({
        "routing": "idem",
        "metadata": graph_metadata("idempotent"),
        "tags": {"k": "v"},
        "tasks": {
            "A": node(&[], 1, graph_task(&tq, "A")),
            "B": node(&["A"], 0, graph_task(&tq, "B")),
        }
    });
    let first = ok("createTaskGraph", s.create(&gid, &body).await);
    assert_graph_status(&first, &gid, "running", "idem");
    let ids = task_ids(&ok("inspect", s.inspect(&gid).await));
    let mut want_members: Vec<String> = ids.values().cloned().collect();
    want_members.sort();
    assert_eq!(group_members(&app, &gid).await, want_members);

    // The same body again: 200, the same graph, no new tasks.
    let again = ok("createTaskGraph again", s.create(&gid, &body).await);
    assert_graph_status(&again, &gid, "running", "idem");
    assert_eq!(task_ids(&ok("inspect", s.inspect(&gid).await)), ids);
    assert_eq!(group_members(&app, &gid).await, want_members);

    // A different body under the same id: 409, nothing changes.
    let mut other_routing = body.clone();
    other_routing["routing"] = json!("other");
    let mut other_task = body.clone();
    other_task["tasks"]["A"]["reruns"] = json!(2);
    let mut more_tasks = body.clone();
    more_tasks["tasks"]["C"] = node(&[], 0, graph_task(&tq, "C"));
    for (case, b) in [
        ("routing", other_routing),
        ("a task", other_task),
        ("an extra task", more_tasks),
    ] {
        let got = s.create(&gid, &b).await;
        assert_eq!(got.0, 409, "different {case}: {:#}", got.1);
        expect_error(&got, 409, "RequestConflict");
    }
    let after = ok("inspect", s.inspect(&gid).await);
    assert_graph_status(&after, &gid, "running", "idem");
    assert_eq!(task_ids(&after), ids);
    assert_eq!(after["tags"], body["tags"]);
    assert_eq!(group_members(&app, &gid).await, want_members);
}

/// Creates a client holding exactly `scopes` through the auth API; returns its credentials.
async fn client_with(app: &TestServer, scopes: &[String]) -> Credentials {
    let id = format!("test/{}", slugid());
    let r = app
        .auth()
        .createClient(
            &id,
            &json!({"description": "scheduler test client", "expires": ts(3_600_000), "scopes": scopes}),
        )
        .await
        .unwrap_or_else(|e| panic!("createClient failed: {e:#}"));
    Credentials::new(id, r["accessToken"].as_str().expect("accessToken"))
}

#[tokio::test]
async fn creating_and_extending_graphs_need_the_scheduler_scopes_and_the_tasks_scopes() {
    let app = spawn_app().await;
    let tq = task_queue_id();
    let mut task = graph_task(&tq, "scoped");
    task["routes"] = json!(["own.route"]);
    task["scopes"] = json!(["custom:needed"]);
    let body = json!({"routing": "sc", "tasks": {"A": node(&[], 0, task.clone())}});
    // What createTask would need for the task (not the graph's own route).
    let task_scopes: Vec<String> = [
        "custom:needed".to_string(),
        "queue:route:own.route".to_string(),
        format!("queue:create-task:lowest:{tq}"),
        "queue:create-task:project:none".to_string(),
        format!("queue:scheduler-id:{SCHEDULER_ID}"),
    ]
    .to_vec();
    let with = |extra: &[&str], without: Option<&str>| -> Vec<String> {
        let mut v: Vec<String> = task_scopes
            .iter()
            .filter(|s| Some(s.as_str()) != without)
            .cloned()
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let root = Scheduler::root(&app);

    // Temporary credentials with every task scope but not scheduler:create-task-graph.
    let temp = root_credentials()
        .create_named_temp_creds(
            "test/no-graph-scope",
            Duration::from_secs(600),
            with(&[], None),
        )
        .expect("temporary credentials");
    let gid = slugid();
    let got = Scheduler::as_client(&app, Some(temp))
        .create(&gid, &body)
        .await;
    expect_error(&got, 403, "InsufficientScopes");
    assert_nothing_created(&app, &root, &gid, "temporary credentials").await;

    // A client of its own, likewise.
    let limited = client_with(&app, &with(&[], None)).await;
    let gid = slugid();
    let got = Scheduler::as_client(&app, Some(limited))
        .create(&gid, &body)
        .await;
    expect_error(&got, 403, "InsufficientScopes");
    assert_nothing_created(&app, &root, &gid, "limited client").await;

    // The graph scope, but one of the task's scopes missing (authorizedScopes on root).
    for missing in &task_scopes {
        let gid = slugid();
        let scopes = with(&["scheduler:create-task-graph"], Some(missing));
        let got = root
            .clone()
            .authorized_scopes(&scopes)
            .create(&gid, &body)
            .await;
        assert_eq!(got.0, 403, "without {missing}: {:#}", got.1);
        assert_eq!(got.1["code"], "InsufficientScopes", "without {missing}");
        expect_error(&got, 403, "InsufficientScopes");
        assert_nothing_created(&app, &root, &gid, missing).await;
    }

    // Unsigned: may read, may not create.
    let anon = Scheduler::as_client(&app, None);
    let gid = slugid();
    let got = anon.create(&gid, &body).await;
    assert_eq!(got.0, 403, "unsigned create: {:#}", got.1);
    assert_nothing_created(&app, &root, &gid, "unsigned").await;
    // Bad credentials.
    let wrong = Credentials::new(ROOT_CLIENT_ID, "not-the-access-token-000000000000000000000");
    let got = Scheduler::as_client(&app, Some(wrong))
        .create(&gid, &body)
        .await;
    assert_eq!(got.0, 401, "wrong accessToken: {:#}", got.1);
    assert_nothing_created(&app, &root, &gid, "wrong accessToken").await;

    // Exactly the graph scope and the task's scopes: a client of its own may create.
    let creator = client_with(&app, &with(&["scheduler:create-task-graph"], None)).await;
    let creator = Scheduler::as_client(&app, Some(creator));
    let gid = slugid();
    let created = ok(
        "createTaskGraph with exact scopes",
        creator.create(&gid, &body).await,
    );
    assert_graph_status(&created, &gid, "running", "sc");
    let a = task_ids(&ok("inspect", anon.inspect(&gid).await))["A"].clone();
    let ta = app.queue().task(&a).await.expect("task");
    assert_eq!(ta["scopes"], json!(["custom:needed"]), "{ta:#}");
    assert_eq!(
        ta["routes"],
        json!(["own.route", graph_route(&gid, "sc")]),
        "{ta:#}"
    );

    // The reads need no scopes.
    assert_eq!(anon.ping().await.0, 200);
    assert_graph_status(
        &ok("status", anon.status(&gid).await),
        &gid,
        "running",
        "sc",
    );
    assert_graph_status(&ok("info", anon.info(&gid).await), &gid, "running", "sc");
    assert_eq!(
        ok("inspectTask", anon.inspect_task(&gid, &a).await)["label"],
        "A"
    );

    // Extending: scheduler:extend-task-graph:<this graph> and the new tasks' scopes.
    let mut b_task = task.clone();
    b_task["metadata"]["name"] = json!("scoped B");
    let extension = json!({"tasks": {"B": node(&["A"], 0, b_task)}});
    let got = creator.extend(&gid, &extension).await;
    expect_error(&got, 403, "InsufficientScopes");
    let other_graph = format!("scheduler:extend-task-graph:{}", slugid());
    let got = root
        .clone()
        .authorized_scopes(&with(&[&other_graph], None))
        .extend(&gid, &extension)
        .await;
    expect_error(&got, 403, "InsufficientScopes");
    let this_graph = format!("scheduler:extend-task-graph:{gid}");
    let got = root
        .clone()
        .authorized_scopes(&with(&[&this_graph], Some("custom:needed")))
        .extend(&gid, &extension)
        .await;
    expect_error(&got, 403, "InsufficientScopes");
    assert_eq!(
        task_ids(&ok("inspect", anon.inspect(&gid).await)).len(),
        1,
        "refused extensions add nothing"
    );
    let extended = ok(
        "extendTaskGraph with exact scopes",
        root.clone()
            .authorized_scopes(&with(&[&this_graph], None))
            .extend(&gid, &extension)
            .await,
    );
    assert_graph_status(&extended, &gid, "running", "sc");
    assert_eq!(task_ids(&ok("inspect", anon.inspect(&gid).await)).len(), 2);
}

/// The completed message of `id` (run `run`) once the server published it.
async fn completed_message(app: &TestServer, id: &str, run: u64) -> Value {
    app.wait_for_event(WAIT, |e| {
        e.exchange.ends_with("/task-completed")
            && e.payload["status"]["taskId"] == id
            && e.payload["runId"] == run
    })
    .await
    .unwrap_or_else(|| panic!("no task-completed for {id}"))
    .payload
}

/// Two completions that arrive together (as two consumer invocations would in AWS) both land
/// in the dependent's requiresLeft, conditional writes making one of them retry, and the
/// dependent is scheduled exactly once; both messages again change nothing. The in-process
/// consumer is off, so the test hands the scheduler the queue's own messages itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_arriving_together_both_count_and_repeats_change_nothing() {
    if not_in_shape("hands messages to an in-process scheduler instead of the consumer function") {
        return;
    }
    use shared::scheduler::Reaction;
    let app = spawn_app_with(|c| c.scheduler_consumer = false).await;
    let s = Scheduler::root(&app);
    let consumer = app.api().scheduler.clone();
    let now = shared::time::Ts::now;
    let tq = task_queue_id();
    let gid = slugid();
    let body = json!({"tasks": {
        "A": node(&[], 0, graph_task(&tq, "A")),
        "B": node(&["A"], 0, graph_task(&tq, "B")),
        "C": node(&["A"], 0, graph_task(&tq, "C")),
        "D": node(&["B", "C"], 0, graph_task(&tq, "D")),
    }});
    ok("createTaskGraph", s.create(&gid, &body).await);
    let ids = task_ids(&ok("inspect", s.inspect(&gid).await));
    let (a, b, c, d) = (&ids["A"], &ids["B"], &ids["C"], &ids["D"]);

    claim_exactly(&app, &tq, &[("A", a)]).await;
    complete(&app, a, 0).await;
    let msg_a = completed_message(&app, a, 0).await;
    assert_eq!(
        consumer.on_resolution(&msg_a, now()).await.expect("A"),
        Reaction::Handled
    );
    claim_exactly(&app, &tq, &[("B", b), ("C", c)]).await;
    complete(&app, b, 0).await;
    complete(&app, c, 0).await;
    let (msg_b, msg_c) = (
        completed_message(&app, b, 0).await,
        completed_message(&app, c, 0).await,
    );
    let (rb, rc) = tokio::join!(
        consumer.on_resolution(&msg_b, now()),
        consumer.on_resolution(&msg_c, now())
    );
    assert_eq!(rb.expect("B"), Reaction::Handled);
    assert_eq!(rc.expect("C"), Reaction::Handled);
    let dn = ok("inspectTask D", s.inspect_task(&gid, d).await);
    assert_eq!(
        dn["requiresLeft"],
        json!([]),
        "both completions counted: {dn:#}"
    );
    assert_eq!(dn["state"], "scheduled", "{dn:#}");
    let st = status(&app, d).await;
    assert_eq!(st["runs"].as_array().map(Vec::len), Some(1), "{st:#}");

    // Every message again, B's and C's at once: nothing changes.
    let before = ok("inspect", s.inspect(&gid).await);
    let (ra, rb, rc) = tokio::join!(
        consumer.on_resolution(&msg_a, now()),
        consumer.on_resolution(&msg_b, now()),
        consumer.on_resolution(&msg_c, now())
    );
    for r in [ra, rb, rc] {
        r.expect("a repeated message is not an error");
    }
    assert_eq!(ok("inspect", s.inspect(&gid).await), before);
    let st = status(&app, d).await;
    assert_eq!(st["runs"].as_array().map(Vec::len), Some(1), "{st:#}");

    claim_exactly(&app, &tq, &[("D", d)]).await;
    complete(&app, d, 0).await;
    let msg_d = completed_message(&app, d, 0).await;
    consumer.on_resolution(&msg_d, now()).await.expect("D");
    assert_graph_status(&ok("status", s.status(&gid).await), &gid, "finished", "");
}
