//! Lambda function `claimTask`: POST /api/queue/v1/task/<taskId>/runs/<runId>/claim
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("claimTask").await
}
