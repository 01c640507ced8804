//! Every function of the stack with what the SAM template needs to know of it: its resources
//! (from the endpoint declarations for the API's functions), the variables it reads beyond
//! the ones every function gets, its limits and what triggers it. The template generator
//! (`tests/tests/blackbox/infra.rs`) renders exactly this, so a function or trigger added
//! here is deployed with no other change.

use super::Function;
use crate::env;
use shared::api::declare::{Access, Need, Reservation, Verb};

/// Variables every function gets (the template's globals); [`LambdaConfig`] reads them.
///
/// [`LambdaConfig`]: crate::config::LambdaConfig
pub const COMMON_ENV: &[&str] = &[
    env::TABLE_PREFIX,
    env::QUEUE_ACCESS_TOKEN_SECRET,
    env::ROOT_ACCESS_TOKEN_SECRET,
    env::ARTIFACT_STORAGE,
    env::PUBLIC_ARTIFACT_BUCKET,
    env::PRIVATE_ARTIFACT_BUCKET,
    env::EXCHANGE_PREFIX,
    env::SCHEDULER_ID,
    env::SCHEDULER_EXCHANGE_PREFIX,
    env::CLAIM_WORK_TIMEOUT_MS,
    env::EVENTS_FROM_STREAM,
    env::LOG_JSON,
    env::METRICS_NAMESPACE,
    env::METRICS_PER_QUEUE,
    // Every function that makes a run pending sends claimWork wake-ups through the broker.
    env::AMQP_URL,
    env::ANONYMOUS_SCOPES,
    env::AUTH_ROOT_URL,
    env::PRIORITY_AGING_MS,
    env::URL_SIGNER_ROLE_ARN,
];

/// The template parameter of the `anonymous` role's default scopes.
pub const ANONYMOUS_SCOPES: &str = "AnonymousScopes";

/// The template parameter that turns seed 003's exchange layout on (`TCQ_LEGACY_EXCHANGES`).
pub const LEGACY_EXCHANGES: &str = "LegacyExchanges";

/// Variables of the functions that publish to RabbitMQ (and declare the jobs' feed queues).
const BROKER_ENV: &[&str] = &[
    env::FEED_QUEUE_PREFIX,
    env::WORKER_MANAGER_EXCHANGE_PREFIX,
    env::LEGACY_EXCHANGES,
];

/// Variables of a function whose calls wait for work (a [`Reservation`]): its concurrency
/// and its long poll's pace.
const WAITING_ENV: &[&str] = &[
    env::CLAIM_WORK_CONCURRENCY,
    env::CLAIM_WORK_POLL_MS,
    env::CLAIM_WORK_POLL_MAX_MS,
];

/// What invokes a function.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// One route of the HTTP API: method and path with `<param>`/`<*param>`.
    Route {
        /// The method.
        verb: Verb,
        /// The whole path (the service's prefix and the endpoint's route).
        path: String,
        /// The integration's timeout, when not the gateway's default.
        timeout_ms: Option<u32>,
    },
    /// Every route under a prefix.
    Prefix(&'static str),
    /// An EventBridge schedule, the template parameter `<Handler>Rate` with this default.
    Schedule(&'static str),
    /// A table's stream (NEW_IMAGE), in batches of 100.
    Stream {
        /// The table.
        table: &'static str,
        /// Only records that resolve a task, or carry this index's entry (the dependency
        /// resolver's filter); `None`: every record.
        marked_by: Option<&'static str>,
        /// Retries of a failing batch before its record goes to the failure queue.
        retries: u32,
        /// Batches of a shard handled at once (`ParallelizationFactor`).
        parallel: u32,
    },
    /// A job's durable queue on the broker (Amazon MQ), named after the stack's:
    /// `<stack>-<queue>`.
    Broker {
        /// The queue's name after the stack's.
        queue: &'static str,
    },
    /// The HTTP API's `$default` route: every request that no other route matches.
    Default,
}

/// One function of the stack.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The function.
    pub function: Function,
    /// One line on what it does.
    pub description: String,
    /// Its timeout, in seconds.
    pub timeout_secs: u32,
    /// Its memory, in MB.
    pub memory_mb: u32,
    /// The tables and buckets it uses (every API function also reads `auth`).
    pub needs: Vec<Need>,
    /// The SQS queue its failed work is recorded in.
    pub failures_to: Option<&'static str>,
    /// Variables it reads beyond [`COMMON_ENV`].
    pub env: &'static [&'static str],
    /// What invokes it.
    pub triggers: Vec<Trigger>,
    /// The template parameter that sets its reserved concurrency, if it has one.
    pub reserved_concurrency: Option<&'static str>,
    /// Its routes are claim routes ([`shared::api::declare::Endpoint::claim_route`]): with
    /// `ClaimMode=service` the claim service serves them and the function is not deployed.
    pub claim_route: bool,
}

/// An endpoint function's timeout, in seconds: a quick call's, and a long-running one's
/// ([`shared::api::declare::Endpoint::long_running`]), within the gateway's 30 s.
pub const QUICK_SECS: u32 = 15;
/// See [`QUICK_SECS`].
pub const LONG_RUNNING_SECS: u32 = 29;

/// The timeout of a function that serves a long-running endpoint, or only quick ones.
fn timeout_secs(long_running: bool) -> u32 {
    if long_running {
        LONG_RUNNING_SECS
    } else {
        QUICK_SECS
    }
}

/// The template parameter of claimWork's reserved concurrency.
pub const CLAIM_WORK_CONCURRENCY: &str = shared::api::endpoints::claims::CLAIM_WORK.parameter;

/// claimWork's memory: it waits, mostly (docs/deploying.md's cost table has the measurement).
pub const CLAIM_WORK_MEMORY_MB: u32 = shared::api::endpoints::claims::CLAIM_WORK.memory_mb;

/// Each table or the buckets once, with the widest access any of `needs` asks for, in the
/// order they first appear.
pub fn union(needs: impl Iterator<Item = Need>) -> Vec<Need> {
    let resource = |n: &Need| match n {
        Need::Table(t, _) => Some(*t),
        Need::Buckets(_) => None,
    };
    let writes = |n: &Need| {
        matches!(
            n,
            Need::Table(_, Access::Write) | Need::Buckets(Access::Write)
        )
    };
    let mut out: Vec<Need> = vec![];
    for n in needs {
        match out.iter().position(|m| resource(m) == resource(&n)) {
            Some(i) if writes(&n) => out[i] = n,
            Some(_) => {}
            None => out.push(n),
        }
    }
    out
}

impl Function {
    /// What the template needs to know of this function.
    pub fn spec(&self) -> Spec {
        let base = |description: String, timeout_secs, memory_mb, needs, triggers| Spec {
            function: *self,
            description,
            timeout_secs,
            memory_mb,
            needs,
            failures_to: None,
            env: &[],
            triggers,
            reserved_concurrency: None,
            claim_route: false,
        };
        match *self {
            Function::Endpoint(service, e) => {
                // A long-running endpoint gets just under the gateway's 30 s integration
                // limit, so that the function's own timeout answers first.
                let route = Trigger::Route {
                    verb: e.verb,
                    path: format!("{}{}", service.prefix, e.route),
                    timeout_ms: e.long_running.then_some(LONG_RUNNING_SECS * 1000),
                };
                let what = format!(
                    "{} endpoint {} ({} {})",
                    service.title,
                    e.name,
                    e.verb.method(),
                    e.route
                );
                let spec = Spec {
                    claim_route: e.claim_route,
                    ..base(
                        what,
                        timeout_secs(e.long_running),
                        256,
                        e.needs.to_vec(),
                        vec![route],
                    )
                };
                match e.reservation {
                    Some(Reservation {
                        parameter,
                        memory_mb,
                    }) => Spec {
                        memory_mb,
                        env: WAITING_ENV,
                        reserved_concurrency: Some(parameter),
                        ..spec
                    },
                    None => spec,
                }
            }
            Function::Service(service) => {
                let needs = union(service.endpoints().flat_map(|e| e.needs.iter().copied()));
                let what = format!(
                    "The {} service (every route under {}/)",
                    service.name, service.prefix
                );
                let mut triggers = vec![Trigger::Prefix(service.prefix)];
                if service.serves_documents {
                    // The deployment's schemas and references (`shared::api::references`) are
                    // served by the smallest always-deployed function.
                    triggers.extend([Trigger::Prefix("/schemas"), Trigger::Prefix("/references")]);
                    // So are the other services' OpenAPI documents (its own is under its prefix).
                    triggers.extend(
                        shared::api::SERVICES
                            .iter()
                            .filter(|s| !std::ptr::eq(**s, service))
                            .map(|s| Trigger::Route {
                                verb: Verb::Get,
                                path: shared::api::openapi::path(s),
                                timeout_ms: None,
                            }),
                    );
                }
                // One function for every route: as long as its longest-running endpoint.
                let timeout = timeout_secs(service.endpoints().any(|e| e.long_running));
                base(what, timeout, 256, needs, triggers)
            }
            Function::Job(job) => {
                // A stream or the broker hands it the work as it is written; a schedule
                // sweeps (or is the whole trigger).
                let mut triggers: Vec<Trigger> = job
                    .schedule
                    .iter()
                    .map(|s| Trigger::Schedule(s.rate))
                    .collect();
                if let Some(streams) = &job.streams {
                    triggers.extend(streams.from.iter().map(|s| Trigger::Stream {
                        table: s.table,
                        marked_by: s.marked_by,
                        retries: s.retries,
                        parallel: s.parallel,
                    }));
                }
                if let Some(feed) = &job.broker {
                    triggers.push(Trigger::Broker { queue: feed.queue });
                }
                Spec {
                    failures_to: job.failures_to,
                    env: if job.publishes { BROKER_ENV } else { &[] },
                    ..base(
                        job.about.into(),
                        job.timeout_secs,
                        job.memory_mb,
                        job.needs.to_vec(),
                        triggers,
                    )
                }
            }
            // The same bundle as the local server's, from the binary: no bucket, no table.
            Function::Ui => base(
                "The web inspector: its pages and assets, for every path no API route takes".into(),
                10,
                128,
                vec![],
                vec![Trigger::Default],
            ),
        }
    }
}

/// Every function's spec, in the order of [`Function::all`].
pub fn specs() -> Vec<Spec> {
    Function::all().iter().map(Function::spec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LambdaConfig;
    use clap::CommandFactory;
    use shared::records::auth::AUTH;

    #[test]
    fn every_variable_a_function_gets_is_one_its_configuration_reads() {
        let cmd = LambdaConfig::command();
        let read: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        for spec in specs() {
            for var in COMMON_ENV.iter().chain(spec.env) {
                assert!(
                    read.iter().any(|r| r == var),
                    "{var} of {}",
                    spec.function.handler()
                );
            }
        }
    }

    #[test]
    fn the_auth_service_writes_its_table() {
        let auth = specs()
            .into_iter()
            .find(|s| {
                matches!(s.function, Function::Service(svc)
                    if std::ptr::eq(svc, &shared::api::auth_service::AUTH))
            })
            .expect("auth");
        assert_eq!(auth.needs, vec![Need::Table(AUTH, Access::Write)]);
    }
}
