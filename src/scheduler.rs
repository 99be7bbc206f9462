//! Moves due jobs and expired leases back to `pending` without any client process.
//!
//! - A module timer ticks every [`TICK_MS`] on primaries only, and promotes what is due on
//!   the queues it watches, starting no visit after [`TICK_BUDGET`] into a tick.
//! - The watched queues (those with scheduled or active jobs) are learned from keyspace
//!   events on their `schedule` and `active` sets — whoever wrote them: this module, a Lua
//!   speaker, the replication stream or a slot import (`RESTORE`) — and rebuilt by one scan
//!   after the module loads and after the server loads its data. The tick never scans the
//!   keyspace.
//! - The server refuses `MODULE UNLOAD` while a module timer is armed, so a command filter
//!   stops the timer when `MODULE UNLOAD emq` arrives, and the server's cron re-arms it if the
//!   module is still loaded afterwards (an unload refused for another reason).
//! - A write to a `pending` set signals the key ready, which wakes blocked `EMQ.CLAIM`
//!   callers: a ZADD to an existing zset does not do that by itself.

use std::collections::BTreeSet;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::catch_unwind;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use valkey_module::{raw, Context};

use crate::client_db;
use crate::cluster;
use crate::effects;
use crate::error::EmqError;
use crate::eviction;
use crate::grammar::{decode, Decoded, KeyType, Queue};
use crate::lifecycle::{self, check_row_types, Due, Moved, QueueKeys, Sets};
use crate::metrics;
use crate::server::{self, string_bytes};
use crate::store::{self, Holds, Key, OwnedString, Str};
use crate::watchlist::Watchlist;

/// How often the timer looks for due work, in ms. A job due at T is claimable by T + a tick.
pub const TICK_MS: i64 = 10;
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
/// which a visit would find nothing due (0: visit at the next tick). Any write to the queue's
/// `schedule` or `active` set resets it to 0, so an earlier due time is never missed.
static WATCHED: Mutex<Watchlist> = Mutex::new(Watchlist::new());
/// Pending sets, as (db, key name), whose blocked claimers were woken while client writes were
/// paused and left waiting; the first tick after the pause wakes them again.
static DEFERRED: Mutex<BTreeSet<(i32, Vec<u8>)>> = Mutex::new(BTreeSet::new());
static TIMER: AtomicU64 = AtomicU64::new(0);
static RUNNING: AtomicBool = AtomicBool::new(false);
/// A context owned by this module, for stopping the timer from the command filter.
static MODULE_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

fn watched() -> std::sync::MutexGuard<'static, Watchlist> {
    WATCHED.lock().unwrap_or_else(|p| p.into_inner())
}

fn deferred() -> std::sync::MutexGuard<'static, BTreeSet<(i32, Vec<u8>)>> {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Number of queues the timer watches (for `INFO emq`).
pub fn watched_queues() -> usize {
    watched().len()
}

/// Number of watched queues whose visit is due and has not happened yet (for `INFO emq`): those
/// written to since the last tick, and more if the timer is behind or writes are paused.
pub fn due_queues() -> usize {
    watched().due_count(server::now_ms() as i64)
}

/// Events that take a key away from where it was: the queue may have nothing left to watch.
const GONE: [&[u8]; 5] = [b"del", b"expired", b"evicted", b"rename_from", b"move_from"];

/// Learns from one event on one key: a write to a `schedule` or `active` set makes its queue
/// watched, and the removal of the last of the two unwatches it (a replica, which never
/// visits its queues, would otherwise keep every queue it ever saw); any write to a `pending`
/// set wakes the claimers blocked on it.
fn observe(ctx: *mut raw::RedisModuleCtx, event: *const c_char, key: *mut raw::RedisModuleString) {
    let Some(key) = NonNull::new(key) else {
        return;
    };
    // SAFETY: the event's key name, live for this callback.
    let key = unsafe { Str::from_raw(key) };
    let name = key.bytes();
    if !name.starts_with(b"emq:{") {
        return;
    }
    // The hot case, every enqueue: no need to read the rest of the name to wake claimers
    // (a name outside the grammar has none blocked on it).
    if name.ends_with(KeyType::Pending.key_suffix()) {
        store::signal_ready(&Context::new(ctx), key);
        return;
    }
    if let Some(Decoded::Queue {
        queue,
        ty: KeyType::Schedule | KeyType::Active,
        ..
    }) = decode(name)
    {
        let db = store::selected_db(ctx);
        // The event's name is read only here, for a queue's timed set: every other key the
        // server reports (any zset or generic write on the server) costs no more than above.
        let event = match NonNull::new(event.cast_mut()) {
            // SAFETY: the server's event name, a C string live for this callback.
            Some(e) => unsafe { std::ffi::CStr::from_ptr(e.as_ptr()) }.to_bytes(),
            None => b"",
        };
        if GONE.contains(&event) && !has_timed_sets(&Context::new(ctx), queue) {
            watched().forget(db, queue.as_bytes());
        } else {
            watched().visit_at(db, queue.as_bytes(), 0);
        }
    }
}

/// Whether the queue has a `schedule` or an `active` set in the context's database (when
/// unsure, that it has).
fn has_timed_sets(ctx: &Context, queue: Queue<'_>) -> bool {
    let Ok(keys) = QueueKeys::new(ctx, queue) else {
        return true;
    };
    let exists = |name| Key::probe(ctx, name).map_or(true, |k| k.holds() != Holds::Nothing);
    exists(&keys.schedule) || exists(&keys.active)
}

unsafe extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    let _ = catch_unwind(|| {
        observe(ctx, event, key);
        client_db::after_event(ctx, class, event);
    });
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_scanned_key(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    _k: *mut raw::RedisModuleKey,
    _privdata: *mut c_void,
) {
    let _ = catch_unwind(|| {
        let name = string_bytes(key);
        if let Some(Decoded::Queue {
            queue,
            ty: KeyType::Schedule | KeyType::Active,
            ..
        }) = decode(name)
        {
            watched().visit_at(store::selected_db(ctx), queue.as_bytes(), 0);
        }
    });
}

/// Rebuilds the watched set from the keyspace: once at load and after the server loads data.
pub fn rebuild(ctx: &Context) {
    let (Some(create), Some(scan), Some(destroy)) = (unsafe {
        (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_Scan,
            raw::RedisModule_ScanCursorDestroy,
        )
    }) else {
        return;
    };
    let original = store::selected_db(ctx.ctx);
    let mut db = 0;
    while store::select_db(ctx.ctx, db) {
        // SAFETY: the cursor is created, used and destroyed here, on the main thread.
        unsafe {
            let cursor = create();
            while scan(ctx.ctx, cursor, Some(on_scanned_key), std::ptr::null_mut()) != 0 {}
            destroy(cursor);
        }
        db += 1;
    }
    store::select_db(ctx.ctx, original);
}

unsafe extern "C" fn on_loading(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
        let _ = catch_unwind(|| rebuild(&Context::new(ctx)));
    }
}

/// Subscribes to the events, rebuilds the watched set and starts the timer.
pub fn start(ctx: &Context) -> Result<(), String> {
    let subscribe =
        unsafe { raw::RedisModule_SubscribeToKeyspaceEvents }.ok_or("no keyspace events API")?;
    // SAFETY: OnLoad context; the callback lives as long as the module.
    let ok = unsafe {
        subscribe(
            ctx.ctx,
            store::NOTIFY_ZSET
                | store::NOTIFY_GENERIC
                | store::NOTIFY_EXPIRED
                | store::NOTIFY_EVICTED,
            Some(on_keyspace_event),
        )
    };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("could not subscribe to keyspace events".into());
    }
    if let Some(server_event) = unsafe { raw::RedisModule_SubscribeToServerEvent } {
        let events: [(u64, raw::RedisModuleEventCallback); 6] = [
            (raw::REDISMODULE_EVENT_LOADING, Some(on_loading)),
            (
                raw::REDISMODULE_EVENT_CONFIG,
                Some(eviction::on_config_change),
            ),
            (raw::REDISMODULE_EVENT_CRON_LOOP, Some(on_cron)),
            (
                raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
                Some(on_role_change),
            ),
            (raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb)),
            (raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush)),
        ];
        let atomic = cluster::handles_atomic_migration().then_some((
            cluster::EVENT_ATOMIC_SLOT_MIGRATION,
            Some(cluster::on_atomic_migration as _),
        ));
        for (id, callback) in events.into_iter().chain(atomic) {
            // SAFETY: OnLoad context; the callbacks live as long as the module.
            unsafe { server_event(ctx.ctx, raw::RedisModuleEvent { id, dataver: 1 }, callback) };
        }
    }
    if let Some(detached) = unsafe { raw::RedisModule_GetDetachedThreadSafeContext } {
        // SAFETY: OnLoad context; freed in `stop`.
        MODULE_CTX.store(unsafe { detached(ctx.ctx) }, Ordering::SeqCst);
    }
    let filter =
        unsafe { raw::RedisModule_RegisterCommandFilter }.ok_or("no command filter API")?;
    // SAFETY: OnLoad context; the server unregisters the filter on unload.
    let registered = unsafe {
        filter(
            ctx.ctx,
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    if registered.is_null() {
        return Err("could not register the unload filter".into());
    }
    rebuild(ctx);
    RUNNING.store(true, Ordering::SeqCst);
    arm(ctx.ctx);
    Ok(())
}

/// A context of this module for code that runs without one (the command filter), or null
/// before load.
pub(crate) fn module_ctx() -> *mut raw::RedisModuleCtx {
    MODULE_CTX.load(Ordering::SeqCst)
}

/// Stops the timer, if armed, through a context of this module.
fn disarm(ctx: *mut raw::RedisModuleCtx) {
    let id = TIMER.swap(0, Ordering::SeqCst);
    if id != 0 && !ctx.is_null() {
        if let Some(stop) = unsafe { raw::RedisModule_StopTimer } {
            // SAFETY: a timer this module created; its data pointer is unused.
            unsafe { stop(ctx, id, std::ptr::null_mut()) };
        }
    }
}

/// Stops the timer and forgets the watched queues (module unload).
pub fn stop(ctx: &Context) {
    RUNNING.store(false, Ordering::SeqCst);
    disarm(ctx.ctx);
    watched().clear();
    let detached = MODULE_CTX.swap(std::ptr::null_mut(), Ordering::SeqCst);
    if let (false, Some(free)) = (detached.is_null(), unsafe {
        raw::RedisModule_FreeThreadSafeContext
    }) {
        // SAFETY: created in `start`, freed once.
        unsafe { free(detached) };
    }
}

/// Every command passes here before it runs, and the first word tells the few that matter
/// apart without allocating: `MODULE UNLOAD emq` (disarm the timer so the unload can happen),
/// `CLUSTER SETSLOT ...` (slot migrations, see `cluster`), and those after which replicas
/// or the AOF may start receiving writes (see `effects`).
fn on_any_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let Some(arg) = (unsafe { raw::RedisModule_CommandFilterArgGet }) else {
        return;
    };
    // SAFETY: the filter context is live for this call.
    let first = string_bytes(unsafe { arg(fctx, 0) });
    effects::observe_command(first);
    client_db::observe_command(fctx, first);
    if first.eq_ignore_ascii_case(b"MODULE") {
        let args = cluster::filter_args(fctx);
        if args.len() == 3 && args[1].eq_ignore_ascii_case(b"UNLOAD") && args[2] == b"emq" {
            disarm(MODULE_CTX.load(Ordering::SeqCst));
        }
    } else if first.eq_ignore_ascii_case(b"CLUSTER") {
        cluster::observe_command(&cluster::filter_args(fctx));
    }
}

unsafe extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let _ = catch_unwind(|| on_any_command(fctx));
}

unsafe extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    let _ = catch_unwind(|| {
        if TIMER.load(Ordering::SeqCst) == 0 {
            arm(ctx);
        }
        let context = Context::new(ctx);
        let now = server::now_ms();
        // The migrations first: the probe reads whether one exports from here.
        cluster::reconcile(&context, now);
        effects::probe(&context, now);
    });
}

unsafe extern "C" fn on_role_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    effects::role_changed();
}

unsafe extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    let _ = catch_unwind(|| {
        if data.is_null() {
            return;
        }
        // SAFETY: for this event the server passes its swap description, valid for the call.
        let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
        // `SWAPDB a b` exchanges the two databases' contents (no keyspace event says so).
        watched().swap_dbs(info.dbnum_first, info.dbnum_second);
    });
}

/// `FLUSHDB`, `FLUSHALL`, or a replica emptying its data for a full sync: no keyspace event
/// names the keys, and the queues of an emptied database have nothing left to visit.
unsafe extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = catch_unwind(|| {
        if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END || data.is_null() {
            return;
        }
        // SAFETY: for this event the server passes its flush description, valid for the call.
        let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
        watched().forget_db(info.dbnum);
    });
}

fn arm(ctx: *mut raw::RedisModuleCtx) {
    if !RUNNING.load(Ordering::SeqCst) {
        return;
    }
    if let Some(create) = unsafe { raw::RedisModule_CreateTimer } {
        // SAFETY: live context; the callback lives as long as the module (stopped on unload).
        let id = unsafe { create(ctx, TICK_MS, Some(on_tick), std::ptr::null_mut()) };
        TIMER.store(id, Ordering::SeqCst);
    }
}

unsafe extern "C" fn on_tick(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    TIMER.store(0, Ordering::SeqCst);
    let _ = catch_unwind(|| tick(&Context::new(ctx)));
    arm(ctx);
}

/// What one visit did and found.
struct Visit {
    /// Jobs moved to `pending` and to `dead`.
    moved: Moved,
    /// When to look again (unix ms); `None`: nothing scheduled or active any more, so stop
    /// watching the queue.
    next: Option<i64>,
}

impl Visit {
    const FORGET: Visit = Visit {
        moved: Moved {
            to_pending: 0,
            buried: 0,
        },
        next: None,
    };

    /// Nothing moved; look again at `at` (unix ms).
    fn later(at: i64) -> Visit {
        Visit {
            moved: Moved::default(),
            next: Some(at),
        }
    }
}

fn tick(ctx: &Context) {
    let flags = store::context_flags(ctx);
    let primary = flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0;
    let loading = flags & raw::REDISMODULE_CTX_FLAGS_LOADING != 0;
    if !primary || loading || writes_paused() {
        return;
    }
    let started = Instant::now();
    let now = server::now_ms() as i64;
    let original = store::selected_db(ctx.ctx);
    wake_deferred(ctx);
    'tick: loop {
        let batch = watched().due(now, QUEUES_PER_BATCH);
        if batch.is_empty() {
            break;
        }
        for (db, name) in batch {
            if started.elapsed() >= TICK_BUDGET {
                metrics::count(&metrics::TICKS_AT_BUDGET, 1);
                break 'tick;
            }
            let visit = if store::select_db(ctx.ctx, db) {
                promote(ctx, &name, now).unwrap_or_else(|e| refused(ctx, db, &name, &e, now))
            } else {
                Visit::FORGET
            };
            metrics::count(&metrics::PROMOTED, visit.moved.to_pending as u64);
            metrics::count(&metrics::DEAD, visit.moved.buried as u64);
            match visit.next {
                None => watched().forget(db, &name),
                Some(next) => watched().visit_at(db, &name, next),
            }
        }
    }
    store::select_db(ctx.ctx, original);
}

/// A visit refused before it moved anything: the queue stays watched and is tried again in
/// [`RETRY_REFUSED_MS`], so its due jobs move once the key is put right. Counted in `INFO emq`
/// and logged, at most once a minute.
fn refused(ctx: &Context, db: i32, name: &[u8], error: &EmqError, now: i64) -> Visit {
    metrics::count(&metrics::VISITS_REFUSED, 1);
    let now_ms = u64::try_from(now).unwrap_or(0);
    if server::once_every(&LAST_REFUSED_WARNING_MS, now_ms, WARN_REFUSED_EVERY_MS) {
        server::log(
            ctx.ctx,
            c"warning",
            &format!(
                "EchoMQ: the timer cannot move the due jobs of queue '{}' (db {db}): {}; \
                 it tries again every second",
                String::from_utf8_lossy(name),
                error.message()
            ),
        );
    }
    Visit::later(now + RETRY_REFUSED_MS)
}

/// Whether client writes are paused (`CLIENT PAUSE ... WRITE`, or a failover waiting for its
/// replica). Outside a client's own command nothing may be propagated then: the server stops
/// on its own assertion, where it would postpone a native command.
pub fn writes_paused() -> bool {
    match unsafe { raw::RedisModule_AvoidReplicaTraffic } {
        // SAFETY: a plain flag read.
        Some(f) => (unsafe { f() }) != 0,
        None => false,
    }
}

/// Leaves the claimers blocked on the pending set `key` (in the context's db) waiting until
/// client writes resume, when the timer wakes them again.
pub fn wake_after_pause(ctx: &Context, key: &[u8]) {
    deferred().insert((store::selected_db(ctx.ctx), key.to_vec()));
}

/// Wakes the claimers left waiting while writes were paused; the caller restores the db.
fn wake_deferred(ctx: &Context) {
    let keys = std::mem::take(&mut *deferred());
    for (db, name) in keys {
        if !store::select_db(ctx.ctx, db) {
            continue;
        }
        if let Ok(key) = OwnedString::new(ctx, &name) {
            store::signal_ready(ctx, key.as_str());
        }
    }
}

/// Promotes what is due on one queue and says when to look again.
fn promote(ctx: &Context, name: &[u8], now: i64) -> Result<Visit, EmqError> {
    let Some(queue) = Queue::parse(name) else {
        return Ok(Visit::FORGET);
    };
    if cluster::check_stable(queue).is_err() {
        // Keys in flight between nodes: leave them be until the migration settles.
        return Ok(Visit::later(now + RETRY_MIGRATING_MS));
    }
    let keys = QueueKeys::new(ctx, queue)?;
    let sets = Sets::open(ctx, &keys)?;
    let due = Due::find(ctx, queue, &sets, now, VISIT_BUDGET)?;
    let rows: Vec<&OwnedString> = due.rows().collect();
    check_row_types(ctx, &rows)?;
    let moved = due.promote(ctx, &sets, now)?;
    let next = if due.is_full(VISIT_BUDGET) {
        Some(now) // more was due than one visit moves
    } else {
        lifecycle::next_due(&sets)?
    };
    Ok(Visit { moved, next })
}
