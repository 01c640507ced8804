//! Lambda function `cancelTask`: POST /api/queue/v1/task/<taskId>/cancel
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("cancelTask").await
}
