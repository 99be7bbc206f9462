//! EchoMQ's Rust client: [`Queue`] to produce and operate, [`Worker`] to consume, on tokio and
//! the `redis` crate's multiplexed or cluster-async connections. A worker reports what it does
//! to an optional hook ([`Worker::on_event`], [`WorkerEvent`]); a handler that panics fails its
//! job; `wait_replicas` follows writes with `WAIT`. See clients/rust/README.md.

pub mod error;
pub mod events;
pub mod ids;
pub mod queue;
mod settle;
mod unwind;
pub mod worker;

pub use error::{Error, Result};
pub use events::{EventKind, EventOutcome, SettleAction, WorkerEvent};
pub use queue::{Enqueue, Queue};
pub use tokio_util::sync::CancellationToken;
pub use worker::{check_version, shutdown_on_signal, Counts, Failure, Job, Outcome, Worker};
