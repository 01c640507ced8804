//! The outbox drainer. Events are written into the item of the record they concern, in the
//! same conditional write as the change (see [`crate::records::outbox`]). The drainer
//! publishes them through an [`EventSink`] and only then removes them, so delivery is at
//! least once: a crash between the two re-publishes on the next pass.

use super::held::Image;
use super::{Event, EventSink, SinkError};
use crate::records::outbox::{Outbound, OutboxEvent, Outboxed, OUTBOX_INDEX};
use crate::records::task::sk_dead_letter;
use crate::store::shard::{shard_pk, SHARDS};
use crate::store::{Cond, Data, Item, SkRange, Store, StoreError, WriteOp};
use crate::time::Ts;
use std::sync::Mutex;

/// Why a drain stopped: the store failed, or the sink did (the events stay in their outboxes,
/// or are held for the sweeper, and go out later).
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// Reading or writing records failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The sink did not take the events.
    #[error("publishing failed: {0}")]
    Sink(#[from] SinkError),
}

/// A bounded set of recently published event ids (the oldest are forgotten first).
#[derive(Default)]
pub struct RecentIds {
    inner: Mutex<(
        std::collections::HashSet<String>,
        std::collections::VecDeque<String>,
    )>,
}

impl RecentIds {
    /// Ids kept; far more than one publisher pass can have in flight.
    const CAPACITY: usize = 50_000;

    /// True if `id` was published recently.
    pub fn contains(&self, id: &str) -> bool {
        self.inner.lock().is_ok_and(|g| g.0.contains(id))
    }

    /// Remembers published ids.
    pub fn extend<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        if let Ok(mut g) = self.inner.lock() {
            let (set, order) = &mut *g;
            for id in ids {
                if set.insert(id.to_string()) {
                    order.push_back(id.to_string());
                }
            }
            while order.len() > Self::CAPACITY {
                if let Some(old) = order.pop_front() {
                    set.remove(&old);
                }
            }
        }
    }
}

/// What one drain step did.
#[derive(Debug, PartialEq, Eq)]
pub enum DrainOutcome {
    /// This many events were published and removed.
    Delivered(usize),
    /// Nothing was waiting.
    Empty,
}

fn to_event(prefix: &str, e: &OutboxEvent, payload: serde_json::Value) -> Event {
    Event {
        exchange: crate::routing::exchange_name(prefix, &e.exchange),
        routing_key: e.routing_key.clone(),
        cc: e.cc.clone(),
        payload,
        text: Some(e.payload.text().to_string()),
    }
}

fn decode<R: Outboxed>(item: Item) -> Result<(R, u64), StoreError> {
    let rec = item
        .data
        .decode()
        .map_err(|e| StoreError::Other(e.to_string()))?;
    Ok((rec, item.version))
}

/// Applies `change` to a copy of a record believed current at `version` and writes it back
/// conditionally; on a concurrent change, re-reads and applies it again. Nothing is written
/// once `change` says there is nothing to do, or if the record is gone.
async fn update_record<R: Outboxed>(
    store: &dyn Store,
    mut rec: R,
    mut version: u64,
    mut change: impl FnMut(&mut R) -> bool,
) -> Result<(), StoreError> {
    loop {
        if !change(&mut rec) {
            return Ok(());
        }
        let data = Data::encode(&rec).map_err(|e| StoreError::Other(e.to_string()))?;
        let item = Item::new(rec.pk(), R::SK, data, rec.index_entries());
        let op = WriteOp::Put {
            table: R::TABLE,
            item,
            cond: Cond::Version(version),
        };
        match store.write(op).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_condition_failed() => {
                match store.get(R::TABLE, rec.pk(), R::SK).await? {
                    Some(item) => (rec, version) = decode(item)?,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Removes the events `published` from a record's outbox (see [`update_record`]).
async fn remove_published<R: Outboxed>(
    store: &dyn Store,
    rec: R,
    version: u64,
    published: &[String],
) -> Result<(), StoreError> {
    update_record(store, rec, version, |rec| {
        rec.outbox_mut().retain(|e| !published.contains(&e.id));
        if rec.outbox().is_empty() {
            rec.clear_held();
        }
        true
    })
    .await
}

/// Delivers the outboxes of records (at the given versions) the caller has just written:
/// publishes all their events in one call (except those in `published`, which went out
/// already), then removes them, writing the records concurrently. The records are taken as
/// given (the sweeper reads each one first). If the sink fails, each record that holds its
/// events in its outbox notes that they wait since `now` ([`Outboxed::held_since`]), once.
pub async fn drain_written<R: Outboxed>(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    written: Vec<(R, u64)>,
    published: &RecentIds,
    now: Ts,
) -> Result<DrainOutcome, DrainError> {
    let written: Vec<_> = written
        .into_iter()
        .filter(|(rec, _)| !rec.outbox().is_empty())
        .collect();
    if written.is_empty() {
        return Ok(DrainOutcome::Empty);
    }
    let mut events = Vec::new();
    for (rec, _) in &written {
        events.extend(
            checked_events(store, R::TABLE, prefix, rec.pk(), rec.outbox(), published).await?,
        );
    }
    if let Err(e) = sink.publish(&events).await {
        tracing::warn!(error = %e, "publishing failed; events stay in the outbox");
        for (rec, version) in written.into_iter().filter(|(r, _)| !r.stream_delivered()) {
            update_record(store, rec, version, |r| {
                let mark = r.held_since().is_none() && !r.outbox().is_empty();
                if mark {
                    r.hold_for_sweep(now);
                }
                mark
            })
            .await?;
        }
        return Err(e.into());
    }
    published.extend(
        written
            .iter()
            .flat_map(|(rec, _)| rec.outbox().iter().map(|e| e.id.as_str())),
    );
    let removals = written.into_iter().map(|(rec, version)| async move {
        let published: Vec<String> = rec.outbox().iter().map(|e| e.id.clone()).collect();
        remove_published(store, rec, version, &published).await
    });
    for result in futures_util::future::join_all(removals).await {
        result?;
    }
    Ok(DrainOutcome::Delivered(events.len()))
}

/// The events of record `pk` of `table` to publish (leaving out those in `published`, which
/// went out already); one that fails its message schema is kept aside instead.
pub(crate) async fn checked_events(
    store: &dyn Store,
    table: &'static str,
    prefix: &str,
    pk: &str,
    outbox: &[OutboxEvent],
    published: &RecentIds,
) -> Result<Vec<Event>, StoreError> {
    let mut events = Vec::new();
    for e in outbox.iter().filter(|e| !published.contains(&e.id)) {
        let checked = e.payload.parse().map_err(|err| vec![err.to_string()]);
        match checked.and_then(|payload| {
            crate::schema::check(&format!("{}-message", e.exchange), &payload).map(|()| payload)
        }) {
            Ok(payload) => events.push(to_event(prefix, e, payload)),
            Err(errors) => keep_dead_letter(store, table, pk, e, errors).await?,
        }
    }
    Ok(events)
}

/// An event that fails its message schema is a bug: it is logged loudly and moved aside (its
/// removal from the outbox follows with the published ones), so that it blocks nothing.
async fn keep_dead_letter(
    store: &dyn Store,
    table: &'static str,
    pk: &str,
    event: &OutboxEvent,
    errors: Vec<String>,
) -> Result<(), StoreError> {
    tracing::error!(pk, exchange = %event.exchange, event_id = %event.id, ?errors,
        "BUG: an event does not match its schema; kept as a dead letter instead of published");
    let data = serde_json::json!({ "event": event, "errors": errors });
    let item = Item::new(pk, sk_dead_letter(&event.id), data, vec![]);
    store
        .write(WriteOp::Put {
            table,
            item,
            cond: Cond::None,
        })
        .await
        .map(|_| ())
}

/// What a batch of a change stream came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Streamed {
    /// Events published.
    pub delivered: usize,
    /// Records whose events wait for the sweeper: stream records held
    /// ([`super::held`]), or records whose outbox keeps them.
    pub held: usize,
}

/// Delivers the outboxes in records' items as a change stream (DynamoDB Streams) reports
/// them; other items are ignored. A stream-delivered record ([`Outboxed::stream_delivered`])
/// has each image's own events published, in order, and nothing written; if that fails, or
/// if the record has events held already (which they must follow), the images' events are
/// held for the sweeper ([`super::held`]), so that they no longer depend on the stream's
/// retries (nor on its 24-hour retention). Any other record has the events of its latest
/// image published and then removed: an event only leaves such an outbox once published.
/// Only a failure to read or write the store is an error: the batch must then be retried.
pub async fn drain_stream<R: Outboxed>(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    images: Vec<Item>,
    published: &RecentIds,
    now: Ts,
) -> Result<Streamed, DrainError> {
    let mut streamed: Vec<Image> = vec![];
    let mut latest: std::collections::HashMap<String, (R, u64)> = Default::default();
    for item in images.into_iter().filter(|i| i.sk == R::SK) {
        // Only the events and the flag: most images are the stream's to deliver, and the
        // rest of the record would be built for nothing.
        let view: Outbound = item
            .data
            .decode()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        if view.outbox.is_empty() {
            continue;
        }
        if !view.sweep {
            streamed.push(Image {
                pk: item.pk,
                version: item.version,
                outbox: view.outbox,
            });
        } else if latest.get(&item.pk).is_none_or(|(_, v)| *v < item.version) {
            let (rec, version) = decode::<R>(item)?;
            latest.insert(rec.pk().to_string(), (rec, version));
        }
    }
    let mut out = Streamed::default();
    if streamed.is_empty() && latest.is_empty() {
        return Ok(out);
    }
    let pks = streamed
        .iter()
        .map(|i| i.pk.as_str())
        .chain(latest.keys().map(String::as_str));
    let behind = super::held::holding::<R>(store, pks).await?;
    // Events of a record with events held wait behind them; an outbox keeps its own.
    let (wait, go): (Vec<_>, Vec<_>) = streamed.into_iter().partition(|i| behind.contains(&i.pk));
    let before = latest.len();
    latest.retain(|pk, _| !behind.contains(pk));
    super::held::hold::<R>(store, &wait, now).await?;
    out.held += wait.len() + before - latest.len();
    if !go.is_empty() {
        let mut events = vec![];
        for image in &go {
            events.extend(
                checked_events(store, R::TABLE, prefix, &image.pk, &image.outbox, published)
                    .await?,
            );
        }
        match sink.publish(&events).await {
            Ok(()) => {
                published.extend(
                    go.iter()
                        .flat_map(|i| i.outbox.iter().map(|e| e.id.as_str())),
                );
                out.delivered += events.len();
            }
            Err(e) => {
                tracing::warn!(error = %e, "publishing failed; the events are held for the sweeper");
                super::held::hold::<R>(store, &go, now).await?;
                out.held += go.len();
            }
        }
    }
    let records = latest.len();
    match drain_written(
        store,
        sink,
        prefix,
        latest.into_values().collect(),
        published,
        now,
    )
    .await
    {
        Ok(DrainOutcome::Delivered(n)) => out.delivered += n,
        Ok(DrainOutcome::Empty) => {}
        // Their outboxes keep them, marked as waiting, for the sweeper.
        Err(DrainError::Sink(_)) => out.held += records,
        Err(e) => return Err(e),
    }
    Ok(out)
}

/// What sweeping passes note of the events they could not deliver: when they run, and since
/// when the oldest of those has waited.
pub struct Waiting {
    /// The passes' time: a record whose events it could not deliver waits since then, if it
    /// did not already.
    pub now: Ts,
    /// The oldest [`Outboxed::held_since`] of the records left undelivered.
    pub oldest: Mutex<Option<Ts>>,
}

impl Waiting {
    /// Nothing noted yet, at `now`.
    pub fn at(now: Ts) -> Waiting {
        Waiting {
            now,
            oldest: Mutex::new(None),
        }
    }
}

/// One pass over every shard of `R`'s outbox index (up to `batch` records per shard),
/// leaving out the records for which `skip` is true (a faster path will deliver them);
/// returns the number of events delivered, and whether a shard may hold more. Once
/// publishing fails, the pass goes on reading the records it found without publishing, and
/// `held` takes the oldest [`Outboxed::held_since`] among those left undelivered.
pub async fn drain_all<R: Outboxed>(
    store: &dyn Store,
    sink: &dyn EventSink,
    prefix: &str,
    batch: usize,
    skip: &(dyn Fn(&str) -> bool + Sync),
    published: &RecentIds,
    held: &Waiting,
) -> Result<(usize, bool), DrainError> {
    let mut delivered = 0;
    let mut more = false;
    let mut failed = None;
    for shard in 0..SHARDS {
        let page = store
            .query_index(
                R::TABLE,
                OUTBOX_INDEX,
                &shard_pk(OUTBOX_INDEX, shard),
                &SkRange::default(),
                None,
                batch,
            )
            .await?;
        more |= page.items.len() >= batch;
        for item in page.items.into_iter().filter(|i| !skip(&i.pk)) {
            let Some(found) = store.get(R::TABLE, &item.pk, R::SK).await? else {
                continue;
            };
            let (rec, version) = decode::<R>(found)?;
            let since = rec.held_since();
            // Once the sink failed, the rest of the pass only looks at how long events wait.
            if failed.is_none() {
                let one = vec![(rec, version)];
                match drain_written::<R>(store, sink, prefix, one, published, held.now).await {
                    Ok(DrainOutcome::Delivered(n)) => {
                        delivered += n;
                        continue;
                    }
                    Ok(DrainOutcome::Empty) => continue,
                    Err(e) => failed = Some(e),
                }
            }
            if let (Some(since), Ok(mut oldest)) = (since, held.oldest.lock()) {
                *oldest = Some(oldest.map_or(since, |t| t.min(since)));
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((delivered, more)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RecordingSink;
    use crate::records::task::{index, ReasonResolved, TaskRecord, SK_STATUS, TASKS};
    use crate::routing::Exchange;
    use crate::store::sqlite::SqliteStore;
    use crate::time::Ts;
    use async_trait::async_trait;
    use serde_json::json;

    fn record(id: &str, sweep: bool) -> TaskRecord {
        TaskRecord {
            sweep,
            ..TaskRecord::for_test(id)
        }
    }

    /// Writes a status item as the queue does; returns its image (as a stream would carry it).
    async fn put_status(store: &SqliteStore, rec: &TaskRecord, cond: Cond) -> Item {
        let data = crate::records::outbox::stored_data(rec).unwrap();
        let item = Item::new(&rec.task_id, SK_STATUS, data, rec.index_entries());
        let version = store
            .write(WriteOp::Put {
                table: TASKS,
                item: item.clone(),
                cond,
            })
            .await
            .unwrap();
        Item { version, ..item }
    }

    #[tokio::test]
    async fn an_event_failing_its_schema_is_kept_aside_and_blocks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db")).unwrap();
        let id = crate::ids::new_slugid();
        let mut rec = record(&id, true);
        rec.start_first_run(Ts(0));
        rec.emit_created();
        assert_eq!(rec.outbox.len(), 2, "task-defined and task-pending");
        let mut bad = rec.outbox[0].clone();
        bad.id = "bad".into();
        bad.payload = crate::records::outbox::Payload::of(&json!({ "version": 2 }));
        rec.outbox.insert(0, bad);
        let item = Item::new(&id, SK_STATUS, serde_json::to_value(&rec).unwrap(), vec![]);
        let version = store
            .write(WriteOp::Put {
                table: TASKS,
                item,
                cond: Cond::NotExists,
            })
            .await
            .unwrap();

        let sink = RecordingSink::default();
        let out = drain_written(
            &store,
            &sink,
            "x/",
            vec![(rec, version)],
            &RecentIds::default(),
            Ts(0),
        )
        .await
        .unwrap();
        assert_eq!(out, DrainOutcome::Delivered(2));
        let sent: Vec<String> = sink.events().into_iter().map(|e| e.exchange).collect();
        assert_eq!(sent, ["x/task-defined", "x/task-pending"]);
        let kept = store
            .get(TASKS, &id, &sk_dead_letter("bad"))
            .await
            .unwrap()
            .expect("the bad event is kept for inspection");
        assert_eq!(kept.data["event"]["payload"]["version"], 2);
        assert!(!kept.data["errors"].as_array().unwrap().is_empty());
        let status = store.get(TASKS, &id, SK_STATUS).await.unwrap().unwrap();
        assert_eq!(status.data["outbox"], json!([]), "both left the outbox");
    }

    /// RabbitMQ unreachable, as far as the publisher can tell.
    struct Down;

    #[async_trait]
    impl EventSink for Down {
        async fn publish(&self, _: &[Event]) -> Result<(), SinkError> {
            Err(SinkError::new("connection refused"))
        }
    }

    /// Where the stream delivers events, each write stores only its own, and the publisher
    /// publishes every image's events and writes nothing. When it cannot, it holds them for
    /// the sweeper; a later image of the same task, in a later batch, is held behind them even
    /// though the broker is back, and the sweeper delivers them in order: the held events
    /// never take a later write's events ahead of an earlier one's.
    #[tokio::test]
    async fn held_events_keep_their_order_across_batches() {
        use crate::events::held::{drain_held, held_records};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db")).unwrap();
        let id = crate::ids::new_slugid();
        let mut rec = record(&id, false);
        rec.start_first_run(Ts(0));
        rec.emit_created();
        let first = put_status(&store, &rec, Cond::NotExists).await;
        // Each next write starts from the stored record, as every writer does.
        let mut rec: TaskRecord = first.data.decode().unwrap();
        assert_eq!(rec.outbox.len(), 2);
        rec.claim(0, "g", "w", Ts(1), Ts(1_000)).unwrap();
        let second = put_status(&store, &rec, Cond::Version(first.version)).await;
        let mut rec: TaskRecord = second.data.decode().unwrap();
        rec.resolve(0, ReasonResolved::Completed, Ts(2)).unwrap();
        let third = put_status(&store, &rec, Cond::Version(second.version)).await;
        let names = |v: &serde_json::Value| -> Vec<String> {
            v["outbox"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["exchange"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&second.data), ["task-running"]);
        assert_eq!(names(&third.data), ["task-completed"]);
        assert!(second.indexes.iter().all(|e| e.index != index::OUTBOX));
        let none = RecentIds::default();
        let sweep = |sink: &'static dyn EventSink, at: Ts| {
            let (store, none) = (&store, &none);
            async move {
                let waiting = Waiting::at(at);
                let out = drain_held::<TaskRecord>(store, sink, "x/", 10, none, &waiting).await;
                let oldest = *waiting.oldest.lock().unwrap();
                (out.map(|p| p.delivered), oldest)
            }
        };
        static SINK: std::sync::LazyLock<RecordingSink> =
            std::sync::LazyLock::new(RecordingSink::default);
        let sent = || -> Vec<String> { SINK.events().into_iter().map(|e| e.exchange).collect() };

        // The stream's first batch, the broker away: held, and acknowledged.
        let out = drain_stream::<TaskRecord>(&store, &Down, "x/", vec![first], &none, Ts(50))
            .await
            .unwrap();
        assert_eq!(
            out,
            Streamed {
                delivered: 0,
                held: 1
            }
        );
        assert_eq!(
            held_records::<TaskRecord>(&store, 10).await.unwrap(),
            std::slice::from_ref(&id)
        );
        let stored = store.get(TASKS, &id, SK_STATUS).await.unwrap().unwrap();
        assert_eq!(stored.version, third.version, "the record is left alone");
        // A sweep that cannot publish says since when the events wait.
        let (failed, oldest) = sweep(&Down, Ts(60)).await;
        assert!(failed.is_err());
        assert_eq!(oldest, Some(Ts(50)));

        // The broker is back before the sweeper's next pass: the next batch's image waits
        // behind the held events rather than going out first.
        let out = drain_stream::<TaskRecord>(&store, &*SINK, "x/", vec![second], &none, Ts(70))
            .await
            .unwrap();
        assert_eq!(
            out,
            Streamed {
                delivered: 0,
                held: 1
            }
        );
        assert!(sent().is_empty());
        let (swept, oldest) = sweep(&*SINK, Ts(80)).await;
        assert_eq!(swept.unwrap(), 3);
        assert_eq!(oldest, None, "nothing left waiting");
        assert_eq!(
            sent(),
            ["x/task-defined", "x/task-pending", "x/task-running"]
        );
        assert!(held_records::<TaskRecord>(&store, 10)
            .await
            .unwrap()
            .is_empty());

        // Nothing held: the stream publishes again, and the next empty pass clears the marker.
        let out = drain_stream::<TaskRecord>(&store, &*SINK, "x/", vec![third], &none, Ts(90))
            .await
            .unwrap();
        assert_eq!(
            out,
            Streamed {
                delivered: 1,
                held: 0
            }
        );
        assert_eq!(sweep(&*SINK, Ts(95)).await.0.unwrap(), 0);
        let marker = store.get(TASKS, "~held", "marker").await.unwrap().unwrap();
        assert_eq!(marker.data["set"], false);
        assert_eq!(
            sent(),
            [
                "x/task-defined",
                "x/task-pending",
                "x/task-running",
                "x/task-completed"
            ]
        );
    }

    /// Task graphs where the stream delivers events: as task statuses, each write stores only
    /// its own events and no outbox entry, so the sweeper never publishes what the stream's
    /// publisher does; a batch that cannot be published is held for the sweeper.
    #[tokio::test]
    async fn a_graph_write_carries_its_own_events_for_the_stream() {
        use crate::records::graph::{state, GraphRecord, SK_TASK_GRAPH, TASK_GRAPHS};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("db")).unwrap();
        let gid = crate::ids::new_slugid();
        let mut g = GraphRecord {
            unknown: Default::default(),
            task_graph_id: gid.clone(),
            scheduler_id: "s".into(),
            state: state::RUNNING.into(),
            routing: String::new(),
            requires: vec![],
            requires_left: vec![],
            metadata: json!({}),
            tags: json!({}),
            salt: "salt".into(),
            digest: String::new(),
            created: Ts(0),
            outbox: vec![],
            sweep: false,
            held_since: None,
        };
        g.emit(Exchange::TaskGraphRunning);
        let put = |g: &GraphRecord, cond: Cond| {
            let item = g.item().unwrap();
            let store = &store;
            async move {
                let version = store
                    .write(WriteOp::Put {
                        table: TASK_GRAPHS,
                        item: item.clone(),
                        cond,
                    })
                    .await
                    .unwrap();
                Item { version, ..item }
            }
        };
        let first = put(&g, Cond::NotExists).await;
        let mut g: GraphRecord = first.data.decode().unwrap();
        g.state = state::FINISHED.into();
        g.emit(Exchange::TaskGraphFinished);
        let second = put(&g, Cond::Version(first.version)).await;
        assert_eq!(second.data["outbox"].as_array().map(Vec::len), Some(1));
        assert!(first.indexes.is_empty() && second.indexes.is_empty());
        let sweep = || async {
            let sink = RecordingSink::default();
            let (none, held) = (RecentIds::default(), Waiting::at(Ts(0)));
            drain_all::<GraphRecord>(&store, &sink, "s/", 10, &|_| false, &none, &held)
                .await
                .unwrap()
                .0
        };
        assert_eq!(sweep().await, 0, "nothing for the sweeper");

        let sink = RecordingSink::default();
        let batch = vec![first.clone(), second.clone()];
        let none = RecentIds::default();
        let out = drain_stream::<GraphRecord>(&store, &sink, "s/", batch, &none, Ts(0))
            .await
            .unwrap();
        assert_eq!(
            out,
            Streamed {
                delivered: 2,
                held: 0
            }
        );
        let sent: Vec<String> = sink.events().into_iter().map(|e| e.exchange).collect();
        assert_eq!(sent, ["s/task-graph-running", "s/task-graph-finished"]);
        let stored = store.get(TASK_GRAPHS, &gid, SK_TASK_GRAPH).await.unwrap();
        assert_eq!(stored.map(|i| i.version), Some(second.version));

        let out =
            drain_stream::<GraphRecord>(&store, &Down, "s/", vec![first, second], &none, Ts(0))
                .await
                .unwrap();
        assert_eq!(
            out,
            Streamed {
                delivered: 0,
                held: 2
            }
        );
        assert_eq!(sweep().await, 0, "nothing in the outbox index");
        let sink = RecordingSink::default();
        let waiting = Waiting::at(Ts(0));
        let fresh = RecentIds::default();
        let swept = crate::events::held::drain_held::<GraphRecord>(
            &store, &sink, "s/", 10, &fresh, &waiting,
        );
        assert_eq!(swept.await.unwrap().delivered, 2, "held for the sweeper");
    }
}
