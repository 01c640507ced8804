//! The Taskcluster Queue, rebuilt: domain, ports and adapters.
//!
//! - [`model`]: the task state machine (pure, `now` as a parameter).
//! - [`queue`]: operations over the ports; [`deps`] (dependencies) and [`groups`] (task
//!   groups) add to them.
//! - [`store`]: the DynamoDB-shaped storage port and its embedded SQLite adapter.
//! - [`events`], [`signal`]: the event and work-signal ports.
//! - [`artifacts`], [`blobs`]: artifact rows and the blob port that holds their bytes.
//! - [`api`]: the HTTP API (queue and auth services), independent of any server.
//! - [`auth`]: Hawk, temporary credentials, clients and roles.
//! - [`scheduler`]: the task-graph scheduler (seed 001) on top of the queue.
//! - [`keys`], [`routing`]: every storage key and routing key, each built in one place.

#![warn(missing_docs)]

#[cfg(feature = "amqp")]
pub mod amqp;
pub mod api;
pub mod artifacts;
pub mod auth;
pub mod blobs;
pub mod creds;
pub mod deps;
pub mod error;
pub mod events;
pub mod expiry;
pub mod groups;
pub mod ids;
pub mod keys;
mod mac;
pub mod model;
pub mod queue;
pub mod reaper;
pub mod routes_scopes;
pub mod routing;
pub mod scheduler;
pub mod schema;
pub mod scopes;
#[cfg(feature = "aws")]
pub mod secrets;
pub mod signal;
#[cfg(test)]
mod stale_reads;
pub mod store;
pub mod time;
