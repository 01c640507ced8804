//! Lambda function `rerunTask`: POST /api/queue/v1/task/<taskId>/rerun
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("rerunTask").await
}
