//! The black-box suite: one test binary (so the server is linked once, not once per file),
//! one module per capability. Each test starts its own server (own data directory, own port,
//! on LocalStack its own tables) and talks to it over HTTP with the official clients.

mod common;

mod amqp;
mod amqp_restart;
mod artifacts;
mod auth;
mod auth_python;
mod claim_modes;
mod claims;
mod claimwork;
mod concurrency;
mod conflicts;
mod crash;
mod deadlines;
mod delegation;
mod dependencies;
mod events;
mod expiry;
mod idempotency;
mod infra;
mod lambda_artifacts;
mod lambda_functions;
mod lambda_secrets;
mod legacy;
mod lifecycle;
mod localstack_store;
mod metrics;
mod objects;
mod openapi;
mod priority;
mod publisher_lambda;
mod queues;
mod readme_session;
mod reliability;
mod retries;
mod scheduler;
mod scheduler_lambda;
mod scheduling;
mod shape;
mod smoke;
mod task_groups;
mod ui;
mod validation;
mod workers;
