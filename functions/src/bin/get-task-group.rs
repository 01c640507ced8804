//! Lambda function `getTaskGroup`: GET /api/queue/v1/task-group/<taskGroupId>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("getTaskGroup").await
}
