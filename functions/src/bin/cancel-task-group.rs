//! Lambda function `cancelTaskGroup`: POST /api/queue/v1/task-group/<taskGroupId>/cancel
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("cancelTaskGroup").await
}
