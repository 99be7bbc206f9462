//! Moves due jobs and expired leases back to `pending` without any client process.
//!
//! - A module timer on primaries only promotes what is due on the queues it watches, starting
//!   no visit after [`TICK_BUDGET`] into a tick. It ticks every [`TICK_MS`] while something is
//!   due, and otherwise sleeps until the earliest due time, lease deadline or table step it
//!   knows of; a write it learns of that brings one forward wakes it sooner ([`soon`]). While a
//!   claim waits and foreign writes are not learned as they happen, it also ticks to poll the
//!   waited-on queues (`waiters`). With nothing to wait for it is not armed at all, so an idle
//!   server wakes no more often than without EchoMQ. The server's cron (which runs anyway)
//!   arms it again where a wake-up was missed, within a second.
//! - The watched queues (those with scheduled or active jobs) are learned from EchoMQ's own
//!   writes, the keyspace events of others' with `emq.learn-foreign-writes yes` (see
//!   `events`), the poll, and one scan after the module loads and after the server loads its
//!   data. The tick never scans the keyspace.
//! - The server refuses `MODULE UNLOAD` while a module timer is armed, so the command filter,
//!   where there is one, stops the timer when `MODULE UNLOAD emq` arrives, and the server's
//!   cron re-arms it if the module is still loaded afterwards (an unload refused for another
//!   reason).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use valkey_module::Context;

use crate::host::acl::Access;
use crate::host::client::{select_db, selected_db, writes_paused, Flags};
use crate::host::events::{start_timer, stop_timer, Tick};
use crate::host::key::Key;
use crate::host::propagate::signal_ready;
use crate::host::server::{log, module_ctx, now_ms};
use crate::host::store::with_queue;
use crate::host::string::OwnedString;
use crate::protocol::counters::{self, TICKS, TICKS_AT_BUDGET, VISITS_REFUSED};
use crate::protocol::{settings, EmqError, Holds, KeyBuf, KeyType, Queue};
use crate::queue::promote::{visit, Moved};
use crate::queue::{cron, unique};

use super::cluster;
use super::watchlist::{Tables, Watchlist};

/// How often the timer looks for due work, in ms. A job due at T is claimable by T + a tick.
pub const TICK_MS: u64 = 10;
/// After how long a tick starts no new visit: a quarter of its period, as the server's own
/// active expiry takes at most a quarter of its cycle (a visit under way finishes, bounded by
/// [`VISIT_BUDGET`]). What is left waits for the next tick, the longest waiting first, so a
/// backlog of due jobs never stalls the server.
const TICK_BUDGET: Duration = Duration::from_micros(2_500);
/// Most jobs one visit moves from each set (about half a millisecond of work): a queue with
/// more due is visited again while the tick has time, and at the next tick.
const VISIT_BUDGET: usize = 100;
/// Most queues read from the watched list at once.
const QUEUES_PER_BATCH: usize = 256;
/// How soon a queue whose slot is migrating is looked at again.
const RETRY_MIGRATING_MS: i64 = 100;
/// How soon a queue whose visit was refused (a key of it holds another type, written by hand)
/// is looked at again: its due jobs wait, and move within this once the key is put right.
const RETRY_REFUSED_MS: i64 = 1000;
/// At most one server-log warning about refused visits in this many ms.
const WARN_REFUSED_EVERY_MS: u64 = 60_000;
static LAST_REFUSED_WARNING_MS: AtomicU64 = AtomicU64::new(0);

/// Queues with scheduled or active jobs, as (db, queue name), each with the unix ms before
/// which a visit would find nothing due (0: visit at the next tick) and what the last visit
/// learned of its `unique` and `cron` tables. Any write to the queue's `schedule` or `active`
/// set resets the time to 0, so an earlier due time is never missed.
static WATCHED: Mutex<Watchlist> = Mutex::new(Watchlist::new());
/// Pending sets, as (db, key name), whose blocked claimers were woken while client writes were
/// paused and left waiting; the first tick after the pause wakes them again.
static DEFERRED: Mutex<BTreeSet<(i32, Vec<u8>)>> = Mutex::new(BTreeSet::new());
static TIMER: AtomicU64 = AtomicU64::new(0);
/// When the armed timer ticks (unix ms); `i64::MAX` while none is armed.
static ARMED_AT: AtomicI64 = AtomicI64::new(i64::MAX);
static RUNNING: AtomicBool = AtomicBool::new(false);

pub(super) fn watched() -> std::sync::MutexGuard<'static, Watchlist> {
    WATCHED.lock().unwrap_or_else(|p| p.into_inner())
}

fn deferred() -> std::sync::MutexGuard<'static, BTreeSet<(i32, Vec<u8>)>> {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A command wrote a unique key of `queue` (in the context's database): the timer sweeps its
/// table by `at`, and visits the queue by then.
pub fn watch_unique(ctx: &Context, queue: Queue<'_>, at: i64) {
    let db = selected_db(ctx);
    let mut watched = watched();
    watched.visit_by(db, queue.as_bytes(), at);
    watched.update_tables(db, queue.as_bytes(), |t| t.sweep_at = t.sweep_at.min(at));
    drop(watched);
    soon(at);
}

/// A command wrote a schedule of `queue` (in the context's database), the next firing of its
/// table at `at`: the timer reads the table again at a visit by then.
pub fn watch_cron(ctx: &Context, queue: Queue<'_>, at: i64) {
    let db = selected_db(ctx);
    let mut watched = watched();
    watched.visit_by(db, queue.as_bytes(), at);
    watched.update_tables(db, queue.as_bytes(), |t| t.cron_at = Tables::UNKNOWN);
    drop(watched);
    soon(at);
}

/// A table of `queue` in `db` may have changed (the replication stream, a command by hand, a
/// key restored or renamed): the timer visits the queue at its next tick, sweeps its `unique`
/// table and reads its `cron` table again.
pub fn table_changed(db: i32, queue: &[u8]) {
    let mut watched = watched();
    watched.visit_at(db, queue, 0);
    watched.update_tables(db, queue, |t| *t = Tables::UNREAD);
    drop(watched);
    soon(0);
}

/// Queues one of whose tables a command of unknown database wrote (Redis 7.0's command filter
/// cannot tell the client): the next tick looks for them in every database.
static TABLES_ANYWHERE: Mutex<BTreeSet<Vec<u8>>> = Mutex::new(BTreeSet::new());

/// A table of `queue` may have changed in a database the caller cannot tell.
pub fn table_changed_somewhere(queue: &[u8]) {
    TABLES_ANYWHERE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(queue.to_vec());
    soon(0);
}

/// The timer visits `queue` of `db` at `at` (unix ms; 0: at the next tick), and wakes by then.
pub fn visit_at(db: i32, queue: &[u8], at: i64) {
    watched().visit_at(db, queue, at);
    soon(at);
}

/// The timer visits `queue` of `db` by `at`, unless it would sooner, and wakes by then.
pub fn visit_by(db: i32, queue: &[u8], at: i64) {
    watched().visit_by(db, queue, at);
    soon(at);
}

/// Most databases looked in for a table of unknown database.
const MAX_DBS: i32 = 1024;

/// The queues of [`TABLES_ANYWHERE`], visited in every database that has one of their tables;
/// the caller restores the db.
fn find_tables(ctx: &Context) {
    let queues = std::mem::take(&mut *TABLES_ANYWHERE.lock().unwrap_or_else(|p| p.into_inner()));
    for name in queues {
        let Some(queue) = Queue::parse(&name) else {
            continue;
        };
        let mut db = 0;
        while db < MAX_DBS && select_db(ctx, db) {
            let has = [KeyType::Unique, KeyType::Cron].into_iter().any(|ty| {
                OwnedString::new(ctx, KeyBuf::queue(queue, ty).as_bytes()).is_ok_and(|key| {
                    Key::probe(ctx, &key).is_ok_and(|k| k.holds() != Holds::Nothing)
                })
            });
            if has {
                table_changed(db, &name);
            }
            db += 1;
        }
    }
}

/// Forgets when every queue's repeating jobs are due (their tables are read at the next visit):
/// after a load, a role change, `SWAPDB` or a flush.
pub fn forget_cron_due() {
    watched().unread_tables();
}

/// Number of queues the timer watches (for `INFO emq`).
pub fn watched_queues() -> usize {
    watched().len()
}

/// Number of watched queues whose visit is due and has not happened yet (for `INFO emq`): those
/// written to since the last tick, and more if the timer is behind or writes are paused.
pub fn due_queues() -> usize {
    watched().due_count(now_ms() as i64)
}

/// Starts the timer (module load).
pub fn start(ctx: &Context) {
    RUNNING.store(true, Ordering::SeqCst);
    rearm(ctx);
}

/// Stops the timer and forgets the watched queues (module unload).
pub fn stop(ctx: &Context) {
    RUNNING.store(false, Ordering::SeqCst);
    disarm(ctx);
    watched().clear();
}

/// Stops the timer, if armed, through the module's own context (`MODULE UNLOAD emq` seen by
/// the command filter).
pub fn disarm_for_unload() {
    disarm(&module_ctx());
}

fn disarm(ctx: &Context) {
    ARMED_AT.store(i64::MAX, Ordering::SeqCst);
    let id = TIMER.swap(0, Ordering::SeqCst);
    if id != 0 {
        stop_timer(ctx, id);
    }
}

/// Most the timer sleeps, however far off the next due time: a bound on what a jump of the
/// wall clock (due times are unix ms, the timer's delay is not) can postpone.
const MAX_SLEEP_MS: i64 = 60_000;

/// When the timer should next tick (unix ms), or `None` when nothing is to be waited for: on a
/// replica or while the server loads (a promotion and the end of a load arm it again), with no
/// watched queue.
fn next_tick(ctx: &Context, now: i64) -> Option<i64> {
    if !RUNNING.load(Ordering::SeqCst) {
        return None;
    }
    let flags = Flags::of(ctx);
    if !flags.primary() || flags.loading() {
        return None;
    }
    let waiting = writes_paused()
        || !deferred().is_empty()
        || !TABLES_ANYWHERE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
    if waiting {
        return Some(now);
    }
    let earliest = watched().earliest();
    match super::waiters::poll_at() {
        Some(poll) => Some(earliest.map_or(poll, |at| at.min(poll))),
        None => earliest,
    }
}

/// Arms the timer to tick `delay_ms` from now (at least a tick, at most [`MAX_SLEEP_MS`]).
fn arm_in(ctx: &Context, delay_ms: i64) {
    if !RUNNING.load(Ordering::SeqCst) {
        return;
    }
    let delay = delay_ms.clamp(TICK_MS as i64, MAX_SLEEP_MS);
    TIMER.store(start_timer::<Timer>(ctx, delay as u64), Ordering::SeqCst);
    ARMED_AT.store(now_ms() as i64 + delay, Ordering::SeqCst);
}

/// Arms the timer for `at` (unix ms) unless it is armed to tick by then already.
fn arm_by(ctx: &Context, at: i64) {
    let now = now_ms() as i64;
    let want = at.max(now + TICK_MS as i64);
    if ARMED_AT.load(Ordering::SeqCst) <= want {
        return;
    }
    disarm(ctx);
    arm_in(ctx, want - now);
}

/// Something is due at `at` (unix ms; 0: now): the timer ticks by then. Cheap when it is armed
/// to tick by then already, as it is while the server is busy.
pub fn soon(at: i64) {
    if !RUNNING.load(Ordering::SeqCst) || ARMED_AT.load(Ordering::SeqCst) <= at {
        return;
    }
    let ctx = module_ctx();
    let flags = Flags::of(&ctx);
    if !flags.primary() || flags.loading() {
        // A replica's timer waits for its promotion, a loading server's for the load's end.
        return;
    }
    arm_by(&ctx, at);
}

/// Arms the timer by what is due (the server's cron, the end of a load, a role change): a
/// wake-up that was missed, or that could not be armed then, happens now.
pub fn rearm(ctx: &Context) {
    revisit_on_new_retention();
    if let Some(at) = next_tick(ctx, now_ms() as i64) {
        arm_by(ctx, at);
    }
}

struct Timer;

impl Tick for Timer {
    fn tick(ctx: &Context) {
        TIMER.store(0, Ordering::SeqCst);
        ARMED_AT.store(i64::MAX, Ordering::SeqCst);
        counters::count(&TICKS, 1);
        tick(ctx);
        if TIMER.load(Ordering::SeqCst) == 0 {
            if let Some(at) = next_tick(ctx, now_ms() as i64) {
                arm_in(ctx, at - now_ms() as i64);
            }
        }
    }
}

fn tick(ctx: &Context) {
    let flags = Flags::of(ctx);
    if !flags.primary() || flags.loading() || writes_paused() {
        return;
    }
    let started = Instant::now();
    let now = now_ms() as i64;
    let original = selected_db(ctx);
    wake_deferred(ctx);
    find_tables(ctx);
    for (db, name, at) in super::waiters::poll(ctx, now) {
        watched().visit_by_polled(db, &name, at);
    }
    revisit_on_new_retention();
    'tick: loop {
        let batch = watched().due(now, QUEUES_PER_BATCH);
        if batch.is_empty() {
            break;
        }
        for (db, name) in batch {
            if started.elapsed() >= TICK_BUDGET {
                counters::count(&TICKS_AT_BUDGET, 1);
                break 'tick;
            }
            let visited = match select_db(ctx, db) {
                true => promote(ctx, db, &name, now),
                false => Ok(None),
            };
            match visited {
                Ok(None) => watched().forget(db, &name),
                Ok(Some(next)) => watched().visit_at(db, &name, next),
                // Retried in a second, however often a poll reads the queue's heads.
                Err(e) => {
                    let retry = refused(ctx, db, &name, &e, now);
                    watched().hold_off(db, &name, retry);
                }
            }
        }
    }
    select_db(ctx, original);
}

/// Promotes what is due on one queue, takes a step of its unique table's sweep and fires its
/// due repeating jobs, in one step; when to look at it again (`None`: stop watching it).
fn promote(ctx: &Context, db: i32, name: &[u8], now: i64) -> Result<Option<i64>, EmqError> {
    let Some(queue) = Queue::parse(name) else {
        return Ok(None);
    };
    if cluster::check_stable(queue).is_err() {
        // Keys in flight between nodes: leave them be until the migration settles.
        return Ok(Some(now + RETRY_MIGRATING_MS));
    }
    let known = watched().tables(db, name);
    let sweep_now = known.sweep_at <= now;
    let fire = known.cron_at <= now;
    let ((_moved, next), swept, fired) = with_queue(ctx, queue, Access::ReadWrite, |store| {
        Ok::<_, EmqError>((
            visit(store, now, VISIT_BUDGET)? as (Moved, _),
            match sweep_now {
                true => Some(unique::visit_table(store, known.sweep_cursor, now)?),
                false => None,
            },
            match fire {
                true => Some(cron::fire(store, now)?),
                false => None,
            },
        ))
    })?;
    let mut tables = known;
    if let Some((cursor, again)) = swept {
        tables.sweep_cursor = cursor;
        tables.sweep_at = again.unwrap_or(Tables::NEVER);
    }
    if let Some(next) = fired {
        tables.cron_at = next.unwrap_or(Tables::NEVER);
    }
    watched().update_tables(db, name, |t| *t = tables);
    let later = |at: i64| Some(at).filter(|at| *at != Tables::NEVER);
    Ok([next, later(tables.sweep_at), later(tables.cron_at)]
        .into_iter()
        .flatten()
        .min())
}

/// A visit refused before it moved anything: the queue stays watched and is tried again in
/// [`RETRY_REFUSED_MS`], so its due jobs move once the key is put right. Counted in `INFO emq`
/// and logged, at most once a minute. When to look again.
fn refused(ctx: &Context, db: i32, name: &[u8], error: &EmqError, now: i64) -> i64 {
    counters::count(&VISITS_REFUSED, 1);
    let now_ms = u64::try_from(now).unwrap_or(0);
    if super::once_every(&LAST_REFUSED_WARNING_MS, now_ms, WARN_REFUSED_EVERY_MS) {
        log(
            ctx,
            c"warning",
            &format!(
                "EchoMQ: the timer cannot move the due jobs of queue '{}' (db {db}): {}; \
                 it tries again every second",
                String::from_utf8_lossy(name),
                error.message()
            ),
        );
    }
    now + RETRY_REFUSED_MS
}

/// The dead set's retention the timer last visited queues with, as (ttl, max).
static RETENTION: Mutex<(i64, i64)> = Mutex::new((-1, -1));

/// A changed `emq.dead-ttl-ms` or `emq.dead-max-jobs` has every watched queue visited again, so
/// that dead sets kept under the old settings are trimmed under the new ones.
fn revisit_on_new_retention() {
    let now = (settings::dead_ttl_ms(), settings::dead_max_jobs());
    let mut seen = RETENTION.lock().unwrap_or_else(|p| p.into_inner());
    if *seen != now {
        *seen = now;
        watched().revisit_all();
    }
}

/// Leaves the claimers blocked on `key` (a queue's pending set or turns, in the context's db) waiting until
/// client writes resume, when the timer wakes them again.
pub fn wake_after_pause(ctx: &Context, key: &[u8]) {
    deferred().insert((selected_db(ctx), key.to_vec()));
    soon(0);
}

/// Wakes the claimers left waiting while writes were paused; the caller restores the db.
fn wake_deferred(ctx: &Context) {
    let keys = std::mem::take(&mut *deferred());
    for (db, name) in keys {
        if !select_db(ctx, db) {
            continue;
        }
        if let Ok(key) = OwnedString::new(ctx, &name) {
            signal_ready(ctx, key.as_str());
        }
    }
}
