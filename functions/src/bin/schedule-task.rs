//! Lambda function `scheduleTask`: POST /api/queue/v1/task/<taskId>/schedule
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("scheduleTask").await
}
