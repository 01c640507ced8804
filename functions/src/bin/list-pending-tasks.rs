//! Lambda function `listPendingTasks`: GET /api/queue/v1/task-queues/<*taskQueueId>/pending
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("listPendingTasks").await
}
