//! Lambda function `lbheartbeat`: GET /api/queue/v1/__lbheartbeat__
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("lbheartbeat").await
}
