//! Lambda function `version`: GET /api/queue/v1/__version__
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("version").await
}
