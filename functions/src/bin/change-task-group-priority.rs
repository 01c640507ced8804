//! Lambda function `changeTaskGroupPriority`: POST /api/queue/v1/task-group/<taskGroupId>/priority
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("changeTaskGroupPriority").await
}
