//! Lambda function `latestArtifact`: GET /api/queue/v1/task/<taskId>/artifact-content/<*name>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("latestArtifact").await
}
