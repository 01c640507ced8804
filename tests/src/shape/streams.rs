//! DynamoDB stream event source mappings, locally: each mapping polls its table's stream on
//! LocalStack shard by shard, in order, and invokes its function with the template's batch
//! size, batching window and filters; a batch that fails (or reports partial failures) is
//! retried from the first failed record, split in two first with bisect-on-error, and after
//! the mapping's retries it is recorded in the on-failure destination and skipped, as
//! Lambda's event source mappings do. With a `ParallelizationFactor` a shard's records go to
//! that many lanes by partition key, each with one batch out at a time: one item's records
//! stay in order, and a slow batch holds back only its own lane.

use super::lambda::{Failure, Pool};
use super::template::StreamMapping;
use crate::runtime_api::localstack_json;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

async fn streams(op: &str, body: Value) -> Result<Value, String> {
    localstack_json(
        "dynamodb",
        "1.0",
        &format!("DynamoDBStreams_20120810.{op}"),
        body,
    )
    .await
}

/// True if `value` matches an EventBridge-style filter `pattern` (the subset Lambda's
/// filters use: nested objects; arrays of allowed values, `exists`, `prefix` and
/// `anything-but`).
pub fn matches(pattern: &Value, value: Option<&Value>) -> bool {
    match pattern {
        Value::Object(p) => p
            .iter()
            .all(|(k, sub)| matches(sub, value.and_then(|v| v.get(k)))),
        Value::Array(options) => options.iter().any(|o| match o {
            Value::Object(m) if m.contains_key("exists") => {
                m["exists"].as_bool() == Some(value.is_some())
            }
            Value::Object(m) if m.contains_key("prefix") => value
                .and_then(Value::as_str)
                .zip(m["prefix"].as_str())
                .is_some_and(|(v, p)| v.starts_with(p)),
            Value::Object(m) if m.contains_key("anything-but") => {
                let but = &m["anything-but"];
                value.is_some_and(|v| match but {
                    Value::Array(a) => !a.contains(v),
                    x => x != v,
                })
            }
            literal => value == Some(literal),
        }),
        _ => value == Some(pattern),
    }
}

/// Orders sequence numbers (decimal strings of any length).
fn seq_key(s: &str) -> (usize, &str) {
    (s.len(), s)
}

fn seq_of(r: &Value) -> &str {
    r["dynamodb"]["SequenceNumber"].as_str().unwrap_or_default()
}

struct Shard {
    id: String,
    iterator: Option<String>,
    /// One per `ParallelizationFactor`.
    lanes: Vec<Slot>,
    done: bool,
}

/// A lane, or its batch out being handled.
struct Slot {
    /// `None` while a batch of it is out.
    lane: Option<Lane>,
    /// The batch out; it hands the lane back.
    out: Option<tokio::task::JoinHandle<Lane>>,
    /// Records read while the batch was out, and when the first of them was.
    incoming: VecDeque<Value>,
    incoming_since: Option<Instant>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            lane: Some(Lane::default()),
            out: None,
            incoming: VecDeque::new(),
            incoming_since: None,
        }
    }

    /// Records read and not yet handed over.
    fn held(&self) -> usize {
        self.incoming.len() + self.lane.as_ref().map_or(0, |l| l.buffer.len())
    }

    /// Takes the lane back once its batch is handled, with what was read meanwhile.
    async fn settle(&mut self) {
        if !self.out.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        let Some(out) = self.out.take() else { return };
        let mut lane = out.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "a stream batch's delivery panicked; its records are lost");
            Lane::default()
        });
        if lane.buffer.is_empty() {
            lane.since = self.incoming_since;
        }
        self.incoming_since = None;
        lane.buffer.extend(self.incoming.drain(..));
        self.lane = Some(lane);
    }
}

#[derive(Default)]
struct Lane {
    /// Records read and not yet handled, in order.
    buffer: VecDeque<Value>,
    /// When the oldest buffered record was read (the batching window runs from it).
    since: Option<Instant>,
    /// Failed attempts of the batch at the head of the buffer.
    attempts: u32,
}

/// The lane of a stream record among `n`, by its partition key (`pk`), as Lambda keeps the
/// records of one partition key in order.
pub fn lane_of(record: &Value, n: usize) -> usize {
    use std::hash::{Hash, Hasher};
    let keys = &record["dynamodb"]["Keys"];
    let key = keys.get("pk").unwrap_or(keys).to_string();
    // Fixed keys: the same lane on every run.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % n.max(1) as u64) as usize
}

/// Runs one mapping until `stop`.
pub async fn run(pool: Arc<Pool>, m: StreamMapping, mut stop: watch::Receiver<bool>) {
    let m = Arc::new(m);
    // Told when a batch out comes back.
    let back = Arc::new(tokio::sync::Notify::new());
    let mut shards: BTreeMap<String, Shard> = BTreeMap::new();
    let mut last_describe = Instant::now() - Duration::from_secs(60);
    let mut ended = pool.invocations_ended();
    loop {
        if *stop.borrow() {
            return;
        }
        ended.borrow_and_update();
        // Shards are looked for every 15 s (at once while there are none: a new table's
        // stream takes a moment to become active); a stream's shards roll over in hours, and
        // each look costs LocalStack about 100 ms.
        if shards.is_empty() || last_describe.elapsed() > Duration::from_secs(15) {
            last_describe = Instant::now();
            if let Err(e) = describe(&m, &mut shards).await {
                tracing::debug!(stream = %m.stream_arn, error = %e, "DescribeStream failed");
            }
        }
        let mut busy = false;
        for shard in shards.values_mut().filter(|s| !s.done) {
            match step(&pool, &m, shard, &back).await {
                Ok(b) => busy |= b,
                Err(e) => tracing::warn!(shard = %shard.id, error = %e, "stream poll failed"),
            }
        }
        if busy {
            continue;
        }
        // Records wait for their batching window: poll again when the first window closes
        // (Lambda keeps polling meanwhile; nothing new changes when the batch goes).
        let window_closes = shards
            .values()
            .flat_map(|s| &s.lanes)
            .filter_map(|s| s.lane.as_ref().and_then(|l| l.since))
            .map(|t| t + m.window)
            .min();
        if let Some(at) = window_closes {
            tokio::select! {
                _ = tokio::time::sleep_until(at.max(Instant::now()).into()) => {}
                _ = back.notified() => {}
                _ = stop.changed() => return,
            }
            continue;
        }
        // Idle: Lambda polls each shard about four times a second. Here an idle stream is
        // polled again a quarter of a second after a function's invocation ended (only the
        // functions write to the tables, and their records are on the stream when they
        // answer), else every 5 s (for writes from elsewhere): every poll costs LocalStack's
        // one DynamoDB process CPU that the functions need, and most stacks idle most of the
        // time.
        // A batch out that comes back is handled at once (its lane may hold more).
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = back.notified() => continue,
            _ = stop.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = ended.changed() => {}
            _ = back.notified() => {}
            _ = stop.changed() => return,
        }
    }
}

async fn describe(m: &StreamMapping, shards: &mut BTreeMap<String, Shard>) -> Result<(), String> {
    let d = streams("DescribeStream", json!({ "StreamArn": m.stream_arn })).await?;
    for s in d["StreamDescription"]["Shards"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let id = s["ShardId"].as_str().unwrap_or_default().to_string();
        if shards.contains_key(&id) {
            continue;
        }
        // A shard found later than the first look is read from its start.
        let kind = if shards.is_empty() {
            m.starting.as_str()
        } else {
            "TRIM_HORIZON"
        };
        let it = streams(
            "GetShardIterator",
            json!({ "StreamArn": m.stream_arn, "ShardId": id, "ShardIteratorType": kind }),
        )
        .await?;
        shards.insert(
            id.clone(),
            Shard {
                id,
                iterator: it["ShardIterator"].as_str().map(String::from),
                lanes: (0..m.parallel.max(1)).map(|_| Slot::new()).collect(),
                done: false,
            },
        );
    }
    Ok(())
}

/// Reads what is new on a shard and sends out the batches that are due, one per lane at a
/// time (each handled in a task of its own). True if it did anything (so the loop does not
/// sleep).
async fn step(
    pool: &Arc<Pool>,
    m: &Arc<StreamMapping>,
    shard: &mut Shard,
    back: &Arc<tokio::sync::Notify>,
) -> Result<bool, String> {
    let Shard {
        id,
        iterator,
        lanes,
        done,
    } = shard;
    for slot in lanes.iter_mut() {
        slot.settle().await;
    }
    let mut read = false;
    if lanes.iter().all(|s| s.held() < m.batch_size) {
        if let Some(it) = iterator.clone() {
            let out = streams("GetRecords", json!({ "ShardIterator": it, "Limit": 1000 })).await?;
            *iterator = out["NextShardIterator"].as_str().map(String::from);
            for mut r in out["Records"].as_array().cloned().unwrap_or_default() {
                r["eventSourceARN"] = json!(m.stream_arn);
                // Records no filter matches are dropped (and count as handled).
                if m.filters.is_empty() || m.filters.iter().any(|f| matches(f, Some(&r))) {
                    read = true;
                    let n = lanes.len();
                    let slot = &mut lanes[lane_of(&r, n)];
                    match &mut slot.lane {
                        Some(lane) => {
                            lane.buffer.push_back(r);
                            lane.since.get_or_insert_with(Instant::now);
                        }
                        None => {
                            slot.incoming.push_back(r);
                            slot.incoming_since.get_or_insert_with(Instant::now);
                        }
                    }
                }
            }
        } else if lanes.iter().all(|s| s.held() == 0 && s.out.is_none()) {
            *done = true;
            return Ok(false);
        }
    }
    let ended = iterator.is_none();
    let mut sent = false;
    for slot in lanes.iter_mut() {
        let due = slot.lane.as_ref().is_some_and(|l| {
            !l.buffer.is_empty()
                && (l.buffer.len() >= m.batch_size
                    || l.since.is_some_and(|t| t.elapsed() >= m.window)
                    || ended)
        });
        let Some(mut lane) = slot.lane.take_if(|_| due) else {
            continue;
        };
        let n = lane.buffer.len().min(m.batch_size);
        let (pool, m, id, back) = (pool.clone(), m.clone(), id.clone(), back.clone());
        slot.out = Some(tokio::spawn(async move {
            deliver(&pool, &m, &id, &mut lane, n).await;
            back.notify_one();
            lane
        }));
        sent = true;
    }
    Ok(read || sent)
}

/// Invokes with the first `n` buffered records and handles the answer.
async fn deliver(pool: &Arc<Pool>, m: &StreamMapping, shard: &str, lane: &mut Lane, n: usize) {
    let batch: Vec<Value> = lane.buffer.iter().take(n).cloned().collect();
    let result = pool.invoke(&json!({ "Records": batch })).await;
    // How many records of the batch are done; `None`: retry from a failed record.
    let handled = match &result {
        Ok(reply) if m.partial => {
            let failed: Vec<&str> = reply["batchItemFailures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["itemIdentifier"].as_str())
                .collect();
            match failed.iter().min_by_key(|s| seq_key(s)) {
                None => Some(n),
                // The records before the first failed one are done; an identifier not in the
                // batch fails the whole batch, as on Lambda.
                Some(first) => batch
                    .iter()
                    .position(|r| seq_of(r) == *first)
                    .filter(|&i| i > 0),
            }
        }
        Ok(_) => Some(n),
        Err(_) => None,
    };
    match handled {
        Some(k) => {
            lane.buffer.drain(..k);
            if k == n {
                lane.attempts = 0;
            } else {
                lane.attempts += 1;
            }
        }
        None if matches!(result, Err(Failure::Throttled)) => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        }
        None => lane.attempts += 1,
    }
    if lane.buffer.is_empty() {
        lane.since = None;
    }
    if handled == Some(n) {
        return;
    }
    if m.retries.is_some_and(|r| lane.attempts > r) {
        give_up(pool, m, shard, lane, n - handled.unwrap_or(0), &result).await;
        return;
    }
    if m.bisect && n > 1 && handled.is_none() {
        // Split the failing batch and try its first half on its own.
        deliver_half(pool, m, shard, lane, n.div_ceil(2)).await;
        return;
    }
    let backoff = Duration::from_millis((100u64 << lane.attempts.min(6)).min(5_000));
    tokio::time::sleep(backoff).await;
}

async fn deliver_half(
    pool: &Arc<Pool>,
    m: &StreamMapping,
    shard: &str,
    lane: &mut Lane,
    half: usize,
) {
    Box::pin(deliver(pool, m, shard, lane, half)).await
}

/// Records the failing batch in the destination and moves past it.
async fn give_up(
    pool: &Arc<Pool>,
    m: &StreamMapping,
    shard: &str,
    lane: &mut Lane,
    n: usize,
    result: &Result<Value, Failure>,
) {
    let batch: Vec<Value> = lane.buffer.drain(..n.min(lane.buffer.len())).collect();
    lane.attempts = 0;
    if lane.buffer.is_empty() {
        lane.since = None;
    }
    tracing::warn!(function = %pool.def.id, records = batch.len(), "stream batch given up on");
    let Some(q) = &m.on_failure else { return };
    let record = json!({
        "requestContext": {
            "functionArn": format!("arn:aws:lambda:{}:{}:function:{}", super::template::REGION, super::template::ACCOUNT, pool.def.id),
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": m.retries.unwrap_or(0) + 1
        },
        "responseContext": {
            "functionError": match result { Ok(_) => "PartialBatchFailure", Err(_) => "Unhandled" }
        },
        "version": "1.0",
        "timestamp": shared::time::Ts::now(),
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": batch.first().map(seq_of),
            "endSequenceNumber": batch.last().map(seq_of),
            "batchSize": batch.len(),
            "streamArn": m.stream_arn
        }
    });
    super::resources::send_failure(q, &record).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_partition_keys_records_share_a_lane_and_keys_spread_over_the_lanes() {
        let record = |pk: &str, sk: &str| json!({ "dynamodb": { "Keys": { "pk": { "S": pk }, "sk": { "S": sk } } } });
        let lane = lane_of(&record("task-a", "status"), 10);
        assert_eq!(lane_of(&record("task-a", "def"), 10), lane);
        let lanes: std::collections::BTreeSet<usize> = (0..200)
            .map(|i| lane_of(&record(&format!("task-{i}"), "status"), 10))
            .collect();
        assert_eq!(lanes.len(), 10, "200 tasks use every lane");
        assert_eq!(lane_of(&record("task-a", "status"), 1), 0);
    }

    #[test]
    fn filters_match_as_lambda_matches_them() {
        let resolving = json!({ "eventName": ["MODIFY"], "dynamodb": {
            "OldImage": { "deadline_pk": { "S": [{ "exists": true }] } },
            "NewImage": { "deadline_pk": { "S": [{ "exists": false }] } }
        } });
        let r = json!({ "eventName": "MODIFY", "dynamodb": {
            "OldImage": { "deadline_pk": { "S": "deadline#1" } },
            "NewImage": { "pk": { "S": "t" } }
        } });
        assert!(matches(&resolving, Some(&r)));
        let still = json!({ "eventName": "MODIFY", "dynamodb": {
            "OldImage": { "deadline_pk": { "S": "deadline#1" } },
            "NewImage": { "deadline_pk": { "S": "deadline#1" } }
        } });
        assert!(!matches(&resolving, Some(&still)));
        let insert = json!({ "eventName": "INSERT", "dynamodb": { "NewImage": {} } });
        assert!(!matches(&resolving, Some(&insert)));
        assert!(matches(
            &json!({ "a": [{ "prefix": "x" }] }),
            Some(&json!({ "a": "xy" }))
        ));
        assert!(matches(
            &json!({ "a": [{ "anything-but": ["b"] }] }),
            Some(&json!({ "a": "c" }))
        ));
    }
}
