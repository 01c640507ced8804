//! Typed records: what the queue stores, each entity with the keys of its items and index
//! entries, built in its own module (as modyne's entities do), and the task state machine.
//! Nothing here does I/O.
//!
//! | table         | entities                                                        |
//! |---------------|-----------------------------------------------------------------|
//! | `tasks`       | [`task`] definitions and statuses, [`edge`] dependency edges     |
//! | `task-groups` | [`group`] groups, members, unresolved-task counter shares; [`wait_slot`] claimWork's wait slots; [`worker`] task queues and workers |
//! | `task-graphs` | [`graph`] the scheduler's graphs and their task nodes            |
//! | `artifacts`   | [`artifact`] artifacts; [`object`] the object service's objects   |
//! | `auth`        | [`auth`] clients and roles                                       |
//!
//! On DynamoDB only `pending` projects whole items; every other index is KEYS_ONLY (see
//! `infra/resources.json`), so writes that leave an item's entry alone cost that index
//! nothing. Item data is stored deflated there: a status item with its events is about
//! 0.5 KB, a definition 0.3–0.4 KB (typical tests' tasks), far from the 400 KB limit, which
//! the port checks on the uncompressed JSON.
//!
//! Time-ordered index partitions are sharded ([`crate::store::shard`]) so that no single
//! partition key is hot on DynamoDB; the background passes walk every shard with
//! `sk <= now`.

pub mod artifact;
pub mod auth;
pub mod edge;
pub mod graph;
pub mod group;
pub mod object;
pub mod outbox;
pub mod task;
pub mod transitions;
pub mod wait_slot;
pub mod worker;

/// The attributes of a stored item that this build does not know. During a deploy, items
/// written by the new build are read and rewritten by the old one (a function instance not
/// yet replaced, the claim service) and the other way round. Every typed record keeps what it
/// does not know here and writes it back, so an older writer never drops a newer build's
/// attribute (docs/deploying.md, "Stored formats across a deploy").
pub type Unknown = serde_json::Map<String, serde_json::Value>;

#[cfg(test)]
mod tests {
    use serde::{de::DeserializeOwned, Serialize};
    use serde_json::{json, Value};

    const T: &str = "2026-01-02T03:04:05.000Z";

    /// Decodes `stored` with a newer build's attributes added (at the top and at `nested`),
    /// re-encodes it, and checks they came back unchanged and the known ones too.
    fn keeps<R: Serialize + DeserializeOwned>(mut stored: Value, nested: &[&str]) {
        let known = stored.clone();
        stored["newerAttribute"] = json!({"a": [1, "b"]});
        for path in nested {
            stored.pointer_mut(path).expect(path)["newerNested"] = json!(7);
        }
        let rec: R = serde_json::from_value(stored.clone()).expect("decodes");
        let written = serde_json::to_value(&rec).expect("encodes");
        assert_eq!(written, stored, "written back as read");
        let rec: R = serde_json::from_value(known.clone()).expect("decodes");
        assert_eq!(serde_json::to_value(&rec).expect("encodes"), known);
    }

    #[test]
    fn every_record_writes_back_the_attributes_it_does_not_know() {
        let event = json!({"id": "e", "exchange": "task-pending", "routingKey": "k", "cc": [],
            "payload": {"status": {}}});
        let run = json!({"runId": 0, "state": "pending", "reasonCreated": "scheduled",
            "scheduled": T});
        keeps::<super::task::TaskRecord>(
            json!({"taskId": "t", "taskQueueId": "p/w", "schedulerId": "s", "projectId": "none",
                "taskGroupId": "g", "priority": "lowest", "deadline": T, "expires": T,
                "retries": 5, "retriesLeft": 5, "runs": [run], "routes": [], "tags": {},
                "outbox": [event], "unsatisfied": 0, "groupCounted": true, "sweep": true}),
            &["/runs/0", "/outbox/0"],
        );
        keeps::<super::artifact::Artifact>(
            json!({"taskId": "t", "runId": 0, "name": "public/a", "storageType": "s3",
                "contentType": "text/plain", "expires": T, "details": {}, "present": true}),
            &[],
        );
        keeps::<super::group::GroupRecord>(
            json!({"taskGroupId": "g", "schedulerId": "s", "expires": T}),
            &[],
        );
        keeps::<super::object::ObjectRecord>(
            json!({"name": "o", "projectId": "p", "uploadId": "u", "expires": T,
                "uploadExpires": T, "finished": false, "hashes": {}}),
            &[],
        );
        keeps::<super::worker::TaskQueueRecord>(
            json!({"taskQueueId": "p/w", "expires": T, "lastDateActive": T}),
            &[],
        );
        keeps::<super::worker::WorkerRecord>(
            json!({"taskQueueId": "p/w", "workerGroup": "g", "workerId": "w", "firstClaim": T,
                "lastDateActive": T, "expires": T, "recentTasks": []}),
            &[],
        );
        keeps::<super::graph::GraphRecord>(
            json!({"taskGraphId": "g", "schedulerId": "s", "state": "running", "routing": "r",
                "requires": [], "requiresLeft": [], "metadata": {}, "tags": {}, "salt": "x",
                "digest": "d", "created": T, "outbox": [], "sweep": true}),
            &[],
        );
        keeps::<super::graph::TaskNode>(
            json!({"taskId": "t", "label": "l", "requires": [], "requiresLeft": [],
                "dependents": [], "reruns": 0, "rerunsLeft": 0, "state": "scheduled",
                "handledRun": null, "digest": "d"}),
            &[],
        );
    }

    #[test]
    fn a_status_shows_no_attribute_this_build_does_not_know() {
        let run = json!({"runId": 0, "state": "pending", "reasonCreated": "scheduled",
            "scheduled": T, "newerNested": 1});
        let rec: super::task::TaskRecord = serde_json::from_value(json!({"taskId": "t",
            "taskQueueId": "p/w", "schedulerId": "s", "projectId": "none", "taskGroupId": "g",
            "priority": "lowest", "deadline": T, "expires": T, "retries": 5, "retriesLeft": 5,
            "runs": [run], "routes": [], "tags": {}, "newerAttribute": 1}))
        .expect("decodes");
        let shown = rec.status_json().to_string();
        assert!(!shown.contains("newer"), "{shown}");
        assert!(shown.contains("\"reasonCreated\":\"scheduled\""), "{shown}");
    }
}
