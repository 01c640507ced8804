//! EventBridge schedules, locally: each `rate(...)` fires its function asynchronously, every
//! period (the template's, divided by the speed-up factor), whether or not the last
//! invocation has finished, as deployed. Sped up, a firing is skipped while the last one's
//! invocation still runs: the function's timeout is not sped up, so otherwise a period of a
//! second against a 300 s budget would pile up hundreds of instances that deployed never
//! overlap more than a few. A rule can be disabled and enabled again, as EventBridge's
//! DisableRule and EnableRule do: while disabled it does not fire.

use super::lambda::{invoke_async, Pool};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Fires `pool` every `every` (the template's `period`, or shorter when sped up) while
/// `enabled`, until `stop`; failed invocations are retried `speedup` times sooner than Lambda
/// would.
pub async fn run(
    pool: Arc<Pool>,
    enabled: Arc<AtomicBool>,
    every: Duration,
    period: Duration,
    speedup: f64,
    mut stop: watch::Receiver<bool>,
) {
    let every = every.max(Duration::from_millis(10));
    let sped_up = every < period;
    let mut last: Option<tokio::task::JoinHandle<()>> = None;
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
        if !enabled.load(Ordering::SeqCst)
            || sped_up && last.as_ref().is_some_and(|h| !h.is_finished())
        {
            continue;
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
        last = Some(tokio::spawn(invoke_async(pool.clone(), event, speedup)));
    }
}
