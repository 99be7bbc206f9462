//! EchoMQ's Rust client: [`Queue`] to produce and operate, [`Worker`] to consume, on tokio and
//! the `redis` crate's multiplexed or cluster-async connections. A worker reports what it does
//! to an optional hook ([`Worker::on_event`], [`WorkerEvent`]); a handler that panics fails its
//! job; `wait_replicas` follows writes with `WAIT`. Flows ([`Flows`], [`Enqueue::children`] and
//! [`Enqueue::parents`]) make jobs wait for other jobs; a worker delivers its queue's outbox and
//! a handler reads its children ([`Job::children`]). A job cancelled while it runs
//! ([`Queue::cancel`]), or an attempt past its deadline ([`Enqueue::timeout`], a queue's
//! [`Limit::timeout`] set with [`Queue::limit`]), has its handler's future dropped. Groups
//! ([`Enqueue::group`]) share a queue fairly, each with limits ([`Limit::group_concurrency`],
//! [`Queue::group_limit`]), pauses ([`Queue::pause_group`]) and a listing ([`Queue::groups`]).
//! Headers ([`Enqueue::headers`], [`Job::headers`]) go with a job to each attempt; with the
//! `otel` feature they carry its trace (OpenTelemetry), producer to worker. A partitioned
//! queue ([`Queue::span`]) is produced to and worked by its name: the queue learns its width
//! and routes each job to its partition, and the worker claims every partition, blocking once
//! per primary; its schedules ([`Queue::cron`]), listings ([`Queue::jobs`], [`Queue::groups`])
//! and metrics ([`Queue::metrics`]) are read as one queue's. See clients/rust/README.md.

pub mod cancel;
pub mod children;
mod claims;
pub mod clean;
pub mod cron;
mod deliver;
pub mod enqueue;
pub mod error;
pub mod events;
pub mod flow;
pub mod groups;
mod headers;
pub mod ids;
mod job;
pub mod jobs;
pub mod limit;
pub mod metrics;
pub mod partition;
pub mod queue;
mod renewals;
mod settle;
pub mod slot;
mod span;
pub mod stream;
mod task;
mod trace;
mod unwind;
mod walk;
pub mod worker;

pub use children::{ChildOutcome, ChildStatus, Children};
pub use cron::{Schedule, When};
pub use enqueue::BulkJob;
pub use error::{Error, Result};
pub use events::{EventKind, EventOutcome, SettleAction, WorkerEvent};
pub use flow::{FlowJob, Flows, OnFail, Parent};
pub use groups::{Group, GroupLimit, GroupLimits};
pub use jobs::Listed;
pub use limit::{Limit, Limits, Rate, Setting};
pub use metrics::{Histogram, Metrics};
pub use queue::{Enqueue, Queue};
pub use stream::{Events, QueueEvent};
pub use tokio_util::sync::CancellationToken;
pub use worker::{check_version, shutdown_on_signal, Counts, Failure, Job, Outcome, Worker};
