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
//!
//! Valkey 9.0 also migrates slots atomically (`CLUSTER MIGRATESLOTS`): the source goes on
//! serving its slots and streams every write in them to the target, which holds the keys
//! hidden from clients until ownership changes hands at once. The server refuses such a
//! migration while a loaded module has not declared that it handles one, and EchoMQ declares
//! it ([`handles_atomic_migration`]) because it does what such a migration needs:
//!
//! - on the target, the slots it imports are in migration as above (writes answer `TRYAGAIN`,
//!   the timer leaves their queues), from the import's start to its end, so nothing there
//!   writes to keys the source still owns;
//! - on the source, nothing changes for clients, and EchoMQ's writes go to `RM_Replicate`
//!   for as long as an export runs (see `effects`), which is how they reach the target.
//!
//! The server's migration events mark and settle the slots at once; `CLUSTER
//! GETSLOTMIGRATIONS`, read with `CLUSTER NODES`, also covers a module loaded in the middle
//! of a migration.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use valkey_module::{Context, ValkeyValue};

use crate::host::client::Flags;
use crate::host::events::MigrationEvent;
use crate::host::server::{info_field, log_module, now_ms, reply_text, version};
use crate::protocol::slot::SLOTS;
use crate::protocol::{slot, EmqError, Queue};

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

/// Whether the server migrates slots atomically (Valkey 9.0 and later), learned at load.
static ATOMIC: AtomicBool = AtomicBool::new(false);
/// Slots an atomic migration is importing into this node (or into its primary).
static IMPORTING: [AtomicBool; SLOTS as usize] = [const { AtomicBool::new(false) }; SLOTS as usize];
/// Whether an atomic migration exports slots from this node.
static EXPORTING: AtomicBool = AtomicBool::new(false);
const FIRST_ATOMIC_VERSION: i32 = 0x0009_0000;

/// Whether this server runs in cluster mode (learned at load).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn init(ctx: &Context) {
    ENABLED.store(Flags::of(ctx).cluster(), Ordering::Relaxed);
    for s in IN_MIGRATION.iter().chain(&IMPORTING) {
        s.store(false, Ordering::Relaxed);
    }
    EXPORTING.store(false, Ordering::Relaxed);
    super::owners::clear();
    ATOMIC.store(atomic_migration_server(ctx), Ordering::Relaxed);
}

/// Valkey 9.0 or later. (Redis numbers its versions on a scale of its own and has no such
/// option, so the server's name is checked too.)
fn atomic_migration_server(ctx: &Context) -> bool {
    version() >= FIRST_ATOMIC_VERSION
        && info_field(ctx, "server", "server_name").as_deref() == Some(b"valkey")
}

/// Whether EchoMQ declares that it handles atomic slot migrations (on servers that have them).
pub fn handles_atomic_migration() -> bool {
    ATOMIC.load(Ordering::Relaxed)
}

/// Whether an atomic migration exports slots from this node: EchoMQ's writes must then
/// reach the target through `RM_Replicate`.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Whether `slot` is being imported or migrated by this node.
pub fn slot_in_migration(slot: u16) -> bool {
    let i = usize::from(slot) % SLOTS as usize;
    enabled() && (IN_MIGRATION[i].load(Ordering::Relaxed) || IMPORTING[i].load(Ordering::Relaxed))
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
        MARKED_AT[usize::from(slot)].store(now_ms(), Ordering::Relaxed);
        set(slot, true, "CLUSTER SETSLOT");
    } else if args[3].eq_ignore_ascii_case(b"NODE") || args[3].eq_ignore_ascii_case(b"STABLE") {
        // Settled by `reconcile` once the server shows it (the command may still be waiting
        // for replicas): no grace to wait out, and readings on every cron tick meanwhile.
        MARKED_AT[usize::from(slot)].store(0, Ordering::Relaxed);
        SETTLING_UNTIL_MS.store(now_ms() + SETSLOT_WAIT_MS, Ordering::Relaxed);
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
        log_module(c"notice", &format!("EchoMQ: slot {slot} {state} ({why})"));
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

/// The server's atomic migration event: an import marks its slots as in migration from its
/// start to its end; an export starting is remembered (and opens the effects gate, see
/// `events`).
pub fn on_atomic_migration(kind: MigrationEvent, ranges: &[(i64, i64)]) {
    let importing = match kind {
        MigrationEvent::ImportStarted => true,
        MigrationEvent::ImportCompleted | MigrationEvent::ImportAborted => false,
        MigrationEvent::ExportStarted => {
            EXPORTING.store(true, Ordering::Relaxed);
            return;
        }
        // An export's end: `reconcile` sees it in the list of migrations.
        MigrationEvent::Other => return,
    };
    let ranges: Vec<(u16, u16)> = ranges
        .iter()
        .filter_map(|&(start, end)| slot_range(start, end))
        .collect();
    mark_importing(&ranges, importing, "CLUSTER MIGRATESLOTS");
}

fn slot_range(start: i64, end: i64) -> Option<(u16, u16)> {
    let slot = |s: i64| u16::try_from(s).ok().filter(|s| *s < SLOTS);
    let (start, end) = (slot(start)?, slot(end)?);
    (start <= end).then_some((start, end))
}

/// Marks or settles the slots of an atomic import, and says so in the server log.
fn mark_importing(ranges: &[(u16, u16)], importing: bool, why: &str) {
    for &(start, end) in ranges {
        for slot in start..=end {
            IMPORTING[usize::from(slot)].store(importing, Ordering::Relaxed);
        }
    }
    if ranges.is_empty() {
        return;
    }
    let list: Vec<String> = ranges.iter().map(|(a, b)| format!("{a}-{b}")).collect();
    let state = if importing {
        "are being imported: writes to their queues answer TRYAGAIN, and the timer leaves them"
    } else {
        "are settled"
    };
    log_module(
        c"notice",
        &format!("EchoMQ: slots {} {state} ({why})", list.join(" ")),
    );
}

/// One migration of `CLUSTER GETSLOTMIGRATIONS` that has not ended: whether it imports, and
/// its slot ranges.
#[derive(Debug, PartialEq)]
pub struct Migration {
    pub import: bool,
    pub ranges: Vec<(u16, u16)>,
}

/// The migrations still running in a `CLUSTER GETSLOTMIGRATIONS` reply, each given as its
/// fields (`operation`, `slot_ranges` as `a-b c-d`, `state`, ...). A migration has ended in
/// `success`, `failed` or `cancelled`.
pub fn running_migrations(jobs: &[Vec<(String, String)>]) -> Vec<Migration> {
    jobs.iter()
        .filter_map(|fields| {
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.as_str())
            };
            if matches!(field("state")?, "success" | "failed" | "cancelled") {
                return None;
            }
            let import = match field("operation")? {
                "IMPORT" => true,
                "EXPORT" => false,
                _ => return None,
            };
            let ranges = field("slot_ranges")?
                .split(' ')
                .filter_map(|r| {
                    let (a, b) = r.split_once('-')?;
                    slot_range(a.parse().ok()?, b.parse().ok()?)
                })
                .collect();
            Some(Migration { import, ranges })
        })
        .collect()
}

/// Re-reads the atomic migrations from `CLUSTER GETSLOTMIGRATIONS`.
fn reconcile_atomic(ctx: &Context) {
    let Ok(ValkeyValue::Array(jobs)) = ctx.call("CLUSTER", &["GETSLOTMIGRATIONS"]) else {
        return;
    };
    let text = |v: &ValkeyValue| reply_text(v).unwrap_or_default();
    let jobs: Vec<Vec<(String, String)>> = jobs
        .iter()
        .map(|job| match job {
            ValkeyValue::Array(kv) => kv
                .chunks(2)
                .filter(|pair| pair.len() == 2)
                .map(|pair| (text(&pair[0]), text(&pair[1])))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    let running = running_migrations(&jobs);
    EXPORTING.store(running.iter().any(|m| !m.import), Ordering::Relaxed);
    let mut shown = vec![false; SLOTS as usize];
    for m in running.iter().filter(|m| m.import) {
        for &(a, b) in &m.ranges {
            for slot in a..=b {
                shown[usize::from(slot)] = true;
            }
        }
    }
    // The events keep these marks exact; a reading only corrects what they missed.
    for importing in [true, false] {
        let changed = ranges_of((0..SLOTS).filter(|s| {
            let i = usize::from(*s);
            shown[i] == importing && IMPORTING[i].load(Ordering::Relaxed) != importing
        }));
        mark_importing(&changed, importing, "CLUSTER GETSLOTMIGRATIONS");
    }
}

/// Ascending slots as ranges of consecutive slots.
fn ranges_of(slots: impl Iterator<Item = u16>) -> Vec<(u16, u16)> {
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for slot in slots {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == slot => *end = slot,
            _ => ranges.push((slot, slot)),
        }
    }
    ranges
}

/// Whether a slot is settling (a `SETSLOT` was seen moments ago): the cron then reconciles at
/// every call.
pub fn settling(now_ms: u64) -> bool {
    now_ms < SETTLING_UNTIL_MS.load(Ordering::Relaxed)
}

/// Re-reads the migration state from `CLUSTER NODES`: once a second, or on every cron tick
/// while a slot settles.
pub fn reconcile(ctx: &Context, now_ms: u64) {
    let settling = settling(now_ms);
    if !enabled()
        || (!settling
            && now_ms.saturating_sub(LAST_RECONCILE_MS.load(Ordering::Relaxed))
                < RECONCILE_EVERY_MS)
    {
        return;
    }
    LAST_RECONCILE_MS.store(now_ms, Ordering::Relaxed);
    if handles_atomic_migration() {
        reconcile_atomic(ctx);
    }
    let Some(text) = ctx
        .call("CLUSTER", &["NODES"])
        .ok()
        .as_ref()
        .and_then(reply_text)
    else {
        return;
    };
    super::owners::read(&text);
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

    fn job(fields: &[(&str, &str)]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_running_atomic_migrations() {
        let jobs = [
            job(&[
                ("name", "a"),
                ("operation", "IMPORT"),
                ("slot_ranges", "0-10 100-100"),
                ("state", "receiving-snapshot"),
            ]),
            job(&[
                ("operation", "EXPORT"),
                ("slot_ranges", "200-300"),
                ("state", "replicating"),
            ]),
            job(&[
                ("operation", "IMPORT"),
                ("slot_ranges", "400-500"),
                ("state", "success"),
            ]),
            job(&[
                ("operation", "EXPORT"),
                ("slot_ranges", "600-700"),
                ("state", "failed"),
            ]),
            job(&[
                ("operation", "IMPORT"),
                ("slot_ranges", "800-900"),
                ("state", "cancelled"),
            ]),
            // A cleanup still deletes what a failed import brought: not ended yet.
            job(&[
                ("operation", "IMPORT"),
                ("slot_ranges", "16383-16383 20000-20001 9-8"),
                ("state", "cleaning-up"),
            ]),
        ];
        assert_eq!(
            running_migrations(&jobs),
            vec![
                Migration {
                    import: true,
                    ranges: vec![(0, 10), (100, 100)]
                },
                Migration {
                    import: false,
                    ranges: vec![(200, 300)]
                },
                Migration {
                    import: true,
                    ranges: vec![(16383, 16383)]
                },
            ]
        );
        assert!(running_migrations(&[job(&[("operation", "IMPORT")])]).is_empty());
    }

    #[test]
    fn groups_consecutive_slots_into_ranges() {
        assert_eq!(
            ranges_of([1, 2, 3, 7, 9, 10].into_iter()),
            vec![(1, 3), (7, 7), (9, 10)]
        );
        assert!(ranges_of(std::iter::empty()).is_empty());
    }
}
