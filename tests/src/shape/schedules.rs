//! EventBridge schedules, locally: each `rate(...)` fires its function asynchronously, every
//! period (the template's, divided by the speed-up factor), whether or not the last
//! invocation has finished.

use super::lambda::{invoke_async, Pool};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Fires `pool` every `every` until `stop`; failed invocations are retried `speedup` times
/// sooner than Lambda would.
pub async fn run(pool: Arc<Pool>, every: Duration, speedup: f64, mut stop: watch::Receiver<bool>) {
    let every = every.max(Duration::from_millis(10));
    let rule = format!(
        "arn:aws:events:{}:{}:rule/{}-schedule",
        super::template::REGION,
        super::template::ACCOUNT,
        pool.def.id
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let event = json!({
            "version": "0",
            "id": crate::slugid(),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": super::template::ACCOUNT,
            "time": shared::time::Ts::now(),
            "region": super::template::REGION,
            "resources": [rule],
            "detail": {}
        });
        tokio::spawn(invoke_async(pool.clone(), event, speedup));
    }
}
