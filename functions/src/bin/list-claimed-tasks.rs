//! Lambda function `listClaimedTasks`: GET /api/queue/v1/task-queues/<*taskQueueId>/claimed
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("listClaimedTasks").await
}
