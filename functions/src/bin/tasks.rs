//! Lambda function `tasks`: POST /api/queue/v1/tasks
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("tasks").await
}
