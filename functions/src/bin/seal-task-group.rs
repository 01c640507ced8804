//! Lambda function `sealTaskGroup`: POST /api/queue/v1/task-group/<taskGroupId>/seal
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("sealTaskGroup").await
}
