//! The queue's operations over the ports, one module per capability. Each takes `now` from
//! its caller and none checks scopes: the API edge authorises before it calls (where a check
//! needs the task or group, the edge reads it through an operation here first).
//!
//! - [`core`]: the [`Queue`] itself, its configuration, and the read-modify-write every
//!   change of a task goes through.
//! - [`tasks`], [`resolution`], [`claims`], [`task_queues`]: a task's life cycle.
//! - [`groups`] (with its unresolved-task [`counter`]), [`deps`]: task groups and
//!   dependencies.
//! - [`artifacts`]: artifact rows and where their bytes are; [`objects`]: the object service.
//! - [`workers`]: the task queues and workers claims show, and quarantine.
//! - [`reapers`], [`expiry`]: what the background passes do per item; [`aging`]: the
//!   priority ager's pass.

pub mod aging;
pub mod artifacts;
pub mod claims;
pub mod core;
mod counter;
pub mod deps;
pub mod expiry;
pub mod figures;
pub mod groups;
pub mod objects;
pub mod reapers;
pub mod resolution;
#[cfg(test)]
mod stale_reads;
pub mod task_queues;
pub mod tasks;
pub mod workers;

pub use self::core::{
    PollSchedule, Queue, QueueConfig, DEPENDENTS_PER_SEC, GROUP_EXPIRY_EXTENSION_MS,
    PRIORITY_AGING_MS,
};
pub use claims::{Claim, ClaimPass};
