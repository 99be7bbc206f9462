//! One file per command: parse -> validate -> act -> reply.

pub mod decode;
pub mod enqueue;
pub mod key;
pub mod slot;
pub mod version;

use crate::error::EmqError;
use crate::grammar::{BrandedId, Queue};

/// The protocol version this module speaks (SPEC §4).
pub const PROTOCOL_VERSION: &str = "echomq:2.0.0";

/// SPEC §1.1: the queue name, or `EMQQUEUE`.
pub fn parse_queue(bytes: &[u8]) -> Result<Queue<'_>, EmqError> {
    Queue::parse(bytes).ok_or(EmqError::Queue)
}

/// SPEC §2: a well-formed branded id of any kind, or `EMQID`.
pub fn parse_id(bytes: &[u8]) -> Result<BrandedId, EmqError> {
    BrandedId::parse(bytes).ok_or(EmqError::Id)
}
