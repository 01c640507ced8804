//! Lambda function `listLatestArtifacts`: GET /api/queue/v1/task/<taskId>/artifacts
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("listLatestArtifacts").await
}
