//! Scheduled Lambda function (EventBridge): publishes events stranded in outboxes.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_job(functions::lambda::Job::OutboxSweeper).await
}
