//! Slot migrations (resharding). A command's declared routing key is the queue name, which
//! never exists as a key, so while a slot migrates the server redirects every EMQ command for
//! it (`-ASK`) to the importing node, and the queue's real keys move over one `MIGRATE` at a
//! time. A write seeing some of a queue's keys but not others could duplicate a job or, worse,
//! create a key that `MIGRATE` then collides with. So, like the server's own multi-key
//! commands, EchoMQ answers `TRYAGAIN` to writes for a slot in migration on this node, and its
//! timer leaves such slots alone. Clients retry; the migration of one slot takes moments.
//!
//! A slot is marked as soon as `CLUSTER SETSLOT <slot> IMPORTING|MIGRATING` arrives (a command
//! filter sees it before it runs; the command itself may then wait for replicas before the
//! server shows the new state). Every second `CLUSTER NODES` is read again: it marks what it
//! shows (which also covers a restart in the middle of a migration) and settles a slot once it
//! no longer shows it, but never within [`GRACE_MS`] of a `SETSLOT` mark, so a reading taken
//! while that command waits cannot unmark the slot early. `SETSLOT ... NODE` or `STABLE` lifts
//! that grace and has `CLUSTER NODES` read on every cron tick for a while, so the slot settles
//! within a tick of the server applying it. Settling late only means a few more
//! `TRYAGAIN`s; settling early could lose jobs.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use valkey_module::{raw, Context, ValkeyValue};

use crate::error::EmqError;
use crate::grammar::slot::SLOTS;
use crate::grammar::{slot, Queue};
use crate::server::string_bytes;

static ENABLED: AtomicBool = AtomicBool::new(false);
static IN_MIGRATION: [AtomicBool; SLOTS as usize] =
    [const { AtomicBool::new(false) }; SLOTS as usize];
/// When `CLUSTER SETSLOT` last marked each slot (unix ms).
static MARKED_AT: [AtomicU64; SLOTS as usize] = [const { AtomicU64::new(0) }; SLOTS as usize];
static LAST_RECONCILE_MS: AtomicU64 = AtomicU64::new(0);
const RECONCILE_EVERY_MS: u64 = 1000;
/// Until when (unix ms) `CLUSTER NODES` is read on every cron tick, not once a second: a
/// `SETSLOT ... NODE` or `STABLE` just arrived, and its slot settles as soon as the server
/// shows it.
static SETTLING_UNTIL_MS: AtomicU64 = AtomicU64::new(0);
/// How long a `SETSLOT` waits for the replicas to acknowledge it (the server's default) before
/// the server applies it.
const SETSLOT_WAIT_MS: u64 = 2000;
/// How long a `SETSLOT` mark holds against a `CLUSTER NODES` reading that does not show it.
pub const GRACE_MS: u64 = 10_000;

/// Whether this server runs in cluster mode (learned at load).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn init(ctx: &Context) {
    let flags = crate::store::context_flags(ctx);
    ENABLED.store(
        flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0,
        Ordering::Relaxed,
    );
    for s in &IN_MIGRATION {
        s.store(false, Ordering::Relaxed);
    }
}

/// Whether `slot` is being imported or migrated by this node.
pub fn slot_in_migration(slot: u16) -> bool {
    enabled() && IN_MIGRATION[usize::from(slot) % SLOTS as usize].load(Ordering::Relaxed)
}

/// `TRYAGAIN` for a write to a queue whose slot is in migration here.
pub fn check_stable(queue: Queue<'_>) -> Result<(), EmqError> {
    if enabled() && slot_in_migration(slot(queue.as_bytes())) {
        return Err(EmqError::TryAgain);
    }
    Ok(())
}

fn parse_slot(bytes: &[u8]) -> Option<u16> {
    std::str::from_utf8(bytes)
        .ok()?
        .parse::<u16>()
        .ok()
        .filter(|s| *s < SLOTS)
}

/// `CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE|STABLE ...` or `CLUSTER RESET`, seen by
/// the command filter before it runs.
pub fn observe_command(args: &[&[u8]]) {
    if !enabled() || args.len() < 2 || !args[0].eq_ignore_ascii_case(b"CLUSTER") {
        return;
    }
    if args[1].eq_ignore_ascii_case(b"RESET") {
        for s in &IN_MIGRATION {
            s.store(false, Ordering::Relaxed);
        }
        return;
    }
    if !args[1].eq_ignore_ascii_case(b"SETSLOT") || args.len() < 4 {
        return;
    }
    let Some(slot) = parse_slot(args[2]) else {
        return;
    };
    if args[3].eq_ignore_ascii_case(b"IMPORTING") || args[3].eq_ignore_ascii_case(b"MIGRATING") {
        MARKED_AT[usize::from(slot)].store(crate::server::now_ms(), Ordering::Relaxed);
        set(slot, true, "CLUSTER SETSLOT");
    } else if args[3].eq_ignore_ascii_case(b"NODE") || args[3].eq_ignore_ascii_case(b"STABLE") {
        // Settled by `reconcile` once the server shows it (the command may still be waiting
        // for replicas): no grace to wait out, and readings on every cron tick meanwhile.
        MARKED_AT[usize::from(slot)].store(0, Ordering::Relaxed);
        SETTLING_UNTIL_MS.store(crate::server::now_ms() + SETSLOT_WAIT_MS, Ordering::Relaxed);
    }
}

/// Records a slot's state, and says so in the server log when it changes.
fn set(slot: u16, migrating: bool, why: &str) {
    let was = IN_MIGRATION[usize::from(slot)].swap(migrating, Ordering::Relaxed);
    if was != migrating {
        let state = if migrating {
            "is migrating: writes to its queues answer TRYAGAIN"
        } else {
            "is settled"
        };
        crate::server::log(
            crate::scheduler::module_ctx(),
            c"notice",
            &format!("EchoMQ: slot {slot} {state} ({why})"),
        );
    }
}

/// Slots this node imports or migrates, from its own `CLUSTER NODES` line:
/// `[<slot>->-<node>]` (migrating) and `[<slot>-<-<node>]` (importing).
pub fn migrating_slots(nodes: &str) -> Vec<u16> {
    let Some(myself) = nodes.lines().find(|l| {
        l.split(' ')
            .nth(2)
            .is_some_and(|f| f.split(',').any(|x| x == "myself"))
    }) else {
        return Vec::new();
    };
    myself
        .split(' ')
        .filter_map(|field| field.strip_prefix('['))
        .filter_map(|field| field.split('-').next())
        .filter_map(|s| s.parse::<u16>().ok())
        .filter(|s| *s < SLOTS)
        .collect()
}

/// Re-reads the migration state from `CLUSTER NODES`: once a second, or on every cron tick
/// while a slot settles.
pub fn reconcile(ctx: &Context, now_ms: u64) {
    let settling = now_ms < SETTLING_UNTIL_MS.load(Ordering::Relaxed);
    if !enabled()
        || (!settling
            && now_ms.saturating_sub(LAST_RECONCILE_MS.load(Ordering::Relaxed))
                < RECONCILE_EVERY_MS)
    {
        return;
    }
    LAST_RECONCILE_MS.store(now_ms, Ordering::Relaxed);
    let text = match ctx.call("CLUSTER", &["NODES"]) {
        Ok(ValkeyValue::BulkString(s)) | Ok(ValkeyValue::SimpleString(s)) => s,
        Ok(ValkeyValue::StringBuffer(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => return,
    };
    let mut shown = vec![false; SLOTS as usize];
    for s in migrating_slots(&text) {
        shown[usize::from(s)] = true;
    }
    for (slot, shown) in (0..SLOTS).zip(shown) {
        let i = usize::from(slot);
        if shown {
            set(slot, true, "CLUSTER NODES");
        } else if IN_MIGRATION[i].load(Ordering::Relaxed)
            && now_ms.saturating_sub(MARKED_AT[i].load(Ordering::Relaxed)) >= GRACE_MS
        {
            set(slot, false, "CLUSTER NODES");
        }
    }
}

/// The command filter's view of one command's arguments.
pub(crate) fn filter_args(fctx: *mut raw::RedisModuleCommandFilterCtx) -> Vec<&'static [u8]> {
    let (Some(count), Some(arg)) = (unsafe {
        (
            raw::RedisModule_CommandFilterArgsCount,
            raw::RedisModule_CommandFilterArgGet,
        )
    }) else {
        return Vec::new();
    };
    // SAFETY: the filter context is live for this call; the strings outlive our use of them.
    let n = unsafe { count(fctx) };
    (0..n.clamp(0, 8) as c_int)
        .map(|i| string_bytes(unsafe { arg(fctx, i) }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_migrating_and_importing_slots_from_cluster_nodes() {
        let nodes = "a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [105->-b2] [200-<-c3]\n\
                     b2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922 [105-<-a1]\n";
        assert_eq!(migrating_slots(nodes), vec![105, 200]);
        assert!(migrating_slots(
            "a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460\n"
        )
        .is_empty());
        assert!(migrating_slots("").is_empty());
    }
}
