//! Lambda function `heartbeat`: GET /api/queue/v1/__heartbeat__
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("heartbeat").await
}
