//! The `emq.*` settings, settable in `module.conf` (after `loadmodule`), with
//! `MODULE LOADEX ... CONFIG` and with `CONFIG SET`. The server enforces the bounds.

use std::sync::atomic::{AtomicI64, Ordering};

/// Largest payload `EMQ.ENQUEUE` accepts, in bytes.
pub static MAX_PAYLOAD_BYTES: AtomicI64 = AtomicI64::new(MAX_PAYLOAD_DEFAULT);
pub const MAX_PAYLOAD_DEFAULT: i64 = 1 << 20;
pub const MAX_PAYLOAD_MIN: i64 = 1;
/// The server's own `proto-max-bulk-len` default.
pub const MAX_PAYLOAD_MAX: i64 = 512 << 20;

/// The node id carried by minted snowflakes (SPEC §2), 0..=1023.
pub static NODE_ID: AtomicI64 = AtomicI64::new(0);
pub const NODE_ID_MAX: i64 = crate::grammar::branded_id::MAX_NODE as i64;

pub fn max_payload_bytes() -> i64 {
    MAX_PAYLOAD_BYTES.load(Ordering::Relaxed)
}

pub fn node_id() -> u16 {
    // Bounded by the server to 0..=1023, so the conversion cannot fail; clamp anyway.
    u16::try_from(NODE_ID.load(Ordering::Relaxed).clamp(0, NODE_ID_MAX)).unwrap_or(0)
}
