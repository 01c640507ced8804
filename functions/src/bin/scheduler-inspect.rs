//! Lambda function `schedulerInspect`: GET /api/scheduler/v1/task-graph/<taskGraphId>/inspect
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("inspect").await
}
