//! `cargo run`: the whole queue API on 127.0.0.1 over the embedded backend.

use clap::Parser;
use functions::{init_tracing, start, LocalConfig};
use shared::events::LogSink;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    init_tracing();
    let cfg = LocalConfig::parse();
    let running = start(cfg, Arc::new(LogSink)).await?;
    println!(
        "Queue listening: TASKCLUSTER_ROOT_URL={}",
        running.root_url()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    running.stop().await;
    Ok(())
}
