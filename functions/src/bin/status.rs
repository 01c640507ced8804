//! Lambda function `status`: GET /api/queue/v1/task/<taskId>/status
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("status").await
}
