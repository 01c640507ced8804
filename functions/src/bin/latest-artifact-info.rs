//! Lambda function `latestArtifactInfo`: GET /api/queue/v1/task/<taskId>/artifact-info/<*name>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("latestArtifactInfo").await
}
