//! Lambda function `ping`: GET /api/queue/v1/ping
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("ping").await
}
