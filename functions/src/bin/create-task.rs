//! Lambda function `createTask`: PUT /api/queue/v1/task/<taskId>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("createTask").await
}
