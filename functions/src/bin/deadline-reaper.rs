//! Scheduled Lambda function (EventBridge): resolves tasks whose deadline passed.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_job(functions::lambda::Job::DeadlineReaper).await
}
