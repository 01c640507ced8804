//! Lambda function `listArtifacts`: GET /api/queue/v1/task/<taskId>/runs/<runId>/artifacts
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("listArtifacts").await
}
