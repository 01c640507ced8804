//! The Taskcluster Queue, rebuilt: domain, ports and adapters.
//!
//! Layers, each importing only those below it:
//! - [`api`]: the HTTP API of the three services, one declaration per endpoint, independent
//!   of any server. The only layer that knows of callers and scopes.
//! - [`scheduler`]: the task-graph scheduler (seed 001), on top of the queue.
//! - [`jobs`]: the background passes (reapers, expiry, dependencies, the publisher).
//! - [`queue`]: the queue's operations, one module per capability, over the ports.
//! - [`auth`]: Hawk, temporary credentials, clients and roles.
//! - [`records`]: typed records, each entity with its keys, and the task state machine.
//! - Ports and their adapters: [`store`] (DynamoDB-shaped; SQLite and DynamoDB), [`events`]
//!   (the log, RabbitMQ), [`blobs`] (local files, S3), [`signal`], [`hints`].
//! - Small pieces everything uses: [`error`], [`ids`], [`time`], [`scopes`], [`routing`],
//!   [`schema`], [`page`], [`json`], [`creds`], [`tokens`], [`metrics`].

#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod blobs;
pub mod creds;
pub mod error;
pub mod events;
pub mod hints;
pub mod ids;
pub mod jobs;
pub mod json;
mod mac;
pub mod metrics;
pub mod page;
pub mod queue;
pub mod records;
pub mod routing;
pub mod scheduler;
pub mod schema;
pub mod scopes;
#[cfg(feature = "aws")]
pub mod secrets;
pub mod signal;
pub mod store;
pub mod time;
pub mod tokens;
