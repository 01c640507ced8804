//! The storage conformance suite against the DynamoDB adapter on LocalStack. `scripts/test.sh`
//! starts LocalStack and sets `TCQ_LOCALSTACK=1` with the standard AWS variables.
use shared::store::{conformance, dynamodb};
use std::sync::Arc;

/// A store on tables of its own (with the test tables), and their name prefix.
async fn store(tag: &str) -> (dynamodb::DynamoStore, String) {
    let prefix = blackbox::runtime_api::localstack_tables_with(tag, false, true).await;
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    (
        dynamodb::DynamoStore::new(dynamodb::client(&sdk), prefix.clone()),
        prefix,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dynamodb_adapter_passes_the_conformance_suite() {
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let (store, _) = store("conf").await;
    conformance::run_all(Arc::new(store)).await;
}

/// Items are stored with their data deflated (a third of the write units for a status item);
/// items written before that, with the data as a JSON string, are still read, and a write
/// turns them into the deflated form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_stored_deflated_and_json_items_are_still_read() {
    use blackbox::runtime_api::localstack_json;
    use serde_json::json;
    use shared::store::{Cond, Item, Store, WriteOp};
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    let (store, prefix) = store("defl").await;
    let raw = |pk: &str| {
        let body = json!({
            "TableName": format!("{prefix}conformance"),
            "Key": { "pk": { "S": pk }, "sk": { "S": "s" } },
            "ConsistentRead": true
        });
        async move {
            localstack_json("dynamodb", "1.0", "DynamoDB_20120810.GetItem", body)
                .await
                .expect("GetItem")["Item"]
                .clone()
        }
    };

    let data = json!({ "text": "x".repeat(3000), "n": 1 });
    store
        .write(WriteOp::Put {
            table: "conformance",
            item: Item::new("a", "s", data.clone(), vec![]),
            cond: Cond::NotExists,
        })
        .await
        .expect("put");
    let item = raw("a").await;
    let stored = item["d"]["B"].as_str().expect("binary d");
    assert!(stored.len() < 200, "3 KB of JSON deflated: {stored}");
    let got = store.get("conformance", "a", "s").await.unwrap().unwrap();
    assert_eq!(got.data, data);

    // An item in the earlier form.
    localstack_json(
        "dynamodb",
        "1.0",
        "DynamoDB_20120810.PutItem",
        json!({
            "TableName": format!("{prefix}conformance"),
            "Item": { "pk": { "S": "b" }, "sk": { "S": "s" }, "v": { "N": "4" },
                      "d": { "S": "{\"old\":true}" } }
        }),
    )
    .await
    .expect("PutItem");
    let old = store.get("conformance", "b", "s").await.unwrap().unwrap();
    assert_eq!(
        (old.version, old.data.into_value()),
        (4, json!({ "old": true }))
    );
    store
        .write(WriteOp::Put {
            table: "conformance",
            item: Item::new("b", "s", json!({ "old": false }), vec![]),
            cond: Cond::Version(4),
        })
        .await
        .expect("versioned put over the earlier form");
    assert!(raw("b").await["d"]["B"].is_string());
}
