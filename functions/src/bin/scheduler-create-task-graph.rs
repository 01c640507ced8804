//! Lambda function `schedulerCreateTaskGraph`: PUT /api/scheduler/v1/task-graph/<taskGraphId>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("createTaskGraph").await
}
