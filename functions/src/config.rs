//! Configuration, read once per process from flags and environment variables (clap), one
//! typed struct per process kind: [`ServerConfig`] for `tc-queue` and [`LambdaConfig`] for a
//! Lambda function; both carry the [`QueueSettings`] every process has. Every variable is
//! documented here (`--help` prints it) and in docs/operating.md's Configuration table. LocalStack and
//! AWS are reached only through the standard `AWS_*` variables.

use crate::env;
use clap::{Args, Parser};
use shared::queue::QueueConfig;
use std::path::PathBuf;

/// Settings of the queue, the same in every process of one deployment.
#[derive(Debug, Clone, Args)]
pub struct QueueSettings {
    /// How long a claim lasts before it must be reclaimed, in seconds.
    #[arg(long, env = env::CLAIM_TIMEOUT, default_value_t = 1200)]
    pub claim_timeout_secs: u64,
    /// How long claimWork waits for work, in milliseconds.
    #[arg(long, env = env::CLAIM_WORK_TIMEOUT_MS, default_value_t = 20_000)]
    pub claim_work_timeout_ms: u64,
    /// A waiting claimWork re-reads the pending index this long after its first empty read,
    /// in milliseconds (then less and less often, up to the maximum below).
    #[arg(long, env = env::CLAIM_WORK_POLL_MS, default_value_t = shared::queue::PollSchedule::default().first_ms)]
    pub claim_work_poll_ms: u64,
    /// Longest interval between a waiting claimWork's reads of the pending index, in
    /// milliseconds.
    #[arg(long, env = env::CLAIM_WORK_POLL_MAX_MS, default_value_t = shared::queue::PollSchedule::default().max_ms)]
    pub claim_work_poll_max_ms: u64,
    /// The concurrency reserved for claimWork (the claim-work function's, as deployed): at
    /// most four fifths of it may wait at once, so that calls that find work always get an
    /// instance; past that, a call that finds no work answers at once. Unset: unlimited.
    #[arg(long, env = env::CLAIM_WORK_CONCURRENCY)]
    pub claim_work_concurrency: Option<u32>,
    /// Longest allowed task deadline, in days.
    #[arg(long, env = env::MAX_TASK_DEADLINE_DAYS, default_value_t = 5)]
    pub max_task_deadline_days: i64,
    /// How long a task group outlives its longest-lived task, in milliseconds.
    #[arg(long, env = env::GROUP_EXPIRY_EXTENSION_MS, default_value_t = shared::queue::GROUP_EXPIRY_EXTENSION_MS)]
    pub group_expiry_extension_ms: i64,
    /// How long a process goes without re-recording a task queue or worker it keeps seeing,
    /// in milliseconds (upstream's 30 minutes).
    #[arg(long, env = env::WORKER_INFO_THROTTLE_MS, default_value_t = QueueConfig::default().worker_info_throttle_ms)]
    pub worker_info_throttle_ms: i64,
    /// Claimed runs held back per worker before they are written to its recentTasks together.
    #[arg(long, env = env::RECENT_TASKS_BATCH, default_value_t = QueueConfig::default().recent_tasks_batch)]
    pub recent_tasks_batch: usize,
    /// Longest a claimed run is held back from its worker's recentTasks, in milliseconds.
    #[arg(long, env = env::RECENT_TASKS_DELAY_MS, default_value_t = QueueConfig::default().recent_tasks_delay_ms)]
    pub recent_tasks_delay_ms: i64,
    /// How long a run waits pending before it is claimed ahead of every run that waited
    /// less, whatever their priorities, in milliseconds (0: never, upstream's strict order).
    #[arg(long, env = env::PRIORITY_AGING_MS, default_value_t = shared::queue::PRIORITY_AGING_MS as u64)]
    pub priority_aging_ms: u64,
    /// How many members of a task group one cancelTaskGroup or changeTaskGroupPriority call
    /// goes through before it answers; the `groupChanges` job does the rest.
    #[arg(long, env = env::GROUP_CALL_TASKS, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub group_call_tasks: u64,
    /// How many of a resolved task's dependents the dependency resolver satisfies a second
    /// (their edges share one DynamoDB partition; 0: unpaced). Unset: 400 on DynamoDB,
    /// unpaced on the embedded store, which has no partitions.
    #[arg(long, env = env::DEPENDENTS_PER_SEC)]
    pub dependents_per_sec: Option<u32>,
    /// Prefix of every exchange name.
    #[arg(long, env = env::EXCHANGE_PREFIX, default_value = shared::routing::DEFAULT_EXCHANGE_PREFIX)]
    pub exchange_prefix: String,
    /// Prefix of the task-graph scheduler's exchange names.
    #[arg(long, env = env::SCHEDULER_EXCHANGE_PREFIX, default_value = shared::routing::SCHEDULER_EXCHANGE_PREFIX)]
    pub scheduler_exchange_prefix: String,
    /// The tables' streams trigger the publisher and the dependency resolver on every write
    /// (the AWS deployment sets it for every function): task records then store only each
    /// write's own events, without the outbox and resolved index entries unless a stream
    /// function failed. Unset: on for the local server over the embedded store, which keeps
    /// its own change log and follows it as the streams' functions would; off for a function,
    /// and for the local server over DynamoDB, which publishes from the outboxes in process.
    #[arg(long, env = env::EVENTS_FROM_STREAM, action = clap::ArgAction::Set)]
    pub events_from_stream: Option<bool>,
    /// Also publish seed 003's exchange layout (`v1/queue:task-*`, seven-word routing keys)
    /// next to today's, from the same outbox.
    #[arg(long, env = env::LEGACY_EXCHANGES, default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub legacy_exchanges: bool,
    /// The task-graph scheduler's schedulerId.
    #[arg(long, env = env::SCHEDULER_ID, default_value = shared::scheduler::DEFAULT_SCHEDULER_ID)]
    pub scheduler_id: String,
    /// Prefix of the durable queues on the broker that feed jobs (`<prefix>worker-removed`,
    /// `<prefix>task-graph-scheduler`); as deployed, `<stack>-`.
    #[arg(long, env = env::FEED_QUEUE_PREFIX, default_value = "tc-queue-")]
    pub feed_queue_prefix: String,
    /// Prefix of worker-manager's exchanges, whose `worker-stopped` and `worker-removed`
    /// messages resolve the runs of the workers they name.
    #[arg(long, env = env::WORKER_MANAGER_EXCHANGE_PREFIX, default_value = "exchange/taskcluster-worker-manager/v1/")]
    pub worker_manager_exchange_prefix: String,
    /// clientId the queue issues temporary credentials as.
    #[arg(
        long,
        env = env::QUEUE_CLIENT_ID,
        default_value = "static/taskcluster/queue"
    )]
    pub queue_client_id: String,
    /// Root URL of an existing Taskcluster deployment whose auth service authenticates every
    /// request (`authenticateHawk`, as upstream's services do); this queue's own auth API is
    /// then not served. Unset: this queue's clients and roles are the authority.
    #[arg(long, env = env::AUTH_ROOT_URL)]
    pub auth_root_url: Option<String>,
    /// Scopes of the `anonymous` role (what unsigned requests may do) until a role named
    /// `anonymous` is stored through the auth API; comma- or space-separated.
    #[arg(long, env = env::ANONYMOUS_SCOPES)]
    pub anonymous_scopes: Option<String>,
    /// Prefix of the DynamoDB table names (`<prefix>tasks`, `<prefix>task-groups`, ...).
    #[arg(long, env = env::TABLE_PREFIX, default_value = "tcq-")]
    pub table_prefix: String,
    /// Where artifact bytes live: `local` (files under the data directory, served by this
    /// server behind signed URLs) or `s3`. Default: `s3` with DynamoDB, else `local`.
    #[arg(long, env = env::ARTIFACT_STORAGE, value_parser = ["local", "s3"])]
    pub artifact_storage: Option<String>,
    /// S3 bucket of `public/…` artifacts (default `<table prefix>public-artifacts`).
    #[arg(long, env = env::PUBLIC_ARTIFACT_BUCKET)]
    pub public_artifact_bucket: Option<String>,
    /// S3 bucket of every other artifact (default `<table prefix>private-artifacts`).
    #[arg(long, env = env::PRIVATE_ARTIFACT_BUCKET)]
    pub private_artifact_bucket: Option<String>,
    /// Base URL (a CDN) that replaces the public bucket's URL in downloads.
    #[arg(long, env = env::PUBLIC_ARTIFACT_BUCKET_CDN)]
    pub public_artifact_cdn: Option<String>,
    /// A role whose sessions sign the presigned S3 URLs (each lasting an hour and renewed
    /// before it runs shorter than a URL), so that no URL dies with the process's own
    /// temporary credentials. Unset: the process's credentials sign.
    #[arg(long, env = env::URL_SIGNER_ROLE_ARN)]
    pub url_signer_role_arn: Option<String>,
    /// How long after `expires` an artifact is deleted (downloads answer 410 meanwhile).
    #[arg(long, env = env::ARTIFACT_EXPIRY_GRACE_MS, default_value_t = shared::queue::artifacts::EXPIRY_GRACE_MS)]
    pub artifact_expiry_grace_ms: i64,
    /// Name of the Secrets Manager secret holding the queue's access token (a bare token or
    /// JSON with `accessToken`), used when `TCQ_QUEUE_ACCESS_TOKEN` is unset; read at start
    /// and again as rotated ([`shared::tokens`]).
    #[arg(long, env = env::QUEUE_ACCESS_TOKEN_SECRET)]
    pub queue_access_token_secret: Option<String>,
    /// Name of the Secrets Manager secret holding the root client's access token, used when
    /// `TCQ_ROOT_ACCESS_TOKEN` is unset.
    #[arg(long, env = env::ROOT_ACCESS_TOKEN_SECRET)]
    pub root_access_token_secret: Option<String>,
    /// How often a token read from Secrets Manager is read again (at its next use), in ms;
    /// a signature that fails reads it at once.
    #[arg(long, env = env::TOKEN_REFRESH_MS, default_value_t = shared::tokens::Rotation::default().refresh_ms)]
    pub token_refresh_ms: i64,
    /// How long after a rotation the token before still verifies temporary credentials
    /// (certificates) it signed, in ms.
    #[arg(long, env = env::TOKEN_GRACE_MS, default_value_t = shared::tokens::Rotation::default().grace_ms)]
    pub token_grace_ms: i64,
    /// Log JSON lines instead of text (`RUST_LOG` sets the filter, default `info`).
    #[arg(long, env = env::LOG_JSON, default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub log_json: bool,
}

impl QueueSettings {
    /// The durable queue on the broker that feeds `feed`'s job, named and bound as these
    /// settings say.
    pub fn feed_queue(
        &self,
        feed: &shared::jobs::declare::Feed,
    ) -> shared::events::amqp::DurableQueue {
        shared::events::amqp::FeedBindings {
            exchange_prefix: &self.exchange_prefix,
            scheduler_id: &self.scheduler_id,
            worker_manager_prefix: &self.worker_manager_exchange_prefix,
        }
        .queue(
            format!("{}{}", self.feed_queue_prefix, feed.queue),
            feed.binds,
        )
    }

    /// The RabbitMQ sink of the broker at `url`: today's exchanges and the scheduler's under
    /// their prefixes, and seed 003's too in the legacy mode.
    pub fn amqp_sink(&self, url: &str) -> shared::events::amqp::AmqpSink {
        let sink = shared::events::amqp::AmqpSink::new(url, self.exchange_prefix.clone())
            .with_scheduler_prefix(self.scheduler_exchange_prefix.clone());
        if self.legacy_exchanges {
            sink.with_legacy_exchanges(self.scheduler_id.clone())
        } else {
            sink
        }
    }

    /// The queue tunables these settings select.
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            claim_timeout_ms: (self.claim_timeout_secs * 1000) as i64,
            claim_work_timeout_ms: self.claim_work_timeout_ms as i64,
            claim_work_slots: self
                .claim_work_concurrency
                .map(|r| r.saturating_sub((r / 5).max(1)).max(1)),
            claim_work_poll: shared::queue::PollSchedule {
                first_ms: self.claim_work_poll_ms,
                max_ms: self.claim_work_poll_max_ms,
            },
            max_task_deadline_days: self.max_task_deadline_days,
            group_expiry_extension_ms: self.group_expiry_extension_ms,
            exchange_prefix: self.exchange_prefix.clone(),
            scheduler_exchange_prefix: self.scheduler_exchange_prefix.clone(),
            events_from_stream: self.events_from_stream.unwrap_or(false),
            worker_info_throttle_ms: self.worker_info_throttle_ms,
            recent_tasks_batch: self.recent_tasks_batch,
            recent_tasks_delay_ms: self.recent_tasks_delay_ms,
            priority_aging_ms: i64::try_from(self.priority_aging_ms).unwrap_or(i64::MAX),
            group_call_tasks: self.group_call_tasks,
            dependents_per_sec: self
                .dependents_per_sec
                .unwrap_or(shared::queue::DEPENDENTS_PER_SEC),
            ..QueueConfig::default()
        }
    }

    /// When tokens read from Secrets Manager are read again.
    pub fn rotation(&self) -> shared::tokens::Rotation {
        shared::tokens::Rotation {
            refresh_ms: self.token_refresh_ms,
            grace_ms: self.token_grace_ms,
        }
    }

    /// Scopes of the default `anonymous` role.
    pub fn anonymous_scopes(&self) -> Vec<String> {
        match &self.anonymous_scopes {
            Some(s) => s
                .split([',', ' ', '\n'])
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect(),
            None => shared::auth::DEFAULT_ANONYMOUS_SCOPES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }

    /// An artifact bucket: as configured, else `<table prefix><what>-artifacts`.
    pub fn bucket(&self, public: bool) -> String {
        let (given, what) = if public {
            (&self.public_artifact_bucket, "public")
        } else {
            (&self.private_artifact_bucket, "private")
        };
        given
            .clone()
            .unwrap_or_else(|| format!("{}{what}-artifacts", self.table_prefix))
    }
}

/// Configuration of the local server (`tc-queue`, `cargo run`).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "tc-queue",
    version,
    about = "The Taskcluster Queue, served locally on an embedded backend"
)]
pub struct ServerConfig {
    /// Address to listen on.
    #[arg(long, env = env::BIND, default_value = "127.0.0.1")]
    pub bind: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = env::PORT, default_value_t = 8080)]
    pub port: u16,
    /// Serve Prometheus metrics at `/metrics` on this port, bound to the API's address
    /// (0 picks a free one); off when unset.
    #[arg(long, env = env::METRICS_PORT, conflicts_with = "metrics_emf_secs")]
    pub metrics_port: Option<u16>,
    /// Print what was counted as CloudWatch EMF lines on stdout every this many seconds (the
    /// claim service of `ClaimMode=service`, whose log driver sends stdout to CloudWatch);
    /// off when unset.
    #[arg(long, env = env::METRICS_EMF_SECS)]
    pub metrics_emf_secs: Option<u64>,
    /// The CloudWatch namespace of those lines.
    #[arg(long, env = env::METRICS_NAMESPACE, default_value = "tcq")]
    pub metrics_namespace: String,
    /// Directory for the database and the queue's credentials.
    #[arg(long, env = env::DATA_DIR, default_value = ".data")]
    pub data_dir: PathBuf,
    /// Storage backend: `embedded` (SQLite under the data directory) or `aws` (DynamoDB,
    /// configured by the standard AWS environment: AWS_REGION, AWS_ENDPOINT_URL, credentials).
    #[arg(long, env = env::BACKEND, default_value = "embedded", value_parser = ["embedded", "aws"])]
    pub backend: String,
    /// With the aws backend: create missing tables (and buckets) at start (LocalStack, tests).
    #[arg(long, env = env::CREATE_TABLES, default_value_t = false)]
    pub create_tables: bool,
    /// SQLite durability: `NORMAL` survives a killed process, `FULL` also power loss.
    #[arg(long, env = env::SQLITE_SYNC, default_value = "NORMAL", value_parser = ["NORMAL", "FULL"], ignore_case = true)]
    pub sqlite_sync: String,
    /// With the embedded backend: answer secondary-index queries (and eventually consistent
    /// reads) as they stood this many ms ago, as DynamoDB's may lag; for testing that
    /// nothing relies on an index being current. Off when unset.
    #[arg(long, env = env::INDEX_LAG_MS)]
    pub index_lag_ms: Option<u64>,
    /// How often the claim and deadline reapers (and the dependency sweep) run, in ms.
    #[arg(long, env = env::REAPER_INTERVAL_MS, default_value_t = 500)]
    pub reaper_interval_ms: u64,
    /// How often the expiry passes (artifacts; tasks, edges and groups) run, in ms.
    #[arg(
        long,
        env = env::ARTIFACT_REAPER_INTERVAL_MS,
        default_value_t = 60_000
    )]
    pub artifact_reaper_interval_ms: u64,
    /// Run the scheduler's consumer of resolution messages in this process (off when another
    /// consumer, such as the AWS function, reacts to them instead).
    #[arg(long, env = env::SCHEDULER_CONSUMER, default_value_t = true, action = clap::ArgAction::Set)]
    pub scheduler_consumer: bool,
    /// Run the background jobs (reapers, expiry passes, the publisher, the scheduler's
    /// consumer) in this process. Off for a process that only serves requests beside the
    /// stack's functions, which run the jobs (the claim service of `ClaimMode=service`).
    #[arg(long, env = env::JOBS, default_value_t = true, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub jobs: bool,
    /// Requests come through API Gateway's HTTP API (an HTTP proxy integration): the path
    /// may arrive decoded and the `Host` is the backend's, so the path the client signed is
    /// rebuilt as the functions rebuild it, and the host it signed is read from the header
    /// the integration sets (`x-tcq-forwarded-host`), else the gateway's `Forwarded`.
    #[arg(long, env = env::BEHIND_GATEWAY, default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub behind_gateway: bool,
    /// Check that a server on `--port` of this host answers, then exit: 0 when it does, 1
    /// when not (a container's health check; the image has no shell and no curl).
    #[arg(long)]
    pub health_check: bool,
    /// accessToken of the queue's client; generated and kept in the data directory when unset.
    #[arg(long, env = env::QUEUE_ACCESS_TOKEN, hide_env_values = true)]
    pub queue_access_token: Option<String>,
    /// accessToken of the root client `static/taskcluster/root` (scopes `*`); generated and
    /// kept in the data directory (`root-credentials.json`, owner-only) when unset.
    #[arg(long, env = env::ROOT_ACCESS_TOKEN, hide_env_values = true)]
    pub root_access_token: Option<String>,
    /// Publish events to this RabbitMQ broker (e.g. `amqp://guest:guest@127.0.0.1:5672`), as
    /// well as to the given sink.
    #[arg(long, env = env::AMQP_URL, hide_env_values = true)]
    pub amqp_url: Option<String>,
    /// The queue itself.
    #[command(flatten)]
    pub queue: QueueSettings,
}

impl ServerConfig {
    /// The defaults, as `tc-queue` with no flags and no environment would use.
    pub fn defaults() -> Self {
        ServerConfig::parse_from(["tc-queue"])
    }

    /// True on DynamoDB.
    pub fn on_aws(&self) -> bool {
        self.backend == "aws"
    }

    /// SQLite's durability setting.
    pub fn sqlite_sync(&self) -> shared::store::sqlite::Sync {
        if self.sqlite_sync.eq_ignore_ascii_case("FULL") {
            shared::store::sqlite::Sync::Full
        } else {
            shared::store::sqlite::Sync::Normal
        }
    }
}

/// Configuration of a Lambda function: the environment its SAM definition gives it (see
/// `lambda::Function::environment`) and the variables Lambda sets itself.
#[derive(Debug, Clone, Parser)]
#[command(name = "lambda", about = "Every Lambda function of the queue's stack")]
pub struct LambdaConfig {
    /// What the function serves (Lambda passes the function's `Handler` on as `_HANDLER`).
    #[arg(long, env = env::HANDLER)]
    pub handler: Option<String>,
    /// The function's name: without `_HANDLER`, the handler is found from it.
    #[arg(long, env = env::AWS_LAMBDA_FUNCTION_NAME)]
    pub function_name: Option<String>,
    /// The queue's access token (it issues workers' temporary credentials).
    #[arg(long, env = env::QUEUE_ACCESS_TOKEN, hide_env_values = true)]
    pub queue_access_token: Option<String>,
    /// The root client's access token (without it there is no root client).
    #[arg(long, env = env::ROOT_ACCESS_TOKEN, hide_env_values = true)]
    pub root_access_token: Option<String>,
    /// The RabbitMQ (Amazon MQ) broker the publisher and the outbox sweeper publish to.
    #[arg(long, env = env::AMQP_URL, hide_env_values = true)]
    pub amqp_url: Option<String>,
    /// The CloudWatch namespace of the metrics each invocation prints (EMF lines on stdout).
    #[arg(long, env = env::METRICS_NAMESPACE, default_value = "tcq")]
    pub metrics_namespace: String,
    /// Deploy the gauges per task queue as CloudWatch metrics of their own (one per task
    /// queue and gauge, billed by the hour); off: totals only, the per-queue figures staying
    /// in the log lines.
    #[arg(long, env = env::METRICS_PER_QUEUE, default_value_t = true, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics_per_queue: bool,
    /// The queue itself.
    #[command(flatten)]
    pub queue: QueueSettings,
}

impl LambdaConfig {
    /// Reads the environment; a malformed value is named.
    pub fn from_env() -> Result<Self, clap::Error> {
        LambdaConfig::try_parse_from(["lambda"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_process_kinds_parse_their_defaults() {
        let s = ServerConfig::defaults();
        assert_eq!(s.port, 8080);
        assert_eq!(s.queue.claim_timeout_secs, 1200);
        assert_eq!(s.queue.bucket(true), "tcq-public-artifacts");
        let l = LambdaConfig::try_parse_from(["lambda", "--table-prefix", "x-"]).unwrap();
        assert_eq!(l.queue.table_prefix, "x-");
        assert_eq!(l.queue.queue_config().claim_work_timeout_ms, 20_000);
    }
}
