//! The conformance suite every [`Store`] adapter must pass. It checks exactly the promises of
//! the port, no more: index reads are polled until they converge, because indexes are only
//! eventually consistent. Call [`run_all`] from an adapter's tests with a fresh, empty store.

use super::*;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: &str = "conformance";
/// A second table, for reads across tables.
const T2: &str = "conformance-other";
const IDX: &str = "by-color";

fn item(pk: &str, sk: &str, n: i64, color: Option<&str>) -> Item {
    let indexes = color
        .map(|c| {
            vec![IndexEntry {
                index: IDX,
                pk: c.to_string(),
                sk: format!("{n:06}:{pk}:{sk}"),
            }]
        })
        .unwrap_or_default();
    Item::new(pk, sk, json!({ "n": n }), indexes)
}

fn put(i: Item, cond: Cond) -> WriteOp {
    WriteOp::Put {
        table: T,
        item: i,
        cond,
    }
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < until, "never converged: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs every check; panics with a description on the first broken promise.
pub async fn run_all(store: Arc<dyn Store>) {
    conditional_writes(store.as_ref()).await;
    transactions_are_all_or_nothing(store.as_ref()).await;
    transaction_limits(store.as_ref()).await;
    partition_queries_page_in_order(store.as_ref()).await;
    indexes_follow_items(store.as_ref()).await;
    index_scans_cover_every_partition(store.as_ref()).await;
    eventual_reads_catch_up(store.as_ref()).await;
    batched_reads_keep_the_order_of_the_keys(store.as_ref()).await;
    batched_reads_span_tables(store.as_ref()).await;
    oversized_items_are_refused(store.as_ref()).await;
    concurrent_updates_lose_nothing(store.clone()).await;
    racing_creates_have_one_winner(store).await;
}

/// Eventually consistent reads may lag, but they converge on the last write, and only ever
/// show versions that were written.
pub async fn eventual_reads_catch_up(s: &dyn Store) {
    for n in 1..=3 {
        s.write(put(item("ev", "1", n, None), Cond::None))
            .await
            .unwrap();
    }
    s.write(put(item("ev", "2", 7, None), Cond::None))
        .await
        .unwrap();
    eventually("get_eventual shows the last write", || async {
        let got = s.get_eventual(T, "ev", "1").await.unwrap();
        if let Some(i) = &got {
            assert!((1..=3).contains(&i.version), "a version that was written");
            assert_eq!(
                i.data["n"], i.version as i64,
                "with the data of that version"
            );
        }
        got.is_some_and(|i| i.version == 3 && i.data["n"] == 3)
    })
    .await;
    eventually("query_eventual shows both items", || async {
        let all = SkRange::default();
        let items = s
            .query_eventual(T, "ev", &all, None, 10)
            .await
            .unwrap()
            .items;
        items
            .iter()
            .map(|i| i.data["n"].as_i64())
            .collect::<Vec<_>>()
            == [Some(3), Some(7)]
    })
    .await;
    assert!(s.get_eventual(T, "ev", "none").await.unwrap().is_none());
}

/// `get_many` answers every key, in order, beyond one batch, with `None` for missing items
/// and repeated keys answered each time.
pub async fn batched_reads_keep_the_order_of_the_keys(s: &dyn Store) {
    let n = super::MAX_BATCH_GET as i64 + 30;
    for i in 0..n {
        s.write(put(item("bg", &format!("{i:04}"), i, None), Cond::None))
            .await
            .unwrap();
    }
    let mut keys: Vec<(String, String)> = (0..n)
        .rev()
        .map(|i| ("bg".to_string(), format!("{i:04}")))
        .collect();
    keys.insert(7, ("bg".into(), "missing".into()));
    keys.push(("nope".into(), "0001".into()));
    keys.push(("bg".into(), "0003".into()));
    for consistent in [true, false] {
        let got = s.get_many(T, &keys, consistent).await.unwrap();
        assert_eq!(got.len(), keys.len(), "one answer per key");
        for ((pk, sk), g) in keys.iter().zip(&got) {
            match (sk.parse::<i64>(), g) {
                (Ok(i), Some(item)) if pk == "bg" => {
                    assert_eq!((&item.pk, &item.sk), (pk, sk));
                    assert_eq!(item.data["n"], i);
                }
                (Ok(_), None) if pk == "bg" && !consistent => {} // eventual: may lag
                (_, None) if pk != "bg" || sk == "missing" => {}
                other => panic!("get_many answered {other:?} for {pk}/{sk}"),
            }
        }
    }
    assert!(s.get_many(T, &[], true).await.unwrap().is_empty());
}

/// `get_each` reads keys of several tables at once, each as strongly as asked, in order,
/// with `None` for missing items; it refuses no keys, too many, or one key twice.
pub async fn batched_reads_span_tables(s: &dyn Store) {
    let key = |table, pk: &str, sk: &str, consistent| GetKey {
        table,
        pk: pk.into(),
        sk: sk.into(),
        consistent,
    };
    s.write(put(item("x", "1", 1, None), Cond::None))
        .await
        .unwrap();
    let other = Item::new("x", "1", json!({ "n": 2 }), vec![]);
    s.write(WriteOp::Put {
        table: T2,
        item: other,
        cond: Cond::None,
    })
    .await
    .unwrap();
    // The same pk and sk in two tables are two items; a key read strongly is current.
    let keys = [
        key(T2, "x", "1", true),
        key(T, "x", "missing", false),
        key(T, "x", "1", true),
    ];
    let got = s.get_each(&keys).await.unwrap();
    let n: Vec<Option<i64>> = got
        .iter()
        .map(|i| i.as_ref().and_then(|i| i.data["n"].as_i64()))
        .collect();
    assert_eq!(n, [Some(2), None, Some(1)], "one answer per key, in order");
    let refused = |r: Result<Vec<Option<Item>>, StoreError>| {
        assert!(matches!(r, Err(StoreError::Validation(_))), "{r:?}");
    };
    refused(s.get_each(&[]).await);
    refused(
        s.get_each(&[key(T, "x", "1", true), key(T, "x", "1", false)])
            .await,
    );
    let many: Vec<GetKey> = (0..=MAX_BATCH_GET)
        .map(|i| key(T, "x", &i.to_string(), false))
        .collect();
    refused(s.get_each(&many).await);
}

/// Versions start at 1 and bump on every write; conditions are enforced.
pub async fn conditional_writes(s: &dyn Store) {
    assert_eq!(
        s.write(put(item("a", "1", 1, None), Cond::NotExists))
            .await
            .unwrap(),
        1
    );
    assert!(matches!(
        s.write(put(item("a", "1", 2, None), Cond::NotExists)).await,
        Err(StoreError::ConditionFailed)
    ));
    assert_eq!(
        s.write(put(item("a", "1", 2, None), Cond::Version(1)))
            .await
            .unwrap(),
        2
    );
    assert!(s
        .write(put(item("a", "1", 3, None), Cond::Version(1)))
        .await
        .unwrap_err()
        .is_condition_failed());
    let got = s.get(T, "a", "1").await.unwrap().unwrap();
    assert_eq!((got.version, got.data["n"].as_i64()), (2, Some(2)));
    assert!(s
        .write(put(item("nope", "1", 1, None), Cond::Exists))
        .await
        .unwrap_err()
        .is_condition_failed());
    assert!(s.get(T, "nope", "1").await.unwrap().is_none());
    let del = WriteOp::Delete {
        table: T,
        pk: "a".into(),
        sk: "1".into(),
        cond: Cond::Version(1),
    };
    assert!(s.write(del).await.unwrap_err().is_condition_failed());
    let del = WriteOp::Delete {
        table: T,
        pk: "a".into(),
        sk: "1".into(),
        cond: Cond::Version(2),
    };
    s.write(del).await.unwrap();
    assert!(s.get(T, "a", "1").await.unwrap().is_none());
    let check = WriteOp::Check {
        table: T,
        pk: "a".into(),
        sk: "1".into(),
        cond: Cond::None,
    };
    assert!(
        matches!(s.write(check).await, Err(StoreError::Validation(_))),
        "checks exist only in transactions"
    );
}

/// A failed condition cancels the whole transaction and reports which op failed.
pub async fn transactions_are_all_or_nothing(s: &dyn Store) {
    s.write(put(item("t", "existing", 0, None), Cond::NotExists))
        .await
        .unwrap();
    let ops = vec![
        put(item("t", "new-1", 1, None), Cond::NotExists),
        put(item("t", "existing", 1, None), Cond::NotExists),
        put(item("t", "new-2", 2, None), Cond::NotExists),
    ];
    match s.transact(ops).await {
        Err(StoreError::TransactionCancelled { reasons }) => {
            assert_eq!(reasons, vec![false, true, false])
        }
        other => panic!("expected a cancelled transaction, got {other:?}"),
    }
    assert!(
        s.get(T, "t", "new-1").await.unwrap().is_none(),
        "nothing of a cancelled transaction is written"
    );
    let ops = vec![
        put(item("t", "new-1", 1, None), Cond::NotExists),
        WriteOp::Check {
            table: T,
            pk: "t".into(),
            sk: "existing".into(),
            cond: Cond::Version(1),
        },
        WriteOp::Delete {
            table: T,
            pk: "t".into(),
            sk: "missing".into(),
            cond: Cond::None,
        },
    ];
    s.transact(ops).await.unwrap();
    assert!(s.get(T, "t", "new-1").await.unwrap().is_some());
    assert_eq!(
        s.get(T, "t", "existing").await.unwrap().unwrap().version,
        1,
        "a check writes nothing"
    );
}

/// At most 100 items, each at most once.
pub async fn transaction_limits(s: &dyn Store) {
    let many: Vec<_> = (0..101)
        .map(|i| put(item("lim", &i.to_string(), i, None), Cond::None))
        .collect();
    assert!(matches!(
        s.transact(many).await,
        Err(StoreError::Validation(_))
    ));
    let twice = vec![
        put(item("lim", "x", 1, None), Cond::None),
        put(item("lim", "x", 2, None), Cond::None),
    ];
    assert!(matches!(
        s.transact(twice).await,
        Err(StoreError::Validation(_))
    ));
    let hundred: Vec<_> = (0..100)
        .map(|i| put(item("lim", &format!("{i:03}"), i, None), Cond::None))
        .collect();
    s.transact(hundred).await.unwrap();
}

/// Queries stay in one partition, ascend by sort key, honour prefix/upper bound, and page.
pub async fn partition_queries_page_in_order(s: &dyn Store) {
    for i in [5, 1, 4, 2, 3] {
        s.write(put(item("q", &format!("k{i}"), i, None), Cond::None))
            .await
            .unwrap();
    }
    s.write(put(item("q", "other", 9, None), Cond::None))
        .await
        .unwrap();
    s.write(put(item("q2", "k0", 0, None), Cond::None))
        .await
        .unwrap();
    let range = SkRange {
        prefix: Some("k".into()),
        upto: Some("k4".into()),
    };
    let p1 = s.query(T, "q", &range, None, 2).await.unwrap();
    let sks: Vec<_> = p1.items.iter().map(|i| i.sk.as_str()).collect();
    assert_eq!(sks, ["k1", "k2"]);
    let p2 = s.query(T, "q", &range, p1.next.as_ref(), 2).await.unwrap();
    let sks: Vec<_> = p2.items.iter().map(|i| i.sk.as_str()).collect();
    assert_eq!(sks, ["k3", "k4"]);
    assert!(p2.next.is_none(), "the last page has no continuation");
    // A made-up continuation point is refused, not passed on (DynamoDB refuses it itself).
    let long = "k".repeat(1025);
    for bad in [
        (String::new(), String::new(), String::new()),
        ("k1".to_string(), "q2".to_string(), "k1".to_string()),
        (long.clone(), "q".to_string(), long),
        // Outside the range's prefix, and past its upper bound.
        ("other".to_string(), "q".to_string(), "other".to_string()),
        ("k5".to_string(), "q".to_string(), "k5".to_string()),
    ] {
        let got = s.query(T, "q", &range, Some(&bad), 2).await;
        assert!(matches!(got, Err(StoreError::BadCursor)), "{bad:?}");
        let got = s.query_index(T, IDX, "red", &range, Some(&bad), 2).await;
        assert!(
            matches!(got, Err(StoreError::BadCursor)) || bad.1 == "q2",
            "{bad:?}"
        );
    }
}

/// Index entries appear, move and disappear with their item (eventually).
pub async fn indexes_follow_items(s: &dyn Store) {
    for i in 0..5 {
        s.write(put(
            item(&format!("ix{i}"), "x", i, Some("red")),
            Cond::None,
        ))
        .await
        .unwrap();
    }
    eventually("five red entries", || async {
        s.count_index(T, IDX, "red", &SkRange::default())
            .await
            .unwrap()
            == 5
    })
    .await;
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .query_index(T, IDX, "red", &SkRange::default(), after.as_ref(), 2)
            .await
            .unwrap();
        seen.extend(
            page.items
                .iter()
                .map(|i| i.data["n"].as_i64().unwrap_or(-1)),
        );
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(
        seen,
        [0, 1, 2, 3, 4],
        "index pages ascend without gaps or repeats"
    );
    s.write(put(item("ix0", "x", 0, Some("blue")), Cond::None))
        .await
        .unwrap();
    s.write(put(item("ix1", "x", 1, None), Cond::None))
        .await
        .unwrap();
    s.write(WriteOp::Delete {
        table: T,
        pk: "ix2".into(),
        sk: "x".into(),
        cond: Cond::None,
    })
    .await
    .unwrap();
    eventually("red shrinks to two", || async {
        s.count_index(T, IDX, "red", &SkRange::default())
            .await
            .unwrap()
            == 2
    })
    .await;
    eventually("blue has ix0", || async {
        let p = s
            .query_index(T, IDX, "blue", &SkRange::default(), None, 10)
            .await
            .unwrap();
        p.items.len() == 1 && p.items[0].pk == "ix0"
    })
    .await;
    let upto = SkRange {
        upto: Some("000003:\u{10FFFF}".into()),
        ..Default::default()
    };
    eventually("bounded index query", || async {
        let p = s.query_index(T, IDX, "red", &upto, None, 10).await.unwrap();
        p.items.iter().map(|i| i.pk.as_str()).collect::<Vec<_>>() == ["ix3"]
    })
    .await;
}

/// A scan of an index's keys pages through every partition's entries, each once, and
/// follows the items (an entry moved or removed is seen where it now is, eventually).
pub async fn index_scans_cover_every_partition(s: &dyn Store) {
    let colors = ["scan-a", "scan-b", "scan-c"];
    for i in 0..7 {
        let c = colors[i % colors.len()];
        s.write(put(
            item(&format!("sc{i}"), "x", i as i64, Some(c)),
            Cond::None,
        ))
        .await
        .unwrap();
    }
    s.write(put(item("sc0", "x", 0, Some("scan-b")), Cond::None))
        .await
        .unwrap();
    s.write(put(item("sc1", "x", 1, None), Cond::None))
        .await
        .unwrap();
    let expected: Vec<(String, String)> = [
        ("sc0", "scan-b"),
        ("sc2", "scan-c"),
        ("sc3", "scan-a"),
        ("sc4", "scan-b"),
        ("sc5", "scan-c"),
        ("sc6", "scan-a"),
    ]
    .iter()
    .map(|(pk, c)| (pk.to_string(), c.to_string()))
    .collect();
    eventually("the scan sees every entry once", || async {
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = s.scan_index_keys(T, IDX, after.as_ref(), 2).await.unwrap();
            assert!(page.keys.len() <= 2, "a page holds at most its limit");
            for k in &page.keys {
                assert_eq!(k.sk, "x");
                if k.pk.starts_with("sc") {
                    seen.push((k.pk.clone(), k.ipk.clone()));
                }
            }
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        seen.sort();
        seen == expected
    })
    .await;
}

/// Items over 400 KB are refused before anything is written.
pub async fn oversized_items_are_refused(s: &dyn Store) {
    let big = Item::new(
        "big",
        "x",
        json!({ "blob": "x".repeat(MAX_ITEM_BYTES) }),
        vec![],
    );
    assert!(matches!(
        s.write(put(big, Cond::None)).await,
        Err(StoreError::ItemTooLarge(_))
    ));
    assert!(s.get(T, "big", "x").await.unwrap().is_none());
}

/// Read-modify-write with version conditions loses no update under concurrency.
pub async fn concurrent_updates_lose_nothing(s: Arc<dyn Store>) {
    s.write(put(item("counter", "x", 0, None), Cond::NotExists))
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..10 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..10 {
                loop {
                    let cur = s.get(T, "counter", "x").await.unwrap().unwrap();
                    let n = cur.data["n"].as_i64().unwrap_or(0);
                    match s
                        .write(put(
                            item("counter", "x", n + 1, None),
                            Cond::Version(cur.version),
                        ))
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if e.is_condition_failed() => continue,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let got = s.get(T, "counter", "x").await.unwrap().unwrap();
    assert_eq!(got.data["n"], 100);
    assert_eq!(got.version, 101);
}

/// Of many racing creates of one item, exactly one wins.
pub async fn racing_creates_have_one_winner(s: Arc<dyn Store>) {
    let mut handles = Vec::new();
    for i in 0..16 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            s.write(put(item("race", "x", i, None), Cond::NotExists))
                .await
                .is_ok()
        }));
    }
    let mut winners = 0;
    for h in handles {
        winners += h.await.unwrap() as usize;
    }
    assert_eq!(winners, 1);
}

/// [`ChangeLog::hold`](super::changes::ChangeLog::hold): one holder follows a reader at a
/// time; it keeps it by holding again, loses it once its time passes, and lets it go at once;
/// readers are held apart. Needs a reader named `first` and one named `second`.
pub async fn a_change_log_reader_has_one_holder(log: &dyn super::changes::ChangeLog) {
    use crate::time::Ts;
    let hold = |reader, holder, now, until| log.hold(reader, holder, Ts(now), Ts(until), None);
    assert!(hold("first", "a", 1_000, 11_000).await.expect("hold"));
    assert!(
        !hold("first", "b", 2_000, 12_000).await.expect("hold"),
        "a holds it"
    );
    assert!(
        hold("second", "b", 2_000, 12_000).await.expect("hold"),
        "another reader"
    );
    assert!(
        hold("first", "a", 5_000, 15_000).await.expect("hold"),
        "kept"
    );
    assert!(!hold("first", "b", 14_999, 25_000).await.expect("hold"));
    assert!(
        hold("first", "b", 15_000, 25_000).await.expect("hold"),
        "a's time passed"
    );
    assert!(
        !hold("first", "a", 16_000, 26_000).await.expect("hold"),
        "b holds it now"
    );
    assert!(
        hold("first", "b", 17_000, 17_000).await.expect("hold"),
        "let go"
    );
    assert!(
        hold("first", "a", 17_000, 27_000).await.expect("hold"),
        "at once"
    );
    assert!(
        !hold("nobody", "a", 17_000, 27_000).await.expect("hold"),
        "not a reader"
    );
    // From a holder known to be gone, before its time passes; only from that one.
    let holder = log.holder("first").await.expect("holder");
    assert_eq!(holder, Some(("a".to_string(), Ts(27_000))));
    let take = |from| log.hold("first", "c", Ts(18_000), Ts(28_000), Some(from));
    assert!(!take("b").await.expect("hold"), "b does not hold it");
    assert!(take("a").await.expect("hold"), "a is gone");
    assert_eq!(log.holder("nobody").await.expect("holder"), None);
}

/// The [`ChangeLog`](super::changes::ChangeLog) promises, for an adapter that keeps a log of
/// table `T` (and not of `T2`) for the readers `"first"` and `"second"`, nothing written yet.
pub async fn change_log_follows_writes(s: &dyn Store, log: &dyn super::changes::ChangeLog) {
    let all = [T, T2];
    let read = |after| log.changes_after(after, &all, 100);
    assert_eq!(log.position("first").await.expect("position"), 0);
    let start = read(0).await.expect("read").next;
    let woken = log.appended();
    let wake = woken.notified();
    let v1 = s
        .write(put(item("c1", "a", 1, None), Cond::NotExists))
        .await
        .expect("put");
    tokio::time::timeout(Duration::from_secs(5), wake)
        .await
        .expect("a write that appended wakes the readers");
    // Refused writes and a cancelled transaction leave nothing; a delete has no new image; a
    // table without a log is not in it.
    let refused = s
        .write(put(item("c1", "a", 9, None), Cond::NotExists))
        .await;
    assert!(refused.is_err_and(|e| e.is_condition_failed()));
    let cancelled = s
        .transact(vec![
            put(item("c2", "a", 9, None), Cond::NotExists),
            put(item("c1", "a", 9, None), Cond::NotExists),
        ])
        .await;
    assert!(cancelled.is_err_and(|e| e.is_condition_failed()));
    s.write(WriteOp::Put {
        table: T2,
        item: item("c3", "a", 1, None),
        cond: Cond::None,
    })
    .await
    .expect("put elsewhere");
    s.write(put(item("c1", "a", 2, None), Cond::Version(v1)))
        .await
        .expect("update");
    s.transact(vec![
        put(item("c2", "a", 3, None), Cond::NotExists),
        put(item("c4", "a", 4, None), Cond::NotExists),
    ])
    .await
    .expect("transaction");
    s.write(WriteOp::Delete {
        table: T,
        pk: "c4".into(),
        sk: "a".into(),
        cond: Cond::None,
    })
    .await
    .expect("delete");
    let page = read(start).await.expect("read");
    let seen: Vec<(&str, String, u64, i64)> = page
        .changes
        .iter()
        .map(|c| {
            (
                c.table,
                c.item.pk.clone(),
                c.item.version,
                c.item.data["n"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (T, "c1".to_string(), 1, 1),
            (T, "c1".to_string(), 2, 2),
            (T, "c2".to_string(), 1, 3),
            (T, "c4".to_string(), 1, 4),
        ],
        "every committed write of the logged table, as its new image, in order"
    );
    assert!(page.changes.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(!page.more);
    // At least once: what no reader marked is read again; a position only moves forward, and
    // a read from it gives what came after.
    assert_eq!(read(start).await.expect("again").changes.len(), 4);
    let second = page.changes[1].seq;
    log.passed("first", second).await.expect("passed");
    log.passed("first", start).await.expect("never back");
    assert_eq!(log.position("first").await.expect("position"), second);
    let rest = read(second).await.expect("rest");
    assert_eq!(rest.changes.len(), 2);
    assert_eq!(rest.changes[0].item.pk, "c2");
    // A page stops at its limit and says more may follow; the next goes on from it.
    let one = log.changes_after(start, &[T], 1).await.expect("one");
    assert_eq!((one.changes.len(), one.more), (1, true));
    let next = log.changes_after(one.next, &[T], 1).await.expect("next");
    assert_eq!(next.changes[0].item.version, 2);
    // What one reader passed stays for the other until it passes it too.
    assert_eq!(read(start).await.expect("kept").changes.len(), 4);
    log.passed("second", rest.next).await.expect("passed");
    log.passed("first", rest.next).await.expect("passed");
    assert!(read(rest.next).await.expect("read").changes.is_empty());
    // Numbering goes on past what was forgotten.
    s.write(put(item("c5", "a", 5, None), Cond::NotExists))
        .await
        .expect("put");
    let last = read(rest.next).await.expect("after trimming");
    assert_eq!(last.changes.len(), 1);
    assert!(last.changes[0].seq > rest.next);
}
