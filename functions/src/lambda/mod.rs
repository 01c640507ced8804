//! Every Lambda function of the stack, in one binary (`src/bin/lambda.rs`): release builds
//! link with LTO, about 80 s per binary, so one artifact that every function of the SAM
//! template points at pays that once. Each function says what it is through its `Handler`
//! (which `provided.al2023` passes on as `_HANDLER`), else through its name.
//!
//! - [`Function`]: what one function serves, and its name and handler;
//! - [`catalog`]: every function with its configuration, which the SAM template is made from;
//! - [`http`]: the API behind API Gateway, and the web inspector on its `$default` route;
//! - [`background`]: the stream-triggered, scheduled and broker-fed functions.

/// Longest a function delays its answer for the claimWork wake-ups it notified to leave (it
/// is frozen once it answers).
pub(crate) const WAKEUP_FLUSH: std::time::Duration = std::time::Duration::from_millis(50);

pub mod background;
pub mod catalog;
pub mod http;

use crate::assemble;
use crate::config::LambdaConfig;
use shared::api::declare::{Endpoint, Functions, Service};
use shared::api::Api;
use shared::api::{Serves, SERVICES};
use shared::creds::Issuer;
use shared::jobs::{Job, JOBS};
use shared::metrics::Metrics;
use shared::queue::Queue;
use std::sync::Arc;

type Error = lambda_runtime::Error;

/// What one function serves.
#[derive(Debug, Clone, Copy)]
pub enum Function {
    /// One endpoint of a service cut into a function per endpoint.
    Endpoint(&'static Service, &'static Endpoint),
    /// A whole service (the auth service).
    Service(&'static Service),
    /// A background job: the publisher on the tables' streams, the scheduled ones, the
    /// task-graph scheduler's consumer of the broker's resolution messages.
    Job(&'static Job),
    /// The web inspector: every request no API route takes (the HTTP API's `$default`).
    Ui,
}

impl Function {
    /// Every function of the stack: the services' (from their declarations), then the
    /// background ones.
    pub fn all() -> Vec<Function> {
        let mut out = vec![];
        for service in SERVICES {
            match service.functions {
                Functions::One { .. } => out.push(Function::Service(service)),
                Functions::PerEndpoint { .. } => {
                    out.extend(service.endpoints().map(|e| Function::Endpoint(service, e)))
                }
            }
        }
        out.extend(JOBS.map(Function::Job));
        out.push(Function::Ui);
        out
    }

    /// Its handler name (the SAM function's `Handler`), e.g. `claimWork`, `auth`,
    /// `schedulerCreateTaskGraph`, `claimReaper`.
    pub fn handler(&self) -> String {
        match self {
            Function::Endpoint(s, e) => s.handler_name(e),
            Function::Service(s) => match s.functions {
                Functions::One { handler } => handler.to_string(),
                Functions::PerEndpoint { .. } => s.name.to_string(),
            },
            Function::Job(j) => j.name.into(),
            Function::Ui => "ui".into(),
        }
    }

    /// Its name: the handler in kebab case (`claim-work`).
    pub fn name(&self) -> String {
        kebab(&self.handler())
    }

    /// The function whose handler is `handler`.
    pub fn resolve(handler: &str) -> Option<Function> {
        Function::all().into_iter().find(|f| f.handler() == handler)
    }

    /// The function for a name such as `claim-work` or `mystack-claim-work`, for runs without
    /// `_HANDLER` (the test harness, a hand-made function). The longest match wins, so
    /// `x-latest-artifact` is `latestArtifact`, not `artifact`.
    pub fn resolve_name(function_name: &str) -> Option<Function> {
        Function::all()
            .into_iter()
            .map(|f| (f.name(), f))
            .filter(|(k, _)| {
                function_name == k
                    || function_name
                        .strip_suffix(k.as_str())
                        .is_some_and(|head| head.ends_with('-'))
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(_, f)| f)
    }

    /// The function this process is: `_HANDLER`, else the function's name.
    pub fn from_config(cfg: &LambdaConfig) -> Result<Function, Error> {
        if let Some(h) = &cfg.handler {
            return Function::resolve(h)
                .ok_or_else(|| format!("unknown handler {h:?} (_HANDLER)").into());
        }
        let f = cfg
            .function_name
            .as_deref()
            .ok_or("neither _HANDLER nor AWS_LAMBDA_FUNCTION_NAME is set")?;
        Function::resolve_name(f)
            .ok_or_else(|| format!("no handler matches function name {f:?}").into())
    }

    /// True if it reads the static clients' secrets (Secrets Manager) at its cold start: every
    /// function but the inspector's, which only hands out its embedded bundle.
    pub fn reads_secrets(&self) -> bool {
        !matches!(self, Function::Ui)
    }

    /// What an API function answers (`None` for the others, the inspector included).
    pub fn serves(&self) -> Option<Serves> {
        match self {
            Function::Endpoint(_, e) => Some(Serves::Endpoint(e)),
            Function::Service(s) => Some(Serves::Service(s)),
            _ => None,
        }
    }
}

/// `claimWork` -> `claim-work`: the functions' naming.
pub fn kebab(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The three services over DynamoDB (and S3 unless `TCQ_ARTIFACT_STORAGE` says otherwise),
/// as configured. A missing variable is named here, at cold start, rather than failing the
/// first request.
///
/// Secrets: the queue's access token (required) and the root client's (optional; without it
/// there is no root client, and clients must already exist in the `auth` table).
pub async fn api(cfg: &LambdaConfig) -> Result<Api, Error> {
    let (token, root) = assemble::static_tokens(
        cfg.queue_access_token.as_deref(),
        cfg.root_access_token.as_deref(),
        &cfg.queue,
    )
    .await?;
    let token = token.ok_or("TCQ_QUEUE_ACCESS_TOKEN or TCQ_QUEUE_ACCESS_TOKEN_SECRET is not set (the queue's credentials, used to issue workers' temporary credentials)")?;
    if root.is_none() {
        tracing::warn!("TCQ_ROOT_ACCESS_TOKEN is not set: no root client");
    }
    let store = Arc::new(assemble::open_dynamodb(&cfg.queue, false).await?);
    let issuer = Issuer {
        client_id: cfg.queue.queue_client_id.clone(),
        token,
    };
    let auth = assemble::auth_service(
        store.clone(),
        root.as_ref(),
        &issuer,
        cfg.queue.anonymous_scopes(),
    );
    let blobs: Arc<dyn shared::blobs::BlobStore> = match cfg.queue.artifact_storage.as_deref() {
        Some("local") => Arc::new(shared::blobs::NoBlobs),
        _ => Arc::new(assemble::open_s3(&cfg.queue, false).await?),
    };
    let queue = Arc::new(
        Queue::new(
            store,
            assemble::work_signal(cfg.amqp_url.as_deref(), &cfg.queue),
            issuer,
            cfg.queue.queue_config(),
        )
        .with_metrics(Arc::new(Metrics::draining(cfg.metrics_per_queue))),
    );
    Ok(assemble::api(queue, auth, blobs, &cfg.queue))
}

/// Runs the function this process is until the Lambda runtime stops it.
pub async fn run(cfg: LambdaConfig) -> Result<(), Error> {
    crate::init_tracing(cfg.queue.log_json);
    let function = Function::from_config(&cfg)?;
    match function {
        Function::Endpoint(..) | Function::Service(_) => {
            let serves = function.serves().ok_or("not an HTTP function")?;
            http::serve(cfg, serves).await
        }
        Function::Job(job) => background::serve_job(cfg, job).await,
        Function::Ui => http::serve_ui().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler_of(f: Option<Function>) -> Option<String> {
        f.map(|f| f.handler())
    }

    #[test]
    fn functions_resolve_by_handler_and_by_name() {
        assert_eq!(
            handler_of(Function::resolve("claimWork")).as_deref(),
            Some("claimWork")
        );
        assert!(matches!(
            Function::resolve("auth"),
            Some(Function::Service(_))
        ));
        assert!(Function::resolve("nope").is_none());
        for (name, handler) in [
            ("tcq-latest-artifact", "latestArtifact"),
            ("artifact", "artifact"),
            ("stack-reclaim-task", "reclaimTask"),
            ("claim-reaper", "claimReaper"),
            ("stack-scheduler-status", "schedulerStatus"),
            ("stack-status", "status"),
            ("scheduler-inspect-task", "schedulerInspectTask"),
            ("task-graph-consumer", "taskGraphConsumer"),
            ("stack-ui", "ui"),
        ] {
            assert_eq!(
                handler_of(Function::resolve_name(name)).as_deref(),
                Some(handler),
                "{name}"
            );
        }
        assert!(Function::resolve_name("xclaim-work").is_none());
    }

    #[test]
    fn handler_names_are_unique() {
        let names: Vec<String> = Function::all().iter().map(Function::handler).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "handler names collide");
    }
}
