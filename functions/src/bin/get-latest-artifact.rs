//! Lambda function `getLatestArtifact`: GET /api/queue/v1/task/<taskId>/artifacts/<*name>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("getLatestArtifact").await
}
