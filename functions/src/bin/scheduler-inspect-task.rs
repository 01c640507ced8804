//! Lambda function `schedulerInspectTask`: GET /api/scheduler/v1/task-graph/<taskGraphId>/inspect/<taskId>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("inspectTask").await
}
