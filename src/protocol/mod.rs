//! The protocol itself, with no server types: the keyspace grammar (protocol.md §1), branded ids
//! (protocol.md §2), cluster slots (protocol.md §3), the job row and its states (protocol.md
//! §1.2, §6), the error catalogue (protocol.md §7), the settings, the counters, a partitioned
//! queue's partitions, and the [`store::Store`] trait through which the queue layer reads and
//! writes a queue's keys. Everything here is pure and unit-tested without a server.

#![forbid(unsafe_code)]

pub mod branded_id;
pub mod counters;
pub mod cron;
pub mod error;
pub mod flow;
pub mod headers;
pub mod job;
pub mod keyspace;
pub mod limits;
pub mod metrics;
pub mod partition;
pub mod ranked;
pub mod settings;
pub mod slot;
pub mod store;

#[cfg(test)]
mod properties;

pub use branded_id::{BrandedId, Minter, LEN as ID_LEN};
pub use error::EmqError;
pub use job::{Event, Field, State, PROTOCOL_VERSION};
pub use keyspace::{
    decode, group_key, job_key, queue_key, Decoded, Group, KeyBuf, KeyType, Queue, RowPrefix,
};
pub use ranked::Ranked;
pub use slot::{hashtag, slot};
pub use store::{Holds, KeyRef, Meta, Removed, ScanStep, Set, Store, Table, Value, MORE_FIELDS};
