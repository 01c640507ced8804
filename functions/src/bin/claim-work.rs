//! Lambda function `claimWork`: POST /api/queue/v1/claim-work/<*taskQueueId>
#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    functions::lambda::serve_endpoint("claimWork").await
}
