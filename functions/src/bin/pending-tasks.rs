//! Lambda function `pendingTasks`: GET /api/queue/v1/pending/<*taskQueueId>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("pendingTasks").await
}
