//! Lambda function `reportFailed`: POST /api/queue/v1/task/<taskId>/runs/<runId>/failed
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("reportFailed").await
}
