//! What EchoMQ learns beside its own commands, and where each event goes.
//!
//! - **Keyspace events** (zset, generic, expired and evicted, on every key): a write to a
//!   queue's `schedule`, `active`, `dead` or `rate` set makes the queue watched by the timer
//!   (due jobs, expired leases, the dead set's retention, the rate window; `KeyType::is_timed`
//!   has the rest), and the removal of the last of them
//!   unwatches it (a replica, which never visits its queues, would
//!   otherwise keep every queue it ever saw) — whoever wrote them: this module, a Lua speaker,
//!   the replication stream or a slot import (`RESTORE`). Any write to a `pending` set signals
//!   the key ready, which wakes blocked `EMQ.CLAIM` callers (a `ZADD` to an existing zset does
//!   not do that by itself). Every event on a key of a queue also keeps the registry of the
//!   node's queues (`queues`). Then the Valkey 8.1 database correction (`client_db`).
//! - **Server events**: loading ended (rebuild the watched queues and the registry), a config
//!   change (the eviction warning, the dead sets' retention), the cron, once a second (re-arm
//!   the timer, slot migrations, the effects gate, the registry's noted keys and lingering
//!   queues), a role change (the gate),
//!   `SWAPDB` and flushes (the watched queues, the registry), atomic slot migrations, and,
//!   where no command filter is registered, forks (the gate).
//! - **The command filter**: `MODULE UNLOAD emq`, `CLUSTER ...`, the commands that open the
//!   effects gate, the database correction's `COPY`/`EXEC`, and the hash and stream writes
//!   the registry notes. Every command pays for the server's call of a filter, so with
//!   `emq.learn-foreign-writes no` it is registered on a cluster node only (`runtime::start`):
//!   elsewhere, hash writes EchoMQ did not make and `RESTORE` are learned as other foreign
//!   writes are, and `MODULE UNLOAD emq` is refused by the server while the timer waits.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use valkey_module::Context;

use crate::host::client::{selected_db, Flags};
use crate::host::events::{
    scan_all_dbs_keys, CommandFilter, EventName, FilterArgs, KeyspaceEvents, MigrationEvent,
    ServerEvent, ServerEvents,
};
use crate::host::key::Key;
use crate::host::propagate::signal_ready;
use crate::host::server::{now_ms, MODULE_NAME};
use crate::host::string::{OwnedString, Str};
use crate::protocol::settings::learn_foreign_writes;
use crate::protocol::{decode, Decoded, Holds, KeyBuf, KeyType, Queue};

use super::{client_db, cluster, effects, eviction, listeners, meta_watch, queues, timer};

/// The handler of every event EchoMQ subscribes to.
pub struct Events;

/// The cron's work (the timer's missed wake-ups, slot migrations, the effects gate, the
/// registry's noted keys and lingering queues) runs at most once in this many ms, and at every
/// call while a slot settles. The server calls the cron `hz` times a second (10 by default),
/// and on an idle server each call found the module's state cold: about a tenth of the main
/// thread's idle time with 100,000 queues watched.
const CRON_WORK_EVERY_MS: u64 = 1000;
static LAST_CRON_WORK_MS: AtomicU64 = AtomicU64::new(0);

/// Events that take a key away from where it was: the queue may have nothing left to watch.
const GONE: [&[u8]; 5] = [b"del", b"expired", b"evicted", b"rename_from", b"move_from"];

impl KeyspaceEvents for Events {
    fn on_event(ctx: &Context, class: c_int, event: EventName, key: Str<'_>) {
        observe(ctx, event, key);
        client_db::after_event(ctx, class, event);
    }
}

fn observe(ctx: &Context, event: EventName, key: Str<'_>) {
    let name = key.bytes();
    if !name.starts_with(crate::protocol::keyspace::PREFIX) {
        return;
    }
    // The hot case, every enqueue: no need to decode the whole name to wake claimers (a name
    // outside the grammar has none blocked on it), and the event's name is read only when
    // its first letter may make it one that takes the key away.
    if name.ends_with(KeyType::Pending.key_suffix()) {
        signal_ready(ctx, key);
        let gone = matches!(event.first_byte(), Some(b'd' | b'e' | b'r' | b'm'))
            && GONE.contains(&event.bytes());
        queues::on_pending_event(ctx, name, gone);
        return;
    }
    if meta_watch::is_meta(name) {
        meta_watch::observe_key(name, event.bytes());
    }
    // A done row's expiry, announced by the batched ack that gave it: the ack's end learns it.
    if event.bytes() == b"expire" && queues::acked_row_expiry(ctx, key) {
        return;
    }
    let Some(Decoded::Queue { queue, ty, .. }) = decode(name) else {
        return;
    };
    // A grouped queue's bookkeeping comes and goes with its groups (a claim may empty a hundred
    // of them), while its `meta` hash, marked `groups`, keeps the queue known: nothing to do.
    if matches!(
        ty,
        KeyType::Group | KeyType::Turns | KeyType::Held | KeyType::Groups | KeyType::Tally
    ) {
        return;
    }
    // The event's name is read only here, for a key of a queue: every other key the server
    // reports (any zset or generic write on the server) costs no more than above.
    let gone = GONE.contains(&event.bytes());
    if ty.is_timed() {
        let db = selected_db(ctx);
        if gone && !has_timed_sets(ctx, queue) {
            timer::watched().forget(db, queue.as_bytes());
        } else if matches!(ty, KeyType::Unique | KeyType::Cron) {
            timer::table_changed(db, queue.as_bytes());
        } else {
            timer::visit_at(db, queue.as_bytes(), 0);
        }
    }
    queues::on_key_event(ctx, queue, ty, key, gone);
}

/// Whether the queue has a key the timer visits (`KeyType::is_timed`) in the context's
/// database (when unsure, that it has).
fn has_timed_sets(ctx: &Context, queue: Queue<'_>) -> bool {
    KeyType::ALL
        .into_iter()
        .filter(|ty| ty.is_timed())
        .any(|ty| {
            OwnedString::new(ctx, KeyBuf::queue(queue, ty).as_bytes()).map_or(true, |name| {
                Key::probe(ctx, &name).map_or(true, |k| k.holds() != Holds::Nothing)
            })
        })
}

/// Rebuilds the watched queues and the registry of the node's queues from the keyspace, in one
/// scan: once at load and after the server loads data.
pub fn rebuild(ctx: &Context) {
    let mut known = queues::Rebuild::new();
    let mut meta = false;
    scan_all_dbs_keys(ctx, |db, key| {
        meta |= meta_watch::is_meta(key.name());
        let Some(Decoded::Queue { queue, ty, .. }) = decode(key.name()) else {
            return;
        };
        if ty.is_timed() {
            timer::visit_at(db, queue.as_bytes(), 0);
        }
        known.key(db, queue, ty, key.expires_at());
    });
    known.finish();
    meta_watch::scanned(meta);
}

impl ServerEvents for Events {
    fn on_event(ctx: &Context, event: ServerEvent<'_>) {
        match event {
            ServerEvent::LoadingEnded => {
                timer::forget_cron_due();
                rebuild(ctx);
                timer::rearm(ctx);
            }
            ServerEvent::ConfigChanged(names) => {
                eviction::on_config_change(ctx, names);
                listeners::on_config_change(ctx, names);
                // A new retention of dead jobs has the watched queues visited at once.
                timer::rearm(ctx);
            }
            ServerEvent::Cron => {
                let now = now_ms();
                if !cluster::settling(now)
                    && !super::once_every(&LAST_CRON_WORK_MS, now, CRON_WORK_EVERY_MS)
                {
                    return;
                }
                timer::rearm(ctx);
                // The migrations first: the probe reads whether one exports from here.
                cluster::reconcile(ctx, now);
                effects::probe(ctx, now);
                if queues::on_cron(ctx, now as i64) {
                    // More lingering queues to look at: the next call works too.
                    LAST_CRON_WORK_MS.store(0, Ordering::Relaxed);
                }
            }
            ServerEvent::RoleChanged => {
                // A replica keeps no metrics: a primary that fails back counts from zero.
                if !Flags::of(ctx).primary() {
                    crate::host::metrics::forget_all();
                }
                timer::forget_cron_due();
                effects::role_changed();
                meta_watch::unsure();
                // A promoted primary's timer starts on what it watched as a replica, which
                // learned nothing from the replication stream if it takes no foreign writes:
                // it starts as at load, its tables unread (the stream may have written them).
                if !learn_foreign_writes() && Flags::of(ctx).primary() {
                    timer::watched().forget_db(-1);
                    rebuild(ctx);
                }
                timer::rearm(ctx);
            }
            ServerEvent::Forked => effects::forked(),
            ServerEvent::ModuleChanged(loaded, name) => {
                listeners::on_module_change(ctx, loaded, name)
            }
            // `SWAPDB a b` exchanges the two databases' contents (no keyspace event says so).
            ServerEvent::SwapDb(a, b) => {
                timer::forget_cron_due();
                meta_watch::databases_changed();
                timer::watched().swap_dbs(a, b);
                queues::swap_dbs(a, b);
            }
            // `FLUSHDB`, `FLUSHALL`, or a replica emptying its data for a full sync: no keyspace
            // event names the keys, and the queues of an emptied database have nothing left.
            ServerEvent::Flushed(db) => {
                timer::forget_cron_due();
                meta_watch::databases_changed();
                timer::watched().forget_db(db);
                queues::forget_db(db);
                crate::host::metrics::forget_all();
            }
            ServerEvent::SlotMigration(kind, ranges) => {
                cluster::on_atomic_migration(kind, ranges);
                if kind == MigrationEvent::ImportStarted {
                    meta_watch::unsure();
                }
                // The imported slots' queues, written by the import, not by EchoMQ.
                if kind == MigrationEvent::ImportCompleted && !learn_foreign_writes() {
                    rebuild(ctx);
                }
                if kind == MigrationEvent::ExportStarted {
                    // The export streams the writes it propagates: EchoMQ's must be among them.
                    effects::export_started();
                }
            }
        }
    }
}

/// A hash command on a queue's `unique` or `cron` table, from a client, a script or the
/// replication stream (a hash write no subscribed keyspace event reports): the timer visits the
/// queue, so a promoted replica sweeps and fires what its old primary did.
fn observe_table_write(args: &FilterArgs, first: &[u8]) {
    if !first.first().is_some_and(|c| c.eq_ignore_ascii_case(&b'H')) {
        return;
    }
    let Some(key) = args.word(1) else {
        return;
    };
    let table = key.starts_with(crate::protocol::keyspace::PREFIX)
        && (key.ends_with(KeyType::Unique.key_suffix())
            || key.ends_with(KeyType::Cron.key_suffix()));
    if !table {
        return;
    }
    let Some(Decoded::Queue { queue, .. }) = decode(key) else {
        return;
    };
    match args.client() {
        Some(client) => timer::table_changed(client.db, queue.as_bytes()),
        None => timer::table_changed_somewhere(queue.as_bytes()),
    }
}

/// A `RESTORE` (a legacy slot migration's import, or by hand) of a queue's key, when no
/// keyspace event on every key reports it: the registry looks for the key once it is there,
/// and the timer visits the queue of a set it visits.
fn observe_restore(args: &FilterArgs, first: &[u8]) {
    let restore = first.len() >= 7
        && first[..7].eq_ignore_ascii_case(b"RESTORE")
        && (first.len() == 7 || first.eq_ignore_ascii_case(b"RESTORE-ASKING"));
    if !restore {
        return;
    }
    let Some(key) = args.word(1) else {
        return;
    };
    queues::note_written(args, key);
    // A `meta` hash brought here (a slot's limits and pause): transitions read it again.
    meta_watch::observe_key(key, b"restore");
    let Some(Decoded::Queue { queue, ty, .. }) = decode(key) else {
        return;
    };
    // The timer needs the database, which a server that cannot name the filtered command's
    // client (Redis 7.0) does not give: there the restored queue waits for EchoMQ's next write.
    if let Some(client) = args.client().filter(|_| ty.is_timed()) {
        timer::visit_at(client.db, queue.as_bytes(), 0);
    }
}

/// Whether a command named `first` may be one a hook of the filter takes (by its length and
/// first letter): most commands, `SET`, `ZADD`, `DEL` or `GET` among them, are not, and cost
/// the filter nothing more. Every word a hook looks for must pass (a test holds them all).
fn may_matter(first: &[u8]) -> bool {
    let Some(c) = first.first() else {
        return false;
    };
    let len = first.len();
    match c.to_ascii_uppercase() {
        // Hash writes (queues, the meta watch, the tables).
        b'H' => true,
        // XADD, XGROUP.
        b'X' => matches!(len, 4 | 6),
        // EXEC; EVAL, EVALSHA, EVAL_RO; EVALSHA_RO.
        b'E' => matches!(len, 4 | 7 | 10),
        // FCALL, FCALL_RO; FAILOVER.
        b'F' => matches!(len, 5 | 8),
        // SYNC; SELECT; SLAVEOF.
        b'S' => matches!(len, 4 | 6 | 7),
        // PSYNC.
        b'P' => len == 5,
        // RESTORE; REPLICAOF; RESTORE-ASKING.
        b'R' => matches!(len, 7 | 9 | 14),
        // COPY; CLUSTER.
        b'C' => matches!(len, 4 | 7),
        // DISCARD.
        b'D' => len == 7,
        // MODULE.
        b'M' => len == 6,
        _ => false,
    }
}

impl CommandFilter for Events {
    /// Every command passes here before it runs, and the first word tells the few that matter
    /// apart without allocating.
    fn on_command(args: &FilterArgs) {
        let first = args.first();
        if may_matter(first) {
            observe_command(args, first);
        }
    }
}

/// The hooks of the filter, for a command [`may_matter`] lets through (kept out of line, so
/// that the common command pays for none of their setup).
#[inline(never)]
fn observe_command(args: &FilterArgs, first: &[u8]) {
    effects::observe_command(first);
    client_db::observe_command(args, first);
    meta_watch::observe_command(args, first);
    queues::observe_command(args, first);
    observe_table_write(args, first);
    if !learn_foreign_writes() {
        observe_restore(args, first);
    }
    if first.eq_ignore_ascii_case(b"MODULE") {
        let words = args.words(8);
        if words.len() == 3
            && words[1].eq_ignore_ascii_case(b"UNLOAD")
            && words[2] == MODULE_NAME.to_bytes()
        {
            timer::disarm_for_unload();
        }
    } else if first.eq_ignore_ascii_case(b"CLUSTER") {
        cluster::observe_command(&args.words(8));
    }
}

#[cfg(test)]
mod tests {
    use super::may_matter;

    #[test]
    fn every_command_a_filter_hook_takes_passes_and_the_common_writes_do_not() {
        let taken = [
            "HSET",
            "hset",
            "HSETNX",
            "HMSET",
            "HINCRBY",
            "HINCRBYFLOAT",
            "HSETEX",
            "HDEL",
            "XADD",
            "XGROUP",
            "EXEC",
            "EVAL",
            "EVALSHA",
            "EVAL_RO",
            "EVALSHA_RO",
            "FCALL",
            "FCALL_RO",
            "FAILOVER",
            "SYNC",
            "PSYNC",
            "REPLICAOF",
            "SLAVEOF",
            "SELECT",
            "COPY",
            "DISCARD",
            "MODULE",
            "CLUSTER",
            "RESTORE",
            "RESTORE-ASKING",
            "restore",
        ];
        for word in taken {
            assert!(may_matter(word.as_bytes()), "{word}");
        }
        for word in [
            "SET", "GET", "ZADD", "DEL", "ZREM", "INCR", "LPUSH", "EXPIRE", "", "MGET",
        ] {
            assert!(!may_matter(word.as_bytes()), "{word}");
        }
    }
}
