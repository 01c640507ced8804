//! Scheduled Lambda function (EventBridge): deletes expired tasks, dependency edges and task groups.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_job(functions::lambda::Job::ExpiryReaper).await
}
