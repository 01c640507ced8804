//! Scheduled Lambda function (EventBridge): expires claims whose takenUntil passed.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_job(functions::lambda::Job::ClaimReaper).await
}
