//! Exchange names and routing keys, built in this one module.

/// Every exchange the queue and the task-graph scheduler publish to, by its short name (the
/// part after the service's prefix). Events carry the short name ([`Exchange::name`]); this
/// is the one list of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// `task-defined`
    TaskDefined,
    /// `task-pending`
    TaskPending,
    /// `task-running`
    TaskRunning,
    /// `artifact-created`
    ArtifactCreated,
    /// `task-completed`
    TaskCompleted,
    /// `task-failed`
    TaskFailed,
    /// `task-exception`
    TaskException,
    /// `task-group-resolved`
    TaskGroupResolved,
    /// `task-group-sealed`
    TaskGroupSealed,
    /// `task-priority-changed`
    TaskPriorityChanged,
    /// `task-group-priority-changed`
    TaskGroupPriorityChanged,
    /// `task-graph-running` (the scheduler's, seed 001)
    TaskGraphRunning,
    /// `task-graph-extended`
    TaskGraphExtended,
    /// `task-graph-blocked`
    TaskGraphBlocked,
    /// `task-graph-finished`
    TaskGraphFinished,
}

impl Exchange {
    /// The queue's exchanges.
    pub const QUEUE: [Exchange; 11] = [
        Exchange::TaskDefined,
        Exchange::TaskPending,
        Exchange::TaskRunning,
        Exchange::ArtifactCreated,
        Exchange::TaskCompleted,
        Exchange::TaskFailed,
        Exchange::TaskException,
        Exchange::TaskGroupResolved,
        Exchange::TaskGroupSealed,
        Exchange::TaskPriorityChanged,
        Exchange::TaskGroupPriorityChanged,
    ];

    /// The task-graph scheduler's exchanges.
    pub const SCHEDULER: [Exchange; 4] = [
        Exchange::TaskGraphRunning,
        Exchange::TaskGraphExtended,
        Exchange::TaskGraphBlocked,
        Exchange::TaskGraphFinished,
    ];

    /// The queue's exchanges that announce a run's resolution (what a task-graph scheduler
    /// consumes).
    pub const RESOLUTIONS: [Exchange; 3] = [
        Exchange::TaskCompleted,
        Exchange::TaskFailed,
        Exchange::TaskException,
    ];

    /// Its short name, e.g. `task-pending`.
    pub const fn name(self) -> &'static str {
        match self {
            Exchange::TaskDefined => "task-defined",
            Exchange::TaskPending => "task-pending",
            Exchange::TaskRunning => "task-running",
            Exchange::ArtifactCreated => "artifact-created",
            Exchange::TaskCompleted => "task-completed",
            Exchange::TaskFailed => "task-failed",
            Exchange::TaskException => "task-exception",
            Exchange::TaskGroupResolved => "task-group-resolved",
            Exchange::TaskGroupSealed => "task-group-sealed",
            Exchange::TaskPriorityChanged => "task-priority-changed",
            Exchange::TaskGroupPriorityChanged => "task-group-priority-changed",
            Exchange::TaskGraphRunning => "task-graph-running",
            Exchange::TaskGraphExtended => "task-graph-extended",
            Exchange::TaskGraphBlocked => "task-graph-blocked",
            Exchange::TaskGraphFinished => "task-graph-finished",
        }
    }

    /// The exchange whose short name is `short`.
    pub fn named(short: &str) -> Option<Exchange> {
        Exchange::QUEUE
            .into_iter()
            .chain(Exchange::SCHEDULER)
            .find(|e| e.name() == short)
    }

    /// What its messages are about, and so their routing keys' words.
    pub const fn subject(self) -> Subject {
        match self {
            Exchange::TaskGroupResolved
            | Exchange::TaskGroupSealed
            | Exchange::TaskGroupPriorityChanged => Subject::TaskGroup,
            Exchange::TaskGraphRunning
            | Exchange::TaskGraphExtended
            | Exchange::TaskGraphBlocked
            | Exchange::TaskGraphFinished => Subject::TaskGraph,
            _ => Subject::Task,
        }
    }

    /// True if it announces a run's resolution.
    pub fn is_resolution(self) -> bool {
        Exchange::RESOLUTIONS.contains(&self)
    }

    /// Its legacy exchange (seed 003), if it has one: failures and exceptions both go to
    /// `v1/queue:task-failed`, whose status's reason tells which.
    pub const fn legacy(self) -> Option<&'static str> {
        Some(match self {
            Exchange::TaskPending => LEGACY_EXCHANGES[0],
            Exchange::TaskRunning => LEGACY_EXCHANGES[1],
            Exchange::TaskCompleted => LEGACY_EXCHANGES[2],
            Exchange::TaskFailed | Exchange::TaskException => LEGACY_EXCHANGES[3],
            _ => return None,
        })
    }
}

/// What an exchange's messages are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// A task (and its run).
    Task,
    /// A task group.
    TaskGroup,
    /// A task graph (the scheduler's).
    TaskGraph,
}

/// The short names of `exchanges`.
const fn names<const N: usize>(exchanges: [Exchange; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = exchanges[i].name();
        i += 1;
    }
    out
}

/// The short names of every exchange the queue publishes to.
pub const EXCHANGES: [&str; 11] = names(Exchange::QUEUE);

/// The default exchange prefix.
pub const DEFAULT_EXCHANGE_PREFIX: &str = "exchange/taskcluster-queue/v1/";

/// The exchanges of the task-graph scheduler (seed 001).
pub const SCHEDULER_EXCHANGES: [&str; 4] = names(Exchange::SCHEDULER);

/// The short names of [`Exchange::RESOLUTIONS`].
pub const RESOLUTION_NAMES: [&str; 3] = names(Exchange::RESOLUTIONS);

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

/// The legacy exchange of one of today's exchanges (by short name), if it has one
/// ([`Exchange::legacy`]).
pub fn legacy_exchange(short: &str) -> Option<&'static str> {
    Exchange::named(short)?.legacy()
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
