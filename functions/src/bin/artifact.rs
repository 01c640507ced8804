//! Lambda function `artifact`: GET /api/queue/v1/task/<taskId>/runs/<runId>/artifact-content/<*name>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("artifact").await
}
