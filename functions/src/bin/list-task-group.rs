//! Lambda function `listTaskGroup`: GET /api/queue/v1/task-group/<taskGroupId>/list
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("listTaskGroup").await
}
