//! The deployed shape, run locally: the generated SAM template (`infra/template.yaml`) brought
//! to life over LocalStack and the local RabbitMQ. Every function of the template runs as its
//! own process (the deployable `lambda` binary, with the handler and environment the template
//! gives it), behind:
//! - [`gateway`]: the HTTP API, with API Gateway's route selection, payloads and limits;
//! - [`streams`]: the DynamoDB stream event source mappings;
//! - [`schedules`]: the EventBridge schedules (sped up by a factor, for tests);
//! - [`mq`]: the Amazon MQ event source mapping, fed from RabbitMQ.
//!
//! Every piece is read from the template ([`template`]); its tables, queues, buckets and
//! secrets are created on LocalStack ([`resources`]). What is not emulated: IAM (every process
//! uses LocalStack's credentials), Amazon MQ itself (the local RabbitMQ stands in: the broker
//! URL is given, not read from the broker's secret), CloudWatch (alarms, logs), the gateway's
//! CORS answers, and cron schedules.

pub mod gateway;
pub mod lambda;
pub mod mq;
pub mod resources;
pub mod schedules;
pub mod service;
pub mod streams;
pub mod template;

use lambda::{Account, Functions};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use template::{Error, Source, Template};
use tokio::sync::watch;

/// How to run the deployed shape.
#[derive(Debug, Clone)]
pub struct ShapeConfig {
    /// The template (default `infra/template.yaml`).
    pub template: PathBuf,
    /// The stack's name: tables are `<stack>-tasks`, ...
    pub stack: String,
    /// Address and port of the HTTP API.
    pub bind: SocketAddr,
    /// The `lambda` binary every function runs.
    pub lambda_bin: PathBuf,
    /// The `tc-queue` binary every ECS service's task runs (its image's entry point).
    pub service_bin: PathBuf,
    /// Schedules fire this many times faster than the template says.
    pub speedup: f64,
    /// The RabbitMQ URL that stands in for the Amazon MQ broker's.
    pub amqp_url: String,
    /// Template parameters to override.
    pub parameters: Vec<(String, String)>,
    /// Variables set in every function besides the template's (AWS endpoint and credentials
    /// for LocalStack; test timings).
    pub env: BTreeMap<String, String>,
    /// The account's concurrency (Lambda's default is 1000).
    pub concurrency: usize,
    /// Where each function's output goes (`<dir>/<function id>.log`); none: discarded.
    pub log_dir: Option<PathBuf>,
    /// Schedules to run at another period than the template's rate divided by `speedup`
    /// (by handler), for tests that need one job much sooner than the others.
    pub periods: BTreeMap<String, std::time::Duration>,
    /// Delete the stack's tables, queues and secrets when the shape stops (tests); otherwise
    /// they stay, and a restarted shape finds its data.
    pub delete_on_stop: bool,
}

impl ShapeConfig {
    /// The defaults for a bench: the release `lambda` and `tc-queue` when built, the stack
    /// deleted when the shape stops, the test root client, and exchanges of its own.
    pub fn for_bench(stack: &str) -> ShapeConfig {
        let mut sc = ShapeConfig::defaults(stack);
        for bin in [&mut sc.lambda_bin, &mut sc.service_bin] {
            let release = bin
                .parent()
                .and_then(std::path::Path::parent)
                .zip(bin.file_name())
                .map(|(target, name)| target.join("release").join(name));
            if let Some(release) = release.filter(|r| r.exists()) {
                *bin = release;
            }
        }
        sc.delete_on_stop = true;
        sc.env.insert(
            "TCQ_ROOT_ACCESS_TOKEN".into(),
            crate::ROOT_ACCESS_TOKEN.into(),
        );
        sc.parameters = vec![(
            "ExchangePrefix".into(),
            format!("exchange/tcq-{stack}/queue/v1/"),
        )];
        sc
    }

    /// The defaults, in the workspace: `infra/template.yaml`, `target/debug/lambda`, the local
    /// RabbitMQ, LocalStack from the `AWS_*` variables.
    pub fn defaults(stack: &str) -> ShapeConfig {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut env = BTreeMap::new();
        for k in [
            "AWS_ENDPOINT_URL",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            if let Ok(v) = std::env::var(k) {
                env.insert(k.to_string(), v);
            }
        }
        env.insert(
            "RUST_LOG".into(),
            std::env::var("TCQ_SHAPE_LOG").unwrap_or_else(|_| "warn".into()),
        );
        ShapeConfig {
            template: root.join("infra/template.yaml"),
            stack: stack.to_string(),
            bind: "127.0.0.1:0".parse().expect("address"),
            lambda_bin: crate::runtime_api::built_binary("lambda"),
            service_bin: crate::runtime_api::built_binary("tc-queue"),
            speedup: 1.0,
            amqp_url: crate::amqp::amqp_url(&crate::amqp::broker_addr()),
            parameters: vec![],
            env,
            concurrency: 1000,
            log_dir: std::env::var("TCQ_SHAPE_LOG_DIR").ok().map(PathBuf::from),
            periods: BTreeMap::new(),
            delete_on_stop: false,
        }
    }
}

/// The ECS services' tasks, by the service's logical id.
pub type Services = BTreeMap<String, Arc<service::Tasks>>;

/// A running deployed shape.
pub struct Shape {
    /// Where the HTTP API listens.
    pub addr: SocketAddr,
    /// The stack's name.
    pub stack: String,
    /// The root client's access token (from the stack's secret).
    pub root_access_token: String,
    /// The stack's secrets' ARNs, by logical id.
    pub secrets: BTreeMap<String, String>,
    /// The functions.
    pub functions: Arc<Functions>,
    /// The ECS services' tasks, by the service's logical id.
    pub services: Arc<Services>,
    /// Where each function's output goes (`<logical id>.log`), if it is kept.
    pub log_dir: Option<PathBuf>,
    stop: watch::Sender<bool>,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The stack to delete when the shape stops (taken once deleted).
    delete: std::sync::Mutex<Option<Template>>,
    /// Each schedule's rule, by its function's handler: fires while true.
    rules: Vec<(String, Arc<AtomicBool>)>,
    /// The broker, and the durable queues its mappings read (deleted with the stack).
    broker: (String, Vec<String>),
}

/// One function's use so far (see [`Shape::usage`]).
#[derive(Debug, Clone)]
pub struct FunctionUsage {
    /// Its logical id.
    pub id: String,
    /// Its memory size, in MB.
    pub memory_mb: u64,
    /// Invocations so far.
    pub invocations: usize,
    /// Instances started so far.
    pub cold_starts: usize,
    /// Seconds its invocations took (hand-over to answer), summed.
    pub busy_secs: f64,
    /// CPU seconds of its idle instances (user and system).
    pub cpu_secs: f64,
    /// Process ids of its idle instances.
    pub pids: Vec<u32>,
}

impl Shape {
    /// Creates the stack's resources (keeping those that exist) and starts everything.
    pub async fn start(cfg: ShapeConfig) -> Result<Shape, Error> {
        if !cfg.lambda_bin.exists() {
            return Err(format!(
                "{} is missing: bash scripts/build-shape.sh",
                cfg.lambda_bin.display()
            )
            .into());
        }
        let mut t = Template::load(&cfg.template, &cfg.stack, &cfg.parameters)?;
        resources::create_all(&mut t).await?;
        let defs = t.functions()?;
        let routes = t.routes()?;
        if let Some(d) = &cfg.log_dir {
            std::fs::create_dir_all(d)?;
        }
        let mut extra = cfg.env.clone();
        extra.insert("TCQ_AMQP_URL".into(), cfg.amqp_url.clone());
        let mut services = Services::new();
        for def in t.services()? {
            if !cfg.service_bin.exists() {
                return Err(format!(
                    "{} is missing: bash scripts/build-shape.sh",
                    cfg.service_bin.display()
                )
                .into());
            }
            let id = def.id.clone();
            let tasks =
                service::Tasks::new(def, cfg.service_bin.clone(), &extra, cfg.log_dir.clone())
                    .await?;
            tasks.start_desired().await?;
            services.insert(id, Arc::new(tasks));
        }
        let services = Arc::new(services);
        let account = Account::new(cfg.concurrency);
        let functions = Arc::new(Functions::new(
            defs.clone(),
            cfg.lambda_bin.clone(),
            &extra,
            account,
            cfg.log_dir.clone(),
        ));
        let mut secrets = BTreeMap::new();
        for (id, _) in t.resources("AWS::SecretsManager::Secret") {
            let arn = t.resolve(&serde_json::json!({ "Ref": id }))?;
            secrets.insert(id, arn.as_str().unwrap_or_default().to_string());
        }
        let root_arn = secrets
            .get("RootAccessTokenSecret")
            .ok_or("the template has no RootAccessTokenSecret")?;
        let secret = resources::secret_value(root_arn).await?;
        let root_access_token = serde_json::from_str::<serde_json::Value>(&secret)
            .ok()
            .and_then(|v| v["accessToken"].as_str().map(String::from))
            .unwrap_or(secret);
        let broker_arn = t
            .resolve(&serde_json::json!({ "Fn::GetAtt": ["Broker", "Arn"] }))
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();

        let (stop, stopped) = watch::channel(false);
        let mut tasks = vec![];
        let mut rules = vec![];
        let mut broker_queues: Vec<String> = vec![];
        let listener = tokio::net::TcpListener::bind(cfg.bind).await?;
        let addr = listener.local_addr()?;
        let app = gateway::Gateway::new(routes, functions.clone(), services.clone()).router();
        let mut stop_rx = stopped.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            };
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await;
        }));
        for def in &defs {
            let pool = functions.get(&def.id).ok_or("a function without a pool")?;
            for source in &def.sources {
                if let Source::Broker(m) = source {
                    broker_queues.extend(m.queues.iter().cloned());
                }
                let stop = stopped.clone();
                let pool = pool.clone();
                tasks.push(match source.clone() {
                    Source::Schedule(period) => {
                        let every = match cfg.periods.get(&def.handler) {
                            Some(p) => *p,
                            None => period.div_f64(cfg.speedup.max(1.0)),
                        };
                        let enabled = Arc::new(AtomicBool::new(true));
                        rules.push((def.handler.clone(), enabled.clone()));
                        tokio::spawn(schedules::run(
                            pool,
                            enabled,
                            every,
                            period,
                            cfg.speedup,
                            stop,
                        ))
                    }
                    Source::Stream(m) => tokio::spawn(streams::run(pool, m, stop)),
                    Source::Broker(m) => tokio::spawn(mq::run(
                        pool,
                        m,
                        cfg.amqp_url.clone(),
                        broker_arn.clone(),
                        stop,
                    )),
                });
            }
        }
        Ok(Shape {
            addr,
            stack: cfg.stack.clone(),
            root_access_token,
            secrets,
            functions,
            services,
            log_dir: cfg.log_dir.clone(),
            stop,
            tasks: std::sync::Mutex::new(tasks),
            delete: std::sync::Mutex::new(cfg.delete_on_stop.then_some(t)),
            rules,
            broker: (cfg.amqp_url.clone(), broker_queues),
        })
    }

    /// `http://<addr>`, the rootUrl for clients.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Invocations of the function with `handler` so far.
    pub fn invocations(&self, handler: &str) -> usize {
        self.functions
            .all()
            .filter(|p| p.def.handler == handler)
            .map(|p| p.invocations.load(std::sync::atomic::Ordering::SeqCst))
            .sum()
    }

    /// Enables or disables the schedules of the functions with `handler`, as EventBridge's
    /// EnableRule and DisableRule do: a disabled rule does not fire (an invocation it started
    /// runs on). A burst test holds its reaper's schedule while it seeds, so that every task
    /// comes due at one moment however long seeding takes.
    pub fn set_schedule_enabled(&self, handler: &str, enabled: bool) {
        for (h, rule) in &self.rules {
            if h == handler {
                rule.store(enabled, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// Each function's invocations, cold starts and the CPU of its idle instances so far, by
    /// logical id (read while nothing is invoked, as [`Shape::idle_cpu_secs`]).
    pub fn usage(&self) -> Vec<FunctionUsage> {
        use std::sync::atomic::Ordering::SeqCst;
        self.functions
            .all()
            .map(|p| FunctionUsage {
                id: p.def.id.clone(),
                memory_mb: p.def.memory_mb,
                invocations: p.invocations.load(SeqCst),
                cold_starts: p.cold_starts.load(SeqCst),
                busy_secs: p.busy_micros.load(SeqCst) as f64 / 1e6,
                cpu_secs: p.idle_cpu_secs(),
                pids: p.idle_pids(),
            })
            .collect()
    }

    /// Invocations of every function so far.
    pub fn all_invocations(&self) -> usize {
        self.functions
            .all()
            .map(|p| p.invocations.load(std::sync::atomic::Ordering::SeqCst))
            .sum()
    }

    /// CPU seconds of the idle instances of the functions with `handler`, or of every
    /// function with `None` (see [`lambda::Pool::idle_cpu_secs`]).
    pub fn idle_cpu_secs(&self, handler: Option<&str>) -> f64 {
        self.functions
            .all()
            .filter(|p| handler.is_none_or(|h| p.def.handler == h))
            .map(|p| p.idle_cpu_secs())
            .sum()
    }

    /// A variable as the template sets it in the functions (the first that has it).
    pub fn function_env(&self, var: &str) -> Option<String> {
        self.functions
            .all()
            .find_map(|p| p.def.env.get(var).cloned())
    }

    /// Stops the gateway, the pollers and every function's processes, and deletes the stack
    /// if it is to go (once: a second call does nothing).
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        self.functions.stop();
        for s in self.services.values() {
            s.stop_all();
        }
        let delete = lock(&self.delete).take();
        if let Some(t) = delete {
            resources::delete_all(&t).await;
            mq::delete_queues(&self.broker.0, &self.broker.1).await;
        }
    }
}

/// The guarded value, also after a panic elsewhere (what it guards stays consistent).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Shape {
    /// Whatever is still running stops with the shape (a test that ends without `stop`), and
    /// the stack goes if it is to: on a thread of its own, since drop cannot await.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in lock(&self.tasks).iter() {
            t.abort();
        }
        self.functions.stop();
        for s in self.services.values() {
            s.stop_all();
        }
        if let Some(t) = lock(&self.delete).take() {
            let deleted = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(resources::delete_all(&t));
                }
            });
            let _ = deleted.join();
        }
    }
}
