//! Lambda function `schedulerExtendTaskGraph`: POST /api/scheduler/v1/task-graph/<taskGraphId>/extend
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_scheduler_endpoint("extendTaskGraph").await
}
