//! Replication by effect, paid for only when something can receive it: when the effects gate
//! (`host::propagate`) opens and closes.
//!
//! Every write of EchoMQ reaches replicas and the AOF as the plain commands it amounts to
//! (`HSET`, `ZADD`, ...). The server itself propagates nothing when nothing can receive it:
//! it writes to the AOF only when AOF is on, and to the replication stream only on a
//! primary with replicas or with a replication backlog (a replica that went away resumes
//! from it); otherwise it drops a propagated command before looking at it, so a native
//! `HSET` pays nothing. `RM_Replicate` does its own work before that drop: it looks the
//! command up by name and builds an argument vector, about a quarter of an `EMQ.ENQUEUE`.
//! EchoMQ therefore skips it when the server would drop the effect anyway, and only then:
//!
//! - **open** (effects go to `RM_Replicate`) at load, and at once, before the command runs,
//!   whenever something could start receiving: a `SYNC` or `PSYNC` (a replica attaching
//!   creates the backlog), `REPLICAOF`, `SLAVEOF` or `FAILOVER` (seen by the command
//!   filter), or a replication role change (a server event, whatever caused it: a cluster
//!   failover, `CLUSTER REPLICATE`, ...), or an atomic slot migration starting to export
//!   from this server (a server event; the export streams the writes it propagates);
//! - where no command filter is registered (`emq.learn-foreign-writes no` outside a cluster),
//!   a fork opens it instead of `SYNC` and `PSYNC`: a replica's full sync starts from a
//!   snapshot taken in a fork, and the server reports the fork in the parent before it runs
//!   anything else, so every write after the snapshot is propagated. A write skipped before
//!   the fork is in the snapshot; if the `SYNC` already made a backlog, the command counted as
//!   a change (below) went into it, before the offset the replica starts from, which no
//!   replica reads (a new backlog comes with a new replication id). A partial resync needs a
//!   backlog, which keeps the gate open;
//! - AOF is read from the context flags by every command (once, for all its effects), so AOF
//!   turned on by any path is seen by the next write; writes outside a command (the timer's)
//!   always replicate;
//! - **closed** only by [`probe`], on the server cron about once a second while the gate is
//!   open or EchoMQ writes (with the gate closed, an idle server is asked nothing: `INFO
//!   replication` is most of what an idle module would cost), when `INFO replication` shows a primary with no replicas and no backlog,
//!   and no atomic slot migration exports from it. Every path that creates a replica or a backlog on a primary
//!   runs in a command the filter sees first (without the filter: starts receiving at a
//!   fork), or in a role change, and an export starts in a server event, so nothing can start
//!   receiving while the gate is closed.
//!
//! A skipped effect still counts as a change for the server's `save` points: it goes to
//! `RM_ReplicateVerbatim`, which adds one to the server's change counter, as
//! `RM_Replicate` does, after the server has dropped the propagation itself.

use std::sync::atomic::{AtomicU64, Ordering};

use valkey_module::Context;

use crate::host::propagate::{gate_open, reset_gate, set_gate, wrote_since};
use crate::host::server::{log, replication_view};

static LAST_PROBE_MS: AtomicU64 = AtomicU64::new(0);
const PROBE_EVERY_MS: u64 = 1000;

/// Commands after which something may receive propagated writes: a replica attaching (the
/// only way a primary gets replicas or a backlog) and the role changes (also reported by the
/// role-change event). Commands that clients poll (`CONFIG GET`, `CLUSTER SLOTS`, ...) are
/// not here, so they never cost the gate a second of replicating for nothing.
const OPENING_COMMANDS: [&[u8]; 5] = [b"SYNC", b"PSYNC", b"REPLICAOF", b"SLAVEOF", b"FAILOVER"];

/// Module load: the gate starts open (a module loaded again after an unload must not trust
/// what it saw before; replicas may have attached in between) and the next cron probes.
pub fn reset() {
    reset_gate();
    LAST_PROBE_MS.store(0, Ordering::Relaxed);
}

/// The command filter's hook: `first` is the command's name as the client sent it.
pub fn observe_command(first: &[u8]) {
    if OPENING_COMMANDS
        .iter()
        .any(|name| first.eq_ignore_ascii_case(name))
    {
        set_gate(true);
    }
}

/// The server forked (only reported where no command filter is registered): it may be the
/// snapshot a replica's full sync starts from. A fork for `BGSAVE` or an AOF rewrite opens
/// the gate for nothing until the next probe.
pub fn forked() {
    set_gate(true);
}

/// A replication role change (this server became a replica, or a primary again).
pub fn role_changed() {
    set_gate(true);
}

/// An atomic slot migration starts exporting from this server: the server streams the writes
/// in its slots to the target as it propagates them, so EchoMQ's must be propagated too.
pub fn export_started() {
    set_gate(true);
}

/// Re-reads who can receive propagated writes, at most once a second (the server cron), and
/// only when EchoMQ wrote since the last look.
pub fn probe(ctx: &Context, now_ms: u64) {
    if !super::once_every(&LAST_PROBE_MS, now_ms, PROBE_EVERY_MS) {
        return;
    }
    // Closed and nothing written: nothing to close, and every opening comes by the filter or
    // an event, not by this look.
    if !wrote_since() && !gate_open() {
        return;
    }
    let listened = super::cluster::exporting()
        || match replication_view(ctx) {
            Some(view) => !view.primary || view.replicas > 0 || view.backlog,
            None => true,
        };
    let was_open = set_gate(listened);
    // Without the filter, a replica waiting for its snapshot (`repl-diskless-sync-delay`) is
    // seen here before the fork that would open the gate: opening it now is early, not late.
    if listened && !was_open && super::command_filter() {
        // Every path to a replica or a backlog should have opened the gate before it ran.
        log(
            ctx,
            c"warning",
            "EchoMQ: found replicas or a replication backlog with effects unreplicated; \
             replicating from now on",
        );
    }
}
