//! Lambda function `reportCompleted`: POST /api/queue/v1/task/<taskId>/runs/<runId>/completed
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("reportCompleted").await
}
