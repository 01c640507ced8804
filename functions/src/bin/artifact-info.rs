//! Lambda function `artifactInfo`: GET /api/queue/v1/task/<taskId>/runs/<runId>/artifact-info/<*name>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("artifactInfo").await
}
