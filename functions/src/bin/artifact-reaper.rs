//! Scheduled Lambda function (EventBridge): deletes artifacts (rows and S3 objects) whose
//! `expires` lies more than `TCQ_ARTIFACT_EXPIRY_GRACE_MS` (default 30 min) in the past.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::multicall::serve_artifact_reaper().await
}
