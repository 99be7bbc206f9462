//! Whether any queue's `meta` hash may exist on this node, so that transitions read `meta` (the
//! paused flag, the event stream's setting) only where one may be (`host::store`).
//!
//! It may not once a scan of every key found none: the scan after the module loads and after
//! the server loads its data. It may again, until the next such scan, after anything that can
//! write one:
//!
//! - EchoMQ itself (`EMQ.PAUSE`, `EMQ.EVENTS`);
//! - a hash command on a `meta` key, seen by the command filter before it runs (queued in a
//!   transaction included), or a script or function that declares a `meta` key;
//! - a keyspace event that brings a `meta` key from elsewhere (`RESTORE`, `RENAME`, `MOVE`,
//!   `COPY`);
//! - a role change (a replica that is promoted may have received one over its link), and an
//!   atomic slot migration that imports keys.
//!
//! A script that writes a `meta` hash without declaring it is not seen: EchoMQ's facts are
//! written by its commands, and a hand-written `meta` takes effect at the next load.
//!
//! The same sightings, and any other event on a `meta` key, `EXEC`, flushes and `SWAPDB`, bump
//! the generation under which the host caches the facts it read (`host::store`), so a
//! transition reads a queue's `meta` hash again only after something may have changed one.

use crate::host::events::FilterArgs;
use crate::host::meta_cache::{meta_changed, meta_may_exist, no_meta_exists};
use crate::protocol::keyspace::PREFIX;
use crate::protocol::KeyType;

/// Whether `key` is a queue's `meta` hash.
pub fn is_meta(key: &[u8]) -> bool {
    key.starts_with(PREFIX) && key.ends_with(KeyType::Meta.key_suffix())
}

/// Most declared keys of a script looked at; a script that declares more counts as writing.
const SCRIPT_KEYS: usize = 64;

/// The command filter's part: a hash command on a `meta` key, or a script declaring one; and
/// `EXEC`, which runs hash writes the filter saw queued.
pub fn observe_command(args: &FilterArgs, first: &[u8]) {
    let Some(&c) = first.first() else {
        return;
    };
    if first.len() == 4 && first.eq_ignore_ascii_case(b"EXEC") {
        meta_changed();
        return;
    }
    if c == b'h' || c == b'H' {
        if args.word(1).is_some_and(is_meta) {
            meta_may_exist();
        }
        return;
    }
    // Most commands are no script call: their length and first letter say so.
    let maybe_script = matches!(
        (first.len(), c.to_ascii_uppercase()),
        (4 | 7 | 10, b'E') | (5 | 8, b'F')
    );
    let script = [
        &b"EVAL"[..],
        b"EVALSHA",
        b"EVAL_RO",
        b"EVALSHA_RO",
        b"FCALL",
        b"FCALL_RO",
    ];
    if !maybe_script || !script.iter().any(|name| first.eq_ignore_ascii_case(name)) {
        return;
    }
    let keys = args
        .word(2)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    if keys > SCRIPT_KEYS || (3..3 + keys).any(|i| args.word(i).is_some_and(is_meta)) {
        meta_may_exist();
    }
}

/// A keyspace event on `key`, a `meta` hash: one that brings it here, or any other that
/// changes it (it went, expired, was evicted or moved away, a field expired).
pub fn observe_key(key: &[u8], event: &[u8]) {
    const ARRIVALS: [&[u8]; 4] = [b"restore", b"rename_to", b"move_to", b"copy_to"];
    if !is_meta(key) {
        return;
    }
    if ARRIVALS.contains(&event) {
        meta_may_exist();
    } else {
        meta_changed();
    }
}

/// A flush or `SWAPDB`: the `meta` hashes of whole databases went or moved.
pub fn databases_changed() {
    meta_changed();
}

/// The server may hold `meta` hashes EchoMQ did not see written.
pub fn unsure() {
    meta_may_exist();
}

/// A scan of every key is done; `found` says whether it met a `meta` hash.
pub fn scanned(found: bool) {
    if found {
        meta_may_exist();
    } else {
        no_meta_exists();
        meta_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::is_meta;

    #[test]
    fn only_a_queues_meta_key_is_one() {
        assert!(is_meta(b"emq:{orders}:meta"));
        assert!(!is_meta(b"emq:{orders}:job:JOB0KHTOWnGLuC"));
        assert!(!is_meta(b"orders:meta"));
        assert!(!is_meta(b"emq:{orders}:metadata"));
    }
}
