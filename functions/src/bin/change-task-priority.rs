//! Lambda function `changeTaskPriority`: POST /api/queue/v1/task/<taskId>/priority
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("changeTaskPriority").await
}
