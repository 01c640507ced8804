//! `bash scripts/deployed-shape.sh`: the deployed shape on this machine (see
//! `blackbox::shape`): every function of `infra/template.yaml` its own process, behind a local
//! HTTP API, stream pollers, schedules and the broker mapping, over LocalStack and RabbitMQ.

use blackbox::shape::{Shape, ShapeConfig};
use clap::Parser;
use std::path::PathBuf;

/// The deployed shape, run locally.
#[derive(Debug, Parser)]
#[command(name = "deployed-shape")]
struct Cli {
    /// Address to listen on (the HTTP API).
    #[arg(long, env = "TCQ_BIND", default_value = "127.0.0.1")]
    bind: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "TCQ_PORT", default_value_t = 8080)]
    port: u16,
    /// Directory for the root client's credentials (`root-credentials.json`).
    #[arg(long, env = "TCQ_DATA_DIR", default_value = ".data-shape")]
    data_dir: PathBuf,
    /// The stack's name: its tables are `<stack>-tasks`, ... on LocalStack.
    #[arg(long, env = "TCQ_SHAPE_STACK", default_value = "shape")]
    stack: String,
    /// Schedules fire this many times faster than the template says (1: as deployed).
    #[arg(long, env = "TCQ_SHAPE_SPEEDUP", default_value_t = 1.0)]
    speedup: f64,
    /// The RabbitMQ URL that stands in for Amazon MQ.
    #[arg(
        long,
        env = "TCQ_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    /// The `lambda` binary (default `target/debug/lambda`).
    #[arg(long, env = "TCQ_SHAPE_LAMBDA")]
    lambda: Option<PathBuf>,
    /// How the claim routes are served, the template's `ClaimMode`: `lambda` (functions
    /// that long-poll), `lambda-short` (functions that wait at most `ClaimWaitSeconds`, a
    /// `--parameter`), or `service` (a `tc-queue` process, as the ECS service runs it).
    #[arg(long, value_parser = ["lambda", "lambda-short", "service"])]
    claim_mode: Option<String>,
    /// A template parameter, `Name=value` (repeatable).
    #[arg(long = "parameter")]
    parameters: Vec<String>,
    /// A variable set in every function, `NAME=value` (repeatable).
    #[arg(long = "env")]
    env: Vec<String>,
    /// The account's concurrency.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
    /// Delete the stack's tables, queues and secrets on exit (by default they stay, and the
    /// next start finds the data).
    #[arg(long)]
    delete_on_exit: bool,
}

fn pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not NAME=value"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The broker mapping looks for its queue until a publisher declares it: lapin logs each
    // miss as an error, which is noise here.
    if std::env::var("RUST_LOG").is_err() {
        std::env::set_var("RUST_LOG", "info,lapin=off");
    }
    functions::init_tracing(false);
    let cli = Cli::parse();
    let mut cfg = ShapeConfig::defaults(&cli.stack);
    cfg.bind = format!("{}:{}", cli.bind, cli.port).parse()?;
    cfg.speedup = cli.speedup;
    cfg.amqp_url = cli.amqp_url;
    cfg.concurrency = cli.concurrency;
    cfg.delete_on_stop = cli.delete_on_exit;
    if let Some(l) = cli.lambda {
        cfg.lambda_bin = l;
    }
    for p in &cli.parameters {
        cfg.parameters.push(pair(p)?);
    }
    if let Some(mode) = cli.claim_mode {
        if mode == "service" && !cfg.parameters.iter().any(|(k, _)| k == "ClaimServiceImage") {
            // The image is not used here (its binary runs directly), but the template's rule
            // wants one named.
            cfg.parameters
                .push(("ClaimServiceImage".into(), "local/tc-queue".into()));
        }
        cfg.parameters.push(("ClaimMode".into(), mode));
    }
    for e in &cli.env {
        let (k, v) = pair(e)?;
        cfg.env.insert(k, v);
    }
    let shape = Shape::start(cfg).await?;
    std::fs::create_dir_all(&cli.data_dir)?;
    let creds = serde_json::json!({
        "clientId": shared::auth::ROOT_CLIENT_ID,
        "accessToken": shape.root_access_token,
    });
    let path = cli.data_dir.join("root-credentials.json");
    std::fs::write(&path, creds.to_string())?;
    #[cfg(unix)]
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    println!("Deployed shape listening. To use it with the root client:");
    println!("export TASKCLUSTER_ROOT_URL={}", shape.root_url());
    println!(
        "export TASKCLUSTER_CLIENT_ID={}",
        shared::auth::ROOT_CLIENT_ID
    );
    println!(
        "export TASKCLUSTER_ACCESS_TOKEN={}",
        shape.root_access_token
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    shape.stop().await;
    Ok(())
}
