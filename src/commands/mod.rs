//! One file per command (family): parse -> validate -> act -> reply.

pub mod cancel;
pub mod claim;
pub mod decode;
pub mod enqueue;
pub mod key;
pub mod lease;
pub mod menqueue;
pub mod requeue;
pub mod slot;
pub mod stats;
pub mod version;

use valkey_module::Context;

use crate::cluster;
use crate::error::EmqError;
use crate::grammar::{BrandedId, KeyBuf, Queue};
use crate::lifecycle::{QueueKeys, Sets};
use crate::server::Args;
use crate::store::{self, Holds, Key, OwnedString};

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

/// A decimal integer in `min..=max`, or a syntax error naming `what`.
pub fn parse_int(bytes: &[u8], min: i64, max: i64, what: &str) -> Result<i64, EmqError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| {
            EmqError::Syntax(format!("{what} must be an integer from {min} to {max}").into())
        })
}

/// Whether an option token matches `name`, ignoring ASCII case (as the server's own options).
pub fn is_token(bytes: &[u8], name: &str) -> bool {
    bytes.eq_ignore_ascii_case(name.as_bytes())
}

/// The keys of one job of one queue, named, permission-checked and type-checked; nothing
/// written yet.
pub struct JobTarget {
    pub keys: QueueKeys,
    pub row: OwnedString,
    pub member: OwnedString,
}

impl JobTarget {
    /// Parses `<queue> <id>` at `args[1..=2]` and checks ACL on the queue's sets and the row.
    pub fn parse(ctx: &Context, args: &Args) -> Result<Self, EmqError> {
        let queue = parse_queue(args.bytes(1))?;
        let id = parse_id(args.bytes(2))?;
        cluster::check_stable(queue)?;
        let keys = QueueKeys::new(ctx, queue)?;
        let row = OwnedString::new(ctx, KeyBuf::job(queue, &id).as_bytes())?;
        let member = OwnedString::new(ctx, &id.encode())?;
        let [a, b, c, d] = keys.all();
        store::check_access(ctx, &[a, b, c, d, &row])?;
        Ok(Self { keys, row, member })
    }

    /// Opens the sets and the row, refusing wrong types before any write.
    pub fn open<'k>(&'k self, ctx: &Context) -> Result<(Sets<'k>, Key<'k>), EmqError> {
        let sets = Sets::open(ctx, &self.keys)?;
        let row = Key::open(ctx, &self.row)?;
        if !matches!(row.holds(), Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
        Ok((sets, row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_bounded() {
        assert_eq!(parse_int(b"5", 1, 10, "COUNT"), Ok(5));
        assert!(parse_int(b"0", 1, 10, "COUNT").is_err());
        assert!(parse_int(b"11", 1, 10, "COUNT").is_err());
        assert!(parse_int(b"-1", 0, 10, "BLOCK").is_err());
        assert!(parse_int(b"1.5", 0, 10, "BLOCK").is_err());
        assert!(parse_int(b"", 0, 10, "BLOCK").is_err());
        assert!(parse_int(b"99999999999999999999", 0, i64::MAX, "AT").is_err());
    }

    #[test]
    fn tokens_ignore_case() {
        assert!(is_token(b"count", "COUNT"));
        assert!(is_token(b"Retry-In", "RETRY-IN"));
        assert!(!is_token(b"COUNTS", "COUNT"));
    }
}
