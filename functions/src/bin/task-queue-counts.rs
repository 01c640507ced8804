//! Lambda function `taskQueueCounts`: GET /api/queue/v1/task-queues/<*taskQueueId>/counts
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("taskQueueCounts").await
}
