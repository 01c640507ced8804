//! Lambda function `schedulerInfo`: GET /api/scheduler/v1/task-graph/<taskGraphId>/info
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("info").await
}
