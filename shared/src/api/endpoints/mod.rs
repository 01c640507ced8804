//! The queue service's endpoints, one file per resource. To add an endpoint: declare it in
//! its resource's list (name, route, scopes, schemas, what its function needs, handler) and
//! write its handler next to it; it is then routed, served by a Lambda function of its own,
//! in the SAM template and in the scope tests.

pub mod artifacts;
pub mod claims;
pub mod monitoring;
pub mod resolution;
pub mod task_groups;
pub mod task_queues;
pub mod tasks;
pub mod workers;

use super::declare::{Access, Exchanges, Functions, Need, Service};
use crate::records::artifact::ARTIFACTS;
use crate::records::group::TASK_GROUPS;
use crate::records::task::TASKS;
use crate::routing::{Exchange, DEFAULT_EXCHANGE_PREFIX};

/// Reads tasks.
pub(crate) const READ_TASKS: &[Need] = &[Need::Table(TASKS, Access::Read)];
/// Reads tasks and task groups.
pub(crate) const READ_GROUPS: &[Need] = &[
    Need::Table(TASKS, Access::Read),
    Need::Table(TASK_GROUPS, Access::Read),
];
/// Changes tasks, which may change their groups (membership, the unresolved-task count).
pub(crate) const WRITE_TASKS: &[Need] = &[
    Need::Table(TASKS, Access::Write),
    Need::Table(TASK_GROUPS, Access::Write),
];
/// Reads artifact rows (and the task, for its latest run).
pub(crate) const READ_ARTIFACTS: &[Need] = &[
    Need::Table(ARTIFACTS, Access::Read),
    Need::Table(TASKS, Access::Read),
];
/// Hands out download URLs, which carry the function's own rights on the buckets.
pub(crate) const DOWNLOAD_ARTIFACTS: &[Need] = &[
    Need::Table(ARTIFACTS, Access::Read),
    Need::Table(TASKS, Access::Read),
    Need::Buckets(Access::Read),
];
/// Creates artifacts (with their events in the task's outbox) and upload URLs.
pub(crate) const WRITE_ARTIFACTS: &[Need] = &[
    Need::Table(ARTIFACTS, Access::Write),
    Need::Table(TASKS, Access::Write),
    Need::Buckets(Access::Write),
];

/// Reads worker metadata (task queues and workers, in the task-groups table).
pub(crate) const READ_WORKERS: &[Need] = &[Need::Table(TASK_GROUPS, Access::Read)];
pub(crate) const READ_TASKS_AND_WORKERS: &[Need] = &[
    Need::Table(TASKS, Access::Read),
    Need::Table(TASK_GROUPS, Access::Read),
];
/// Changes worker metadata.
pub(crate) const WRITE_WORKERS: &[Need] = &[Need::Table(TASK_GROUPS, Access::Write)];

/// The queue service: `/api/queue/v1/`, one Lambda function per endpoint.
pub static QUEUE: Service = Service {
    name: "queue",
    title: "Queue",
    prefix: "/api/queue/v1",
    groups: &[
        monitoring::ENDPOINTS,
        tasks::ENDPOINTS,
        resolution::ENDPOINTS,
        claims::ENDPOINTS,
        task_queues::ENDPOINTS,
        workers::TASK_QUEUES,
        workers::ENDPOINTS,
        tasks::DEPENDENTS,
        task_groups::ENDPOINTS,
        artifacts::ENDPOINTS,
    ],
    functions: Functions::PerEndpoint { prefix: "" },
    exchanges: Some(Exchanges {
        prefix: DEFAULT_EXCHANGE_PREFIX,
        list: &Exchange::QUEUE,
    }),
    serves_documents: false,
    authority: false,
};
