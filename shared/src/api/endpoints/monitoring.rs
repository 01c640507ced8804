//! The monitoring endpoints every service has.

use crate::api::declare::{Call, Endpoint, Reply, Verb};
use crate::api::Api;
use crate::error::ApiResult;
use crate::handler;
use serde_json::json;

/// `ping`, `lbheartbeat`, `version`, `heartbeat`: no scopes, nothing read.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new("ping", Verb::Get, "/ping", handler!(ping))
        .title("Whether the service is alive, and for how long")
        .output("ping-response"),
    Endpoint::new(
        "lbheartbeat",
        Verb::Get,
        "/__lbheartbeat__",
        handler!(empty),
    )
    .title("Load balancer heartbeat"),
    Endpoint::new("version", Verb::Get, "/__version__", handler!(version))
        .title("The running version"),
    Endpoint::new("heartbeat", Verb::Get, "/__heartbeat__", handler!(empty)).title("Heartbeat"),
];

async fn ping(api: &Api, _: &mut Call) -> ApiResult<Reply> {
    Reply::ok(json!({ "alive": true, "uptime": api.started.elapsed().as_secs_f64() }))
}

async fn empty(_: &Api, _: &mut Call) -> ApiResult<Reply> {
    Reply::ok(json!({}))
}

async fn version(_: &Api, _: &mut Call) -> ApiResult<Reply> {
    Reply::ok(json!({
        "source": "https://github.com/taskcluster/taskcluster",
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("TCQ_GIT_COMMIT").unwrap_or("unknown"),
        "build": "rust",
    }))
}
