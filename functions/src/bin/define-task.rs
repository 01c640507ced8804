//! Lambda function `defineTask`: POST /api/queue/v1/task/<taskId>/define
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("defineTask").await
}
