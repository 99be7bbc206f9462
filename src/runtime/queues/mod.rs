//! The queues this node holds, per database: what `EMQ.QUEUES` lists and `INFO emq` counts
//! (`emq_known_queues`), kept from what the module sees anyway, never by a scan per write. This
//! file is the glue to the server's events; `registry` (pure), `noted` (the command filter's
//! keys) and `cursor` (`EMQ.QUEUES`'s cursors) hold the rest. The rules: docs/architecture.md,
//! "The queues a node holds".

pub mod cursor;
pub mod discover;
pub mod noted;
pub mod registry;

pub use cursor::Cursor;
use cursor::{render, Kept};
use noted::Noted;
pub use noted::NOTED_FOR_MS;
use registry::{Registry, Resume};

use std::sync::{Mutex, MutexGuard};

use valkey_module::Context;

use crate::host::client::{select_db, selected_db};
use crate::host::events::FilterArgs;
use crate::host::key::{announced_expiry, expires_at, Key};
use crate::host::server::now_ms;
use crate::host::string::{OwnedString, Str};
use crate::host::words::words;
use crate::protocol::keyspace::{RowPrefix, PREFIX};
use crate::protocol::settings::learn_foreign_writes;
use crate::protocol::{decode, Decoded, EmqError, Holds, KeyBuf, KeyType, Meta, Queue};

// ---- the node's registry, kept from events ------------------------------------------------

static REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());
static NOTED: Mutex<Noted> = Mutex::new(Noted::new());
static KEPT: Mutex<Kept> = Mutex::new(Kept::new());

/// Most names one `EMQ.QUEUES` call reads, shown or not (a user who may read few queues among
/// many gets short pages rather than a long call).
pub const MAX_READ: usize = 10_000;
/// Most lingering queues the cron looks at again at once.
const RUN_OUT_PER_CRON: usize = 1000;

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

fn noted() -> MutexGuard<'static, Noted> {
    NOTED.lock().unwrap_or_else(|p| p.into_inner())
}

fn kept() -> MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the kept cursors' numbers from the load time (module load).
pub fn start() {
    kept().start_at(now_ms().saturating_mul(1_000_000));
}

/// Forgets everything (module unload): the module's memory must be gone.
pub fn stop() {
    discover::forget();
    registry().clear();
    noted().clear();
    kept().clear();
}

/// Number of queues this node holds, in every database (for `INFO emq`).
pub fn known_queues() -> usize {
    registry().len(now_ms() as i64)
}

/// A command of EchoMQ wrote a key of `queue` that no subscribed event reports (its meta hash,
/// its events stream), in the context's database.
pub fn learn(ctx: &Context, queue: Queue<'_>) {
    registry().present(selected_db(ctx), queue.as_bytes());
}

/// What a `pending` set's name holds between the grammar's prefix and its suffix (a queue
/// name if it is one).
fn pending_inner(name: &[u8]) -> Option<&[u8]> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(KeyType::Pending.key_suffix())
}

/// The queue of a `pending` set's name, read without the rest of the grammar.
fn pending_queue(name: &[u8]) -> Option<Queue<'_>> {
    Queue::parse(pending_inner(name)?)
}

/// A keyspace event on a `pending` set (the hot case, every enqueue and claim); `gone` when
/// the event took the key away.
pub fn on_pending_event(ctx: &Context, name: &[u8], gone: bool) {
    let db = selected_db(ctx);
    if gone {
        if let Some(queue) = pending_queue(name) {
            check_left(ctx, db, queue);
        }
        return;
    }
    let Some(inner) = pending_inner(name) else {
        return;
    };
    let mut registry = registry();
    // The same queue as the last enqueue's: known, and its name already checked.
    if !registry.last_present(db, inner) && Queue::parse(inner).is_some() {
        registry.present(db, inner);
    }
}

/// A keyspace event on another key of `queue` (of type `ty`, named `key`); `gone` when the
/// event took the key away.
pub fn on_key_event(ctx: &Context, queue: Queue<'_>, ty: KeyType, key: Str<'_>, gone: bool) {
    let db = selected_db(ctx);
    if gone {
        check_left(ctx, db, queue);
    } else if ty == KeyType::Job {
        learn_row(ctx, db, queue, key);
    } else {
        registry().present(db, queue.as_bytes());
    }
}

/// A key of a known queue went: what is left of it decides whether it stays.
fn check_left(ctx: &Context, db: i32, queue: Queue<'_>) {
    let known = registry().contains(db, queue.as_bytes());
    if !known {
        return;
    }
    if has_own_keys(ctx, queue) {
        registry().present(db, queue.as_bytes());
    } else {
        registry().gone(db, queue.as_bytes(), now_ms() as i64);
    }
}

/// A job row of `queue` exists: its expiry, if it has one, holds the queue until then.
fn learn_row(ctx: &Context, db: i32, queue: Queue<'_>, row: Str<'_>) {
    rows_until(ctx, db, queue, expires_at(ctx, row));
}

/// Rows of `queue` exist, the latest of them expiring at `until` (`None`: one never does).
fn rows_until(ctx: &Context, db: i32, queue: Queue<'_>, until: Option<i64>) {
    // No lock is held while keys are probed: a probe may delete an expired key, whose event
    // comes back here.
    let settled = registry().settled(db, queue.as_bytes());
    if !settled && has_own_keys(ctx, queue) {
        registry().present(db, queue.as_bytes());
    }
    if let Some(at) = until {
        registry().row_until(db, queue.as_bytes(), at);
    }
}

/// The rows an EchoMQ command is acknowledging (one queue's, in one database), and the latest
/// expiry it gave them so far.
struct Acking {
    db: i32,
    rows: RowPrefix,
    until: Option<i64>,
}

static ACKING: Mutex<Option<Acking>> = Mutex::new(None);

/// While alive, the `expire` events EchoMQ announces for the rows of one queue it acknowledges
/// are noted, not learned one by one (each would decode its key and look the queue up); the
/// registry learns the latest of them once, when this is dropped at the command's end.
pub struct Acknowledging<'c, 'q> {
    ctx: &'c Context,
    queue: Queue<'q>,
}

/// Starts noting the done rows of `queue` (in the context's database) for the registry.
pub fn acknowledging<'c, 'q>(ctx: &'c Context, queue: Queue<'q>) -> Acknowledging<'c, 'q> {
    *ACKING.lock().unwrap_or_else(|p| p.into_inner()) = Some(Acking {
        db: selected_db(ctx),
        rows: RowPrefix::new(queue),
        until: None,
    });
    Acknowledging { ctx, queue }
}

impl Drop for Acknowledging<'_, '_> {
    fn drop(&mut self) {
        let Some(acking) = ACKING.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        if let Some(until) = acking.until {
            rows_until(self.ctx, acking.db, self.queue, Some(until));
        }
    }
}

/// Whether `key`, whose `expire` event runs, is a row of the queue being acknowledged whose
/// expiry EchoMQ is announcing: then its expiry is noted for [`Acknowledging`] and the event
/// needs nothing more.
pub fn acked_row_expiry(ctx: &Context, key: Str<'_>) -> bool {
    let mut acking = ACKING.lock().unwrap_or_else(|p| p.into_inner());
    let Some(acking) = acking.as_mut() else {
        return false;
    };
    if !key.bytes().starts_with(acking.rows.as_bytes()) || selected_db(ctx) != acking.db {
        return false;
    }
    let Some(at) = announced_expiry(key) else {
        return false;
    };
    acking.until = Some(acking.until.map_or(at, |until| until.max(at)));
    true
}

/// Whether the queue has a set, its meta hash or its events stream, of any type, in the
/// context's database (when unsure, that it has).
fn has_own_keys(ctx: &Context, queue: Queue<'_>) -> bool {
    KeyType::ALL
        .iter()
        .filter(|&&ty| !ty.is_named())
        .any(|&ty| exists(ctx, KeyBuf::queue(queue, ty).as_bytes()))
}

/// Whether `name` exists in the context's database (when unsure, that it does).
fn exists(ctx: &Context, name: &[u8]) -> bool {
    let Ok(name) = OwnedString::new(ctx, name) else {
        return true;
    };
    Key::probe(ctx, &name).map_or(true, |k| k.holds() != Holds::Nothing)
}

/// The command filter's part: notes the key of a hash or stream write to a queue not known in
/// the client's database, to look for once the command ran.
pub fn observe_command(args: &FilterArgs, first: &[u8]) {
    // Most commands are none of these: their length and first letter say so.
    let candidate = first.first().is_some_and(|c| {
        matches!(
            (first.len(), c.to_ascii_uppercase()),
            (4 | 5 | 6 | 7 | 12, b'H') | (4 | 6, b'X')
        )
    });
    if !candidate {
        return;
    }
    let is = |name: &[u8]| first.eq_ignore_ascii_case(name);
    let key_at = if is(b"HSET")
        || is(b"HSETNX")
        || is(b"HMSET")
        || is(b"HINCRBY")
        || is(b"HINCRBYFLOAT")
        || is(b"HSETEX")
        || is(b"XADD")
    {
        1
    } else if is(b"XGROUP")
        && args
            .arg(1)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"CREATE"))
    {
        2
    } else {
        return;
    };
    if let Some(key) = args.arg(key_at) {
        note_written(args, key);
    }
}

/// Notes `key`, which the filtered command is about to write, if it is a key of a queue not
/// known in the client's database: to look for once the command ran.
pub fn note_written(args: &FilterArgs, key: &[u8]) {
    if !key.starts_with(PREFIX) {
        return;
    }
    let Some(Decoded::Queue { queue, .. }) = decode(key) else {
        return;
    };
    let db = args.client().map(|c| c.db);
    let settled = {
        let registry = registry();
        match db {
            Some(db) => registry.settled(db, queue.as_bytes()),
            None => registry.settled_anywhere(queue.as_bytes()),
        }
    };
    if !settled {
        noted().note(db, key, now_ms() as i64);
    }
}

/// Looks for the keys the filter noted, in the context's database only (`EMQ.QUEUES`, which
/// must not select another): a key of unknown database found here is looked for elsewhere too
/// by the cron.
fn look_for_noted_here(ctx: &Context, db: i32) {
    let keys = noted().keys();
    for (noted_db, key) in keys {
        if noted_db.is_some_and(|d| d != db) {
            continue;
        }
        if look_for(ctx, &key) && noted_db.is_some() {
            noted().settle(noted_db, &key);
        }
    }
}

/// Looks for `key` in the context's database; whether it is there (and so learned).
fn look_for(ctx: &Context, key: &[u8]) -> bool {
    let Some(Decoded::Queue { queue, ty, .. }) = decode(key) else {
        return false;
    };
    let Ok(name) = OwnedString::new(ctx, key) else {
        return false;
    };
    let there = Key::probe(ctx, &name).is_ok_and(|k| k.holds() != Holds::Nothing);
    if there {
        on_key_event(ctx, queue, ty, name.as_str(), false);
    }
    there
}

/// The server's cron: looks for the noted keys, in every database for those of unknown
/// database, and looks again at the lingering queues whose last known row ran out; whether
/// more of those remain for the next call.
pub fn on_cron(ctx: &Context, now: i64) -> bool {
    let has_noted = !noted().is_empty();
    let run_out = registry().run_out(now, RUN_OUT_PER_CRON);
    let more = run_out.len() == RUN_OUT_PER_CRON;
    if !has_noted && run_out.is_empty() {
        return false;
    }
    let original = selected_db(ctx);
    if has_noted {
        let keys = noted().keys();
        for (noted_db, key) in keys {
            let found = match noted_db {
                Some(db) => select_db(ctx, db) && look_for(ctx, &key),
                None => {
                    let mut found = false;
                    let mut db = 0;
                    while select_db(ctx, db) {
                        found |= look_for(ctx, &key);
                        db += 1;
                    }
                    found
                }
            };
            if found {
                noted().settle(noted_db, &key);
            }
        }
        noted().expire(now);
    }
    for (db, name) in run_out {
        let Some(queue) = Queue::parse(&name) else {
            registry().forget(db, &name);
            continue;
        };
        if !select_db(ctx, db) {
            registry().forget(db, &name);
        } else if has_own_keys(ctx, queue) {
            registry().present(db, &name);
        } else {
            registry().gone(db, &name, now);
        }
    }
    select_db(ctx, original);
    more
}

/// `SWAPDB a b`.
pub fn swap_dbs(a: i32, b: i32) {
    discover::forget();
    registry().swap_dbs(a, b);
}

/// A database was emptied (-1: all of them).
pub fn forget_db(db: i32) {
    discover::forget();
    registry().forget_db(db);
}

/// The registry a scan of the keyspace builds, to replace the node's (`events::rebuild`).
pub struct Rebuild {
    registry: Registry,
    now: i64,
}

impl Rebuild {
    pub fn new() -> Rebuild {
        Rebuild {
            registry: Registry::new(),
            now: now_ms() as i64,
        }
    }

    /// A key of `queue`, of type `ty`, in `db`, expiring at `expires` (a key whose time ran
    /// out but that the server has not deleted yet counts for nothing).
    pub fn key(&mut self, db: i32, queue: Queue<'_>, ty: KeyType, expires: Option<i64>) {
        self.registry
            .learn_key(db, queue.as_bytes(), ty, expires, self.now);
    }

    /// The scan is over: its registry is the node's.
    pub fn finish(self) {
        *registry() = self.registry;
    }
}

impl Default for Rebuild {
    fn default() -> Self {
        Rebuild::new()
    }
}

/// One page of `EMQ.QUEUES` in the context's database: the reply's cursor and the names.
/// `may_read` tells whether the caller may read a key, by name: a queue is shown only if the
/// caller may read its `pending` set.
pub fn list(
    ctx: &Context,
    cursor: Cursor<'_>,
    count: usize,
    may_read: &dyn Fn(&[u8]) -> bool,
) -> Result<(Vec<u8>, Vec<Vec<u8>>), EmqError> {
    let db = selected_db(ctx);
    let after = match cursor {
        Cursor::Start => None,
        Cursor::After(name) => Some(name.to_vec()),
        Cursor::Kept(n) => Some(kept().get(n).ok_or(EmqError::Cursor)?.to_vec()),
    };
    if !noted().is_empty() {
        look_for_noted_here(ctx, db);
    }
    let lazy = !learn_foreign_writes();
    if lazy {
        let now = now_ms() as i64;
        for (queue, ty, expires) in discover::walk_on(ctx, db) {
            registry().learn_key(db, &queue, ty, expires, now);
        }
    }
    let page = registry().page(
        db,
        after.as_deref(),
        now_ms() as i64,
        count,
        MAX_READ,
        |name| {
            Queue::parse(name)
                .is_some_and(|q| may_read(KeyBuf::queue(q, KeyType::Pending).as_bytes()))
        },
    );
    // Looked at once the registry is let go: opening a key may expire it, and its event
    // comes back here.
    let mut names = page.names;
    names.retain(|name| !Queue::parse(name).is_some_and(|q| is_partition(ctx, q)));
    if lazy {
        names.retain(|name| still_there(ctx, db, name));
    }
    // A page whose last name was left out ends at a kept place, which names nothing.
    let resume = match page.resume {
        Resume::After(last) if names.last() != Some(&last) => Resume::Past(last),
        resume => resume,
    };
    let cursor = render(resume, &mut kept());
    Ok((cursor, names))
}

/// Whether a queue the registry lists is still there, where no event says when its keys go
/// (`emq.learn-foreign-writes no`): it has a key of its own, or rows not run out yet; if not,
/// the registry drops it.
fn still_there(ctx: &Context, db: i32, name: &[u8]) -> bool {
    let Some(queue) = Queue::parse(name) else {
        return false;
    };
    has_own_keys(ctx, queue) || !registry().gone(db, name, now_ms() as i64)
}

/// Whether `queue` is a partition of a partitioned queue (its `meta` says so), which the list
/// leaves out: the partitioned queue stands for it (docs/cluster.md).
fn is_partition(ctx: &Context, queue: Queue<'_>) -> bool {
    let Ok(words) = words() else {
        return false;
    };
    OwnedString::new(ctx, KeyBuf::queue(queue, KeyType::Meta).as_bytes())
        .and_then(|name| Key::probe(ctx, &name).map(|k| k.hash_get(words.meta(Meta::PartitionOf))))
        .is_ok_and(|of| of.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pending_fast_path_reads_only_grammar_names() {
        assert_eq!(
            pending_queue(b"emq:{orders}:pending").map(|q| q.as_bytes()),
            Some(&b"orders"[..])
        );
        assert_eq!(pending_queue(b"emq:{a}b}:pending"), None);
        assert_eq!(pending_queue(b"emq:{}:pending"), None);
        assert_eq!(pending_queue(b"emq:{orders}:active"), None);
    }
}
