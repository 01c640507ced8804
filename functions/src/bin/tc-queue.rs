//! `cargo run`: the whole queue API on 127.0.0.1 over the embedded backend.

use clap::Parser;
use functions::{init_tracing, start, ServerConfig};
use shared::events::LogSink;
use std::sync::Arc;
use std::time::Duration;

/// mimalloc rather than glibc's malloc, which took about a fifth of the server's CPU in the
/// workload bench (many short-lived JSON values per request).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cfg = ServerConfig::parse();
    if cfg.health_check {
        let healthy = functions::server::health_check(cfg.port, Duration::from_secs(3)).await;
        std::process::exit(if healthy { 0 } else { 1 });
    }
    init_tracing(cfg.queue.log_json);
    // A token given by configuration is known to whoever gave it, and stdout may be a log
    // (the claim service's goes to CloudWatch): it is not printed.
    let given = cfg.root_access_token.is_some();
    let running = start(cfg, Arc::new(LogSink)).await?;
    // The root credentials go to stdout (never to the log) so that a local user can
    // paste them; they are also in <data dir>/root-credentials.json (owner-only).
    println!("Queue listening. To use it with the root client:");
    println!("export TASKCLUSTER_ROOT_URL={}", running.root_url());
    println!("export TASKCLUSTER_CLIENT_ID={}", running.root.client_id);
    if given {
        println!("# TASKCLUSTER_ACCESS_TOKEN: the configured TCQ_ROOT_ACCESS_TOKEN");
    } else {
        println!(
            "export TASKCLUSTER_ACCESS_TOKEN={}",
            running.root.access_token
        );
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    running.stop().await;
    Ok(())
}
