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
