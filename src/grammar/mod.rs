//! The protocol itself, with no server types: the keyspace grammar (SPEC §1), branded ids
//! (SPEC §2) and cluster slots (SPEC §3). Everything here is pure and unit-tested without a
//! server.

pub mod branded_id;
pub mod keyspace;
pub mod slot;

#[cfg(test)]
mod properties;

pub use branded_id::{BrandedId, Minter, LEN as ID_LEN};
pub use keyspace::{decode, job_key, queue_key, Decoded, KeyBuf, KeyType, Queue, RowPrefix};
pub use slot::{hashtag, slot};
