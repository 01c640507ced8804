//! Scheduled Lambda function (EventBridge): deletes artifacts (rows and S3 objects) whose
//! `expires` lies more than `TCQ_ARTIFACT_EXPIRY_GRACE_MS` (default 30 min) in the past.
use shared::time::Ts;
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::init_tracing();
    let grace = std::env::var("TCQ_ARTIFACT_EXPIRY_GRACE_MS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(shared::artifacts::EXPIRY_GRACE_MS);
    // The API carries the queue and the S3 blob store, both built once per cold start.
    let api = Arc::new(functions::lambda::api_from_env().await?);
    lambda_runtime::run(lambda_runtime::service_fn(
        move |_event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let api = api.clone();
            async move {
                let n = api
                    .queue
                    .expire_artifacts(api.blobs.as_ref(), Ts::now(), grace)
                    .await?;
                tracing::info!(deleted = n, "artifact expiry pass");
                Ok::<_, lambda_runtime::Error>(
                    serde_json::json!({ "job": "ArtifactReaper", "deleted": n }),
                )
            }
        },
    ))
    .await
}
