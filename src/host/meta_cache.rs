//! What the store may skip of a queue's `meta` hash: whether any `meta` hash may exist on this
//! node, and the facts of those read lately, good while their generation holds. The state
//! lives here; when it changes is the runtime's policy (`runtime::meta_watch`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::protocol::Meta;

/// Each fact of a `meta` hash ([`Meta::index`]), as it was read.
pub type MetaFacts = [Option<Vec<u8>>; Meta::ALL.len()];

/// A queue's `meta` hash, by database and queue name.
pub type MetaId = (i32, Vec<u8>);

/// Whether a queue's `meta` hash may exist on this node. While it may not, transitions read no
/// `meta` (no queue is paused, no event stream is on): a node that never uses those pays
/// nothing for them. Cleared only by a scan of every key that found no `meta` hash, set by
/// anything that may write one.
static META_MAY_EXIST: AtomicBool = AtomicBool::new(true);

/// Bumped by anything that may change a `meta` hash: every [`meta_may_exist`], a `meta` key
/// that went or moved, `EXEC`, a flush, `SWAPDB`. A `meta` hash read at one generation, with
/// the same number of fields, is the same hash at that generation.
static META_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether the runtime sees hash writes EchoMQ does not make (its command filter), the
/// replication stream's included. Where it does not, a replica's `meta` facts are read afresh
/// every time: the stream writes them unseen.
static HASH_WRITES_SEEN: AtomicBool = AtomicBool::new(true);

/// The facts of the `meta` hashes read lately, each with the generation and the number of
/// fields it was read at: a transition of a queue whose `meta` hash has not changed since reads
/// no field of it (one lookup of the key, for its length). Not used inside `MULTI` or a script,
/// whose queued or scripted hash writes pass the command filter before they run.
static META_CACHE: Mutex<Option<HashMap<MetaId, Kept>>> = Mutex::new(None);

/// The facts of one `meta` hash, with the generation and the number of fields they were read at.
type Kept = (u64, u64, MetaFacts);

/// Most queues' facts kept; the cache starts again empty past it.
const META_CACHE_MAX: usize = 4096;

fn cache<R>(f: impl FnOnce(&mut HashMap<MetaId, Kept>) -> R) -> R {
    let mut guard = META_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// A `meta` hash may exist from now on (and any may have changed).
pub fn meta_may_exist() {
    META_MAY_EXIST.store(true, Ordering::Relaxed);
    meta_changed();
}

/// A scan of every key found no `meta` hash.
pub fn no_meta_exists() {
    META_MAY_EXIST.store(false, Ordering::Relaxed);
}

/// Any `meta` hash may have changed.
pub fn meta_changed() {
    META_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Module load: whether hash writes EchoMQ does not make are seen.
pub fn hash_writes_seen(seen: bool) {
    HASH_WRITES_SEEN.store(seen, Ordering::Relaxed);
}

/// Whether transitions read `meta` hashes (for `INFO emq`).
pub fn meta_read() -> bool {
    may_exist()
}

/// Whether a `meta` hash may exist on this node.
#[inline]
pub fn may_exist() -> bool {
    META_MAY_EXIST.load(Ordering::Relaxed)
}

/// The generation a read is made at.
#[inline]
pub fn generation() -> u64 {
    META_GENERATION.load(Ordering::Relaxed)
}

/// Whether hash writes EchoMQ does not make are seen (see [`hash_writes_seen`]).
#[inline]
pub fn hash_writes_are_seen() -> bool {
    HASH_WRITES_SEEN.load(Ordering::Relaxed)
}

/// The facts of `id` read at `generation` with `len` fields, if kept.
pub fn lookup(id: &MetaId, generation: u64, len: u64) -> Option<MetaFacts> {
    cache(|c| {
        c.get(id)
            .filter(|(g, l, _)| *g == generation && *l == len)
            .map(|(_, _, facts)| facts.clone())
    })
}

/// Keeps the facts of `id`, read at `generation` with `len` fields.
pub fn remember(id: MetaId, generation: u64, len: u64, facts: MetaFacts) {
    cache(|c| {
        if c.len() >= META_CACHE_MAX {
            c.clear();
        }
        c.insert(id, (generation, len, facts));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_facts_hold_only_at_their_generation_and_length() {
        let id = (0, b"q-meta-cache".to_vec());
        let mut facts: MetaFacts = Default::default();
        facts[0] = Some(b"1".to_vec());
        let at = generation();
        remember(id.clone(), at, 2, facts.clone());
        assert_eq!(lookup(&id, at, 2), Some(facts));
        assert_eq!(lookup(&id, at, 3), None, "another length");
        assert_eq!(lookup(&id, at + 1, 2), None, "another generation");
        meta_changed();
        assert!(generation() > at);
    }
}
