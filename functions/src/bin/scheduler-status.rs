//! Lambda function `schedulerStatus`: GET /api/scheduler/v1/task-graph/<taskGraphId>/status
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("status").await
}
