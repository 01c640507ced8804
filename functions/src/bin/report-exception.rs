//! Lambda function `reportException`: POST /api/queue/v1/task/<taskId>/runs/<runId>/exception
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("reportException").await
}
