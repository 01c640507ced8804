//! The storage conformance suite against the DynamoDB adapter on LocalStack. `scripts/test.sh`
//! starts LocalStack and sets `TCQ_LOCALSTACK=1` with the standard AWS variables.
use shared::store::{conformance, dynamodb};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dynamodb_adapter_passes_the_conformance_suite() {
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    let client = dynamodb::client(&sdk);
    let prefix = format!(
        "conf{}-",
        blackbox::slugid()
            .to_ascii_lowercase()
            .replace(['-', '_'], "x")
    );
    dynamodb::create_tables(&client, &prefix, true)
        .await
        .expect("tables");
    let store = dynamodb::DynamoStore::new(client, prefix);
    conformance::run_all(Arc::new(store)).await;
}
