//! Lambda function `createArtifact`: POST /api/queue/v1/task/<taskId>/runs/<runId>/artifacts/<*name>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("createArtifact").await
}
