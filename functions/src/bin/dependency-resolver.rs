//! Scheduled Lambda function (EventBridge): makes the dependents of resolved tasks pending.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_job(functions::lambda::Job::DependencyResolver).await
}
