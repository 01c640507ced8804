//! The processes that host the queue: the local server ([`server`], `tc-queue`) and the
//! Lambda functions ([`lambda`], the `lambda` binary), each configured once from its
//! environment ([`config`]) and assembled from the same parts ([`assemble`]). Both serve the
//! web inspector ([`ui`]).

pub mod assemble;
pub mod config;
pub mod env;
pub mod lambda;
pub mod server;
pub mod ui;

pub use config::{LambdaConfig, ServerConfig};
pub use server::{start, Running};

/// Sets up tracing from `RUST_LOG` (default `info`); JSON lines when `json`.
pub fn init_tracing(json: bool) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Prints what `metrics` counted since the last call as CloudWatch EMF lines on stdout, where
/// a function's (or a container's) log goes and CloudWatch reads them as metrics: no API call.
/// A function calls it before each answer (a frozen or recycled instance holds nothing back).
pub fn print_emf(metrics: &shared::metrics::Metrics, namespace: &str) {
    use std::io::Write;
    let lines = metrics.drain_emf(namespace, shared::time::Ts::now().millis());
    if lines.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}
