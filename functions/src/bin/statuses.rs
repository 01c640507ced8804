//! Lambda function `statuses`: POST /api/queue/v1/tasks/status
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("statuses").await
}
