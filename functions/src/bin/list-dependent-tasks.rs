//! Lambda function `listDependentTasks`: GET /api/queue/v1/task/<taskId>/dependents
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("listDependentTasks").await
}
