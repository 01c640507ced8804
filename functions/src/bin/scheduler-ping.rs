//! Lambda function `schedulerPing`: GET /api/scheduler/v1/ping
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("ping").await
}
