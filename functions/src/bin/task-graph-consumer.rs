//! Lambda function `taskGraphConsumer`: the task-graph scheduler's consumer of the queue's
//! task-completed, task-failed and task-exception messages, triggered by an Amazon MQ for
//! RabbitMQ event source mapping on the durable queue the publisher declares.
#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    functions::lambda::serve_task_graph_consumer().await
}
