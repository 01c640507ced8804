//! Lambda function on the tasks table's DynamoDB stream: publishes outbox events to RabbitMQ.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_publisher().await
}
