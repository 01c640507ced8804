//! The storage conformance suite against the DynamoDB adapter on LocalStack. `scripts/test.sh`
//! starts LocalStack and sets `TCQ_LOCALSTACK=1` with the standard AWS variables.
use shared::store::{conformance, dynamodb};
use std::sync::Arc;

/// A store on tables of its own (with the test tables), and their name prefix.
async fn store(tag: &str) -> (dynamodb::DynamoStore, String) {
    let prefix = blackbox::runtime_api::localstack_tables_with(tag, false, true).await;
    let sdk = dynamodb::sdk_config().await.expect("AWS environment");
    (
        dynamodb::DynamoStore::new(&sdk, prefix.clone()).expect("store"),
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

/// An item's data is stored deflated when that can bill fewer units (a third of the write
/// units for a large status item), and as JSON text when the whole item fits one write unit
/// anyway; items in either form are read, and a write picks the form anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_deflated_unless_the_item_fits_one_write_unit_and_both_forms_are_read() {
    use blackbox::runtime_api::localstack_json;
    use serde_json::json;
    use shared::store::{Cond, Item, Store, WriteOp};
    use std::sync::atomic::Ordering;
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
    let usage = store.usage();
    // Puts `data` as a new item and gives the write units it billed.
    let put = |pk: &'static str, data: serde_json::Value| {
        let (store, usage) = (store.clone(), usage.clone());
        async move {
            let before = usage.write_milli.load(Ordering::Relaxed);
            store
                .write(WriteOp::Put {
                    table: "conformance",
                    item: Item::new(pk, "s", data.clone(), vec![]),
                    cond: Cond::NotExists,
                })
                .await
                .expect("put");
            let got = store.get("conformance", pk, "s").await.unwrap().unwrap();
            assert_eq!(got.data, data, "{pk} reads back");
            (usage.write_milli.load(Ordering::Relaxed) - before) as f64 / 1000.0
        }
    };

    // 3 KB of JSON: deflated, one unit instead of three.
    let units = put("a", json!({ "text": "x".repeat(3000), "n": 1 })).await;
    let stored = raw("a").await["d"]["B"]
        .as_str()
        .expect("binary d")
        .to_string();
    assert!(stored.len() < 200, "3 KB of JSON deflated: {stored}");
    assert_eq!(units, 1.0, "deflated 3 KB");

    // JSON that fits one unit as it is: kept as text, still one unit.
    let small = json!({ "text": "y".repeat(900) });
    assert_eq!(put("c", small.clone()).await, 1.0, "900 bytes as text");
    assert_eq!(raw("c").await["d"]["S"], small.to_string());
    // Past the unit (with the keys and the version): deflated again.
    assert_eq!(put("e", json!({ "text": "y".repeat(990) })).await, 1.0);
    assert!(raw("e").await["d"]["B"].is_string(), "990 bytes deflated");

    // An item written by hand, as text: read, and rewritten in the form that fits.
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
    let big = json!({ "old": false, "text": "z".repeat(2000) });
    store
        .write(WriteOp::Put {
            table: "conformance",
            item: Item::new("b", "s", big.clone(), vec![]),
            cond: Cond::Version(4),
        })
        .await
        .expect("versioned put over the text form");
    assert!(raw("b").await["d"]["B"].is_string());
    let got = store.get("conformance", "b", "s").await.unwrap().unwrap();
    assert_eq!(got.data, big);
}
