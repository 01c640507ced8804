//! Lambda function `reclaimTask`: POST /api/queue/v1/task/<taskId>/runs/<runId>/reclaim
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("reclaimTask").await
}
