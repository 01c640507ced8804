//! Exchange names and routing keys, built in this one module.

/// The short names of every exchange the queue publishes to.
pub const EXCHANGES: [&str; 11] = [
    "task-defined",
    "task-pending",
    "task-running",
    "artifact-created",
    "task-completed",
    "task-failed",
    "task-exception",
    "task-group-resolved",
    "task-group-sealed",
    "task-priority-changed",
    "task-group-priority-changed",
];

/// The default exchange prefix.
pub const DEFAULT_EXCHANGE_PREFIX: &str = "exchange/taskcluster-queue/v1/";

/// The exchanges of the task-graph scheduler (seed 001).
pub const SCHEDULER_EXCHANGES: [&str; 4] = [
    "task-graph-running",
    "task-graph-extended",
    "task-graph-blocked",
    "task-graph-finished",
];

/// The scheduler's default exchange prefix.
pub const SCHEDULER_EXCHANGE_PREFIX: &str = "exchange/taskcluster-scheduler/v1/";

/// A task graph's routing key, laid out like a task message's ten words so that one binding
/// pattern matches both services' messages about a graph:
/// `primary._._._._._._.<schedulerId>.<taskGraphId>.<routing>`.
pub fn task_graph_routing_key(scheduler_id: &str, task_graph_id: &str, routing: &str) -> String {
    format!(
        "primary._._._._._._.{}.{}.{}",
        word(Some(scheduler_id)),
        word(Some(task_graph_id)),
        word(Some(routing))
    )
}

/// The route the scheduler adds to each of a graph's tasks, so that the queue's messages about
/// them are CC'ed to `route.<schedulerId>.<taskGraphId>.<routing>`.
pub fn task_graph_route(scheduler_id: &str, task_graph_id: &str, routing: &str) -> String {
    format!("{scheduler_id}.{task_graph_id}.{}", word(Some(routing)))
}

/// The ten words of a task message's routing key; `None` renders as `_`.
#[derive(Debug, Clone, Default)]
pub struct TaskKey<'a> {
    /// taskId.
    pub task_id: &'a str,
    /// runId, when the message concerns a run.
    pub run_id: Option<u32>,
    /// workerGroup, once claimed.
    pub worker_group: Option<&'a str>,
    /// workerId, once claimed.
    pub worker_id: Option<&'a str>,
    /// provisionerId half of the task queue.
    pub provisioner_id: &'a str,
    /// workerType half of the task queue.
    pub worker_type: &'a str,
    /// schedulerId.
    pub scheduler_id: &'a str,
    /// taskGroupId.
    pub task_group_id: &'a str,
}

fn word(w: Option<&str>) -> &str {
    match w {
        Some(s) if !s.is_empty() => s,
        _ => "_",
    }
}

/// `<taskId>.<runId>.<workerGroup>.<workerId>.<provisionerId>.<workerType>`: the words that
/// both layouts' task keys start with.
fn task_words(k: &TaskKey) -> String {
    let run = k.run_id.map(|r| r.to_string());
    format!(
        "{}.{}.{}.{}.{}.{}",
        word(Some(k.task_id)),
        word(run.as_deref()),
        word(k.worker_group),
        word(k.worker_id),
        word(Some(k.provisioner_id)),
        word(Some(k.worker_type)),
    )
}

/// `primary.<taskId>.<runId>.<workerGroup>.<workerId>.<provisionerId>.<workerType>.<schedulerId>.<taskGroupId>._`
pub fn task_routing_key(k: &TaskKey) -> String {
    format!(
        "primary.{}.{}.{}._",
        task_words(k),
        word(Some(k.scheduler_id)),
        word(Some(k.task_group_id)),
    )
}

/// `primary.<taskGroupId>.<schedulerId>._`
pub fn task_group_routing_key(task_group_id: &str, scheduler_id: &str) -> String {
    format!(
        "primary.{}.{}._",
        word(Some(task_group_id)),
        word(Some(scheduler_id))
    )
}

/// One CC routing key per task route: `route.<r>`.
pub fn route_ccs(routes: &[String]) -> Vec<String> {
    routes.iter().map(|r| format!("route.{r}")).collect()
}

/// Seed 003's exchanges, published next to today's in the legacy mode.
pub const LEGACY_EXCHANGES: [&str; 4] = [
    "v1/queue:task-pending",
    "v1/queue:task-running",
    "v1/queue:task-completed",
    "v1/queue:task-failed",
];

/// The legacy exchange of one of today's exchanges (by short name), if it has one: failures
/// and exceptions both go to `v1/queue:task-failed`, whose status's reason tells which.
pub fn legacy_exchange(short: &str) -> Option<&'static str> {
    Some(match short {
        "task-pending" => LEGACY_EXCHANGES[0],
        "task-running" => LEGACY_EXCHANGES[1],
        "task-completed" => LEGACY_EXCHANGES[2],
        "task-failed" | "task-exception" => LEGACY_EXCHANGES[3],
        _ => return None,
    })
}

/// AMQP 0-9-1 routing keys are short strings: 255 bytes at most. The primary keys stay
/// within it by their words' schemas (253 bytes at most); a longer key cannot be published.
pub const MAX_ROUTING_KEY_BYTES: usize = 255;

/// Seed 003's routing key:
/// `<taskId>.<runId>.<workerGroup>.<workerId>.<provisionerId>.<workerType>.<routing>`, `_`
/// for a word not available; `routing` (the task's, which may hold dots) is
/// `<schedulerId>.<taskGraphId>.<routing>` for the task-graph scheduler's tasks. A routing
/// too long for [`MAX_ROUTING_KEY_BYTES`] (a task route may have 249 characters) is cut
/// there, on a character boundary: the six task words always stay whole.
pub fn legacy_routing_key(k: &TaskKey, routing: Option<&str>) -> String {
    let mut key = format!("{}.{}", task_words(k), word(routing));
    if key.len() > MAX_ROUTING_KEY_BYTES {
        let end = (0..=MAX_ROUTING_KEY_BYTES)
            .rev()
            .find(|&i| key.is_char_boundary(i))
            .unwrap_or_default();
        key.truncate(end);
    }
    key
}

/// The full exchange name for a short name such as `task-pending`.
pub fn exchange_name(prefix: &str, short: &str) -> String {
    format!("{prefix}{short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_words_are_underscores() {
        let k = TaskKey {
            task_id: "T",
            provisioner_id: "p",
            worker_type: "w",
            scheduler_id: "-",
            task_group_id: "G",
            ..Default::default()
        };
        assert_eq!(task_routing_key(&k), "primary.T._._._.p.w.-.G._");
        let k = TaskKey {
            run_id: Some(0),
            worker_group: Some("g"),
            worker_id: Some("i"),
            ..k
        };
        assert_eq!(task_routing_key(&k), "primary.T.0.g.i.p.w.-.G._");
    }

    #[test]
    fn legacy_keys_have_seven_parts_and_a_dotted_routing() {
        let k = TaskKey {
            task_id: "T",
            provisioner_id: "p",
            worker_type: "w",
            ..Default::default()
        };
        assert_eq!(legacy_routing_key(&k, None), "T._._._.p.w._");
        let k = TaskKey {
            run_id: Some(1),
            worker_group: Some("g"),
            worker_id: Some("i"),
            ..k
        };
        assert_eq!(
            legacy_routing_key(&k, Some("s.G.a.b")),
            "T.1.g.i.p.w.s.G.a.b"
        );
        assert_eq!(
            legacy_exchange("task-exception"),
            Some("v1/queue:task-failed")
        );
        assert_eq!(legacy_exchange("task-defined"), None);
    }

    #[test]
    fn a_long_legacy_routing_is_cut_to_what_amqp_allows() {
        // Found by fuzzing (fuzz/seeds/routing): a task route of up to 249 characters after
        // six task words made keys of 400+ bytes, which the AMQP client cannot frame.
        let k = TaskKey {
            task_id: "fN1SbArXTPSVFNUvaOlinQ",
            run_id: Some(49),
            worker_group: Some(&"g".repeat(38)),
            worker_id: Some(&"i".repeat(38)),
            provisioner_id: &"p".repeat(38),
            worker_type: &"w".repeat(38),
            ..Default::default()
        };
        let words = format!(
            "{}.49.{}.{}.{}.{}.",
            k.task_id,
            "g".repeat(38),
            "i".repeat(38),
            "p".repeat(38),
            "w".repeat(38)
        );
        let routing = format!("s.G.{}", "é".repeat(120));
        let key = legacy_routing_key(&k, Some(&routing));
        assert!(key.len() <= MAX_ROUTING_KEY_BYTES && key.len() >= MAX_ROUTING_KEY_BYTES - 1);
        let rest = key.strip_prefix(&words).expect("the task words stay whole");
        assert!(routing.starts_with(rest), "{rest}");
        // A short routing is kept whole.
        assert_eq!(
            legacy_routing_key(&k, Some("s.G.r")),
            format!("{words}s.G.r")
        );
    }

    #[test]
    fn routes_become_ccs() {
        assert_eq!(
            route_ccs(&["notify.by-email".into()]),
            vec!["route.notify.by-email".to_string()]
        );
        assert_eq!(task_group_routing_key("G", "s"), "primary.G.s._");
        assert_eq!(
            task_graph_routing_key("s", "G", ""),
            "primary._._._._._._.s.G._"
        );
        assert_eq!(task_graph_route("s", "G", "a.b"), "s.G.a.b");
    }
}
