//! What runs beside commands, as the server calls it: keyspace events, server events, the
//! command filter, the timer, a scan of the keyspace and the `INFO` callback. Each is
//! subscribed for a handler type of the runtime layer, and each trampoline decodes the
//! server's data and calls the handler behind the panic guard.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::time::Duration;

use valkey_module::{raw, CommandFilterCtx, Context, InfoContext};

use super::client::{client_info, select_db, selected_db, ClientInfo};
use super::guard::guard;
use super::propagate::set_own_events;
use super::string::{string_bytes, Str};

// ---- keyspace events ----------------------------------------------------------------------

/// The name of a keyspace event (`zadd`, `del`, ...), read only when asked: most events are
/// told apart by their key alone.
#[derive(Clone, Copy)]
pub struct EventName(*const c_char);

impl EventName {
    /// The first byte of the name.
    pub fn first_byte(self) -> Option<u8> {
        // SAFETY: the server's event name, a C string live for the callback.
        (!self.0.is_null()).then(|| unsafe { *self.0 } as u8)
    }

    pub fn bytes(&self) -> &[u8] {
        match NonNull::new(self.0.cast_mut()) {
            // SAFETY: the server's event name, a C string live for the callback.
            Some(e) => unsafe { CStr::from_ptr(e.as_ptr()) }.to_bytes(),
            None => b"",
        }
    }
}

pub trait KeyspaceEvents {
    fn on_event(ctx: &Context, class: c_int, event: EventName, key: Str<'_>);
}

/// Subscribes `H` to the keyspace events of `classes` on every key.
pub fn subscribe_keyspace<H: KeyspaceEvents>(ctx: &Context, classes: c_int) -> Result<(), String> {
    // The crate has no wrapper for module keyspace subscriptions outside its macro.
    let subscribe =
        unsafe { raw::RedisModule_SubscribeToKeyspaceEvents }.ok_or("no keyspace events API")?;
    // SAFETY: OnLoad context; the callback lives as long as the module.
    let ok = unsafe { subscribe(ctx.ctx, classes, Some(on_keyspace::<H>)) };
    if ok != raw::REDISMODULE_OK as c_int {
        return Err("could not subscribe to keyspace events".into());
    }
    Ok(())
}

/// Has the keyspace events of `classes` that EchoMQ's own writes notify reach `H` directly,
/// without the server: always when `H` is not subscribed to those classes on every key
/// (`subscribed` false), and otherwise while nothing else takes keyspace events.
pub fn route_own_events<H: KeyspaceEvents>(classes: c_int, subscribed: bool) {
    set_own_events(own_event::<H>, classes, subscribed);
}

/// Stops [`route_own_events`] (module unload).
pub fn unroute_own_events() {
    set_own_events(own_event::<NoEvents>, 0, false);
}

fn own_event<H: KeyspaceEvents>(ctx: &Context, class: c_int, event: &CStr, key: Str<'_>) {
    H::on_event(ctx, class, EventName(event.as_ptr()), key);
}

/// Takes no event (what [`unroute_own_events`] leaves).
struct NoEvents;

impl KeyspaceEvents for NoEvents {
    fn on_event(_: &Context, _: c_int, _: EventName, _: Str<'_>) {}
}

extern "C" fn on_keyspace<H: KeyspaceEvents>(
    ctx: *mut raw::RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guard(|| {
        if let Some(key) = NonNull::new(key) {
            // SAFETY: the event's key name, live for this callback.
            let key = unsafe { Str::from_raw(key) };
            H::on_event(&Context::new(ctx), class, EventName(event), key);
        }
    });
    raw::REDISMODULE_OK as c_int
}

// ---- server events ------------------------------------------------------------------------

/// A server event EchoMQ listens to, decoded.
pub enum ServerEvent<'a> {
    /// The server finished loading its data (a restart, a replica's full sync).
    LoadingEnded,
    /// `CONFIG SET` changed these settings.
    ConfigChanged(&'a [&'a CStr]),
    /// The server's cron (`hz` times a second).
    Cron,
    /// This server became a replica, or a primary again.
    RoleChanged,
    /// The server forked a child (a snapshot for a replica's full sync, `BGSAVE`, an AOF
    /// rewrite), in the parent, before anything else runs.
    Forked,
    /// Another module was loaded (`true`) or is being unloaded (`false`), with its name.
    ModuleChanged(bool, &'a str),
    /// `SWAPDB a b`.
    SwapDb(i32, i32),
    /// A database was emptied (`-1`: every database).
    Flushed(i32),
    /// An atomic slot migration (Valkey 9.0) started, ended or exports from here, with the slot
    /// ranges it moves (first and last, inclusive, as the server gives them).
    SlotMigration(MigrationEvent, &'a [(i64, i64)]),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationEvent {
    ImportStarted,
    ExportStarted,
    ImportAborted,
    ImportCompleted,
    /// An export ending, and sub-events EchoMQ does not act on.
    Other,
}

pub trait ServerEvents {
    fn on_event(ctx: &Context, event: ServerEvent<'_>);
}

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` (Valkey 9.0), which the crate does not know.
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;

/// Subscribes `H` to the server events above (atomic slot migrations only where the server
/// has them, forks only when `forks`).
pub fn subscribe_server_events<H: ServerEvents>(
    ctx: &Context,
    atomic_migrations: bool,
    forks: bool,
) {
    let events = [
        raw::REDISMODULE_EVENT_LOADING,
        raw::REDISMODULE_EVENT_CONFIG,
        raw::REDISMODULE_EVENT_CRON_LOOP,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_SWAPDB,
        raw::REDISMODULE_EVENT_FLUSHDB,
        raw::REDISMODULE_EVENT_MODULE_CHANGE,
    ];
    let atomic = atomic_migrations.then_some(EVENT_ATOMIC_SLOT_MIGRATION);
    let fork = forks.then_some(raw::REDISMODULE_EVENT_FORK_CHILD);
    for id in events.into_iter().chain(atomic).chain(fork) {
        // The crate's `register_server_events` keeps neither the databases of FLUSHDB and
        // SWAPDB nor the slot-migration event; its plain subscription serves.
        let _ = raw::subscribe_to_server_event(
            ctx.ctx,
            raw::RedisModuleEvent { id, dataver: 1 },
            Some(on_server::<H>),
        );
    }
}

/// `ValkeyModuleSlotRange`: first and last slot, inclusive.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`, the data of a migration event.
#[repr(C)]
struct MigrationInfo {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

unsafe extern "C" fn on_server<H: ServerEvents>(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard(|| {
        let ctx = Context::new(ctx);
        match event.id {
            raw::REDISMODULE_EVENT_LOADING
                if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED =>
            {
                H::on_event(&ctx, ServerEvent::LoadingEnded)
            }
            raw::REDISMODULE_EVENT_CONFIG
                if subevent == raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE && !data.is_null() =>
            {
                // SAFETY: for this event and subevent the server passes its config-change
                // record, whose `num_changes` names are live C strings during the call.
                let change = unsafe { &*(data as *const raw::RedisModuleConfigChange) };
                let names: Vec<&CStr> = (0..change.num_changes as usize)
                    .filter_map(|i| {
                        // SAFETY: `i` is within `num_changes`.
                        let name = unsafe { *change.config_names.add(i) };
                        // SAFETY: a live C string, as above.
                        (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
                    })
                    .collect();
                H::on_event(&ctx, ServerEvent::ConfigChanged(&names))
            }
            raw::REDISMODULE_EVENT_CRON_LOOP => H::on_event(&ctx, ServerEvent::Cron),
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => {
                H::on_event(&ctx, ServerEvent::RoleChanged)
            }
            raw::REDISMODULE_EVENT_FORK_CHILD
                if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN =>
            {
                H::on_event(&ctx, ServerEvent::Forked)
            }
            // The server tells a module of every module's load and unload but its own.
            raw::REDISMODULE_EVENT_MODULE_CHANGE if !data.is_null() => {
                // SAFETY: for this event the server passes the module's change record, whose
                // name is a live C string during the call.
                let change = unsafe { &*data.cast::<raw::RedisModuleModuleChange>() };
                let name = match change.module_name.is_null() {
                    true => "",
                    // SAFETY: a live C string, as above.
                    false => unsafe { CStr::from_ptr(change.module_name) }
                        .to_str()
                        .unwrap_or(""),
                };
                let loaded = subevent == raw::REDISMODULE_SUBEVENT_MODULE_LOADED;
                H::on_event(&ctx, ServerEvent::ModuleChanged(loaded, name))
            }
            raw::REDISMODULE_EVENT_SWAPDB if !data.is_null() => {
                // SAFETY: for this event the server passes its swap description.
                let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
                H::on_event(
                    &ctx,
                    ServerEvent::SwapDb(info.dbnum_first, info.dbnum_second),
                )
            }
            raw::REDISMODULE_EVENT_FLUSHDB
                if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END && !data.is_null() =>
            {
                // SAFETY: for this event the server passes its flush description.
                let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
                H::on_event(&ctx, ServerEvent::Flushed(info.dbnum))
            }
            EVENT_ATOMIC_SLOT_MIGRATION => {
                let kind = match subevent {
                    0 => MigrationEvent::ImportStarted,
                    1 => MigrationEvent::ExportStarted,
                    2 => MigrationEvent::ImportAborted,
                    4 => MigrationEvent::ImportCompleted,
                    _ => MigrationEvent::Other,
                };
                let info = data.cast::<MigrationInfo>();
                let ranges: Vec<(i64, i64)> = if info.is_null() {
                    Vec::new()
                } else {
                    // SAFETY: the server passes a live migration info (version 1 and later
                    // share its first fields) with `num_slot_ranges` ranges.
                    unsafe {
                        let info = &*info;
                        if info.version < 1 || info.slot_ranges.is_null() {
                            Vec::new()
                        } else {
                            std::slice::from_raw_parts(
                                info.slot_ranges,
                                info.num_slot_ranges as usize,
                            )
                            .iter()
                            .map(|r| (i64::from(r.start), i64::from(r.end)))
                            .collect()
                        }
                    }
                };
                H::on_event(&ctx, ServerEvent::SlotMigration(kind, &ranges))
            }
            _ => {}
        }
    });
}

// ---- the command filter -------------------------------------------------------------------

/// A command about to run, as the command filter sees it.
pub struct FilterArgs {
    args: CommandFilterCtx,
    raw: *mut raw::RedisModuleCommandFilterCtx,
}

impl FilterArgs {
    /// The command's name as the client sent it.
    pub fn first(&self) -> &[u8] {
        string_bytes(self.args.arg_get(0))
    }

    /// Word `i` of the command (0 is its name), if it has one.
    pub fn word(&self, i: usize) -> Option<&[u8]> {
        let i = c_int::try_from(i).ok()?;
        (i < self.args.args_count()).then(|| string_bytes(self.args.arg_get(i)))
    }

    /// The command's first `max` words, name included.
    pub fn words(&self, max: usize) -> Vec<&[u8]> {
        let n = usize::try_from(self.args.args_count())
            .unwrap_or(0)
            .min(max);
        (0..n as c_int)
            .map(|i| string_bytes(self.args.arg_get(i)))
            .collect()
    }

    /// Argument `i` (0 is the command's name), if the command has that many.
    pub fn arg(&self, i: usize) -> Option<&[u8]> {
        let n = usize::try_from(self.args.args_count()).unwrap_or(0);
        let i = c_int::try_from(i).ok().filter(|_| i < n)?;
        Some(string_bytes(self.args.arg_get(i)))
    }

    /// The client that sent it, as the server knows it.
    pub fn client(&self) -> Option<ClientInfo> {
        // The crate offers this only for Redis 7.2 and later; Redis 7.0 lacks it.
        let client_of = unsafe { raw::RedisModule_CommandFilterGetClientId }?;
        // SAFETY: the filter context is live for this call.
        client_info(unsafe { client_of(self.raw) })
    }
}

pub trait CommandFilter {
    fn on_command(args: &FilterArgs);
}

/// Registers `H` to see every command (but the module's own) before it runs.
pub fn register_filter<H: CommandFilter>(ctx: &Context) -> Result<(), String> {
    if unsafe { raw::RedisModule_RegisterCommandFilter }.is_none() {
        return Err("no command filter API".into());
    }
    let filter = ctx.register_command_filter(on_command::<H>, raw::REDISMODULE_CMDFILTER_NOSELF);
    if filter.is_null() {
        return Err("could not register the command filter".into());
    }
    Ok(())
}

extern "C" fn on_command<H: CommandFilter>(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    guard(|| {
        H::on_command(&FilterArgs {
            args: CommandFilterCtx::new(fctx),
            raw: fctx,
        })
    });
}

// ---- the timer ----------------------------------------------------------------------------

pub trait Tick {
    fn tick(ctx: &Context);
}

/// Arms a one-shot timer that calls `H::tick` in `ms`; its id.
pub fn start_timer<H: Tick>(ctx: &Context, ms: u64) -> u64 {
    // The callback and its data are zero-sized, so the crate boxes nothing, and the `()` that
    // `stop_timer` takes back is the whole of it.
    ctx.create_timer(
        Duration::from_millis(ms),
        |ctx: &Context, ()| guard(|| H::tick(ctx)),
        (),
    )
}

/// Stops a timer this module armed.
pub fn stop_timer(ctx: &Context, id: u64) {
    if !ctx.ctx.is_null() {
        let _ = ctx.stop_timer::<()>(id);
    }
}

// ---- a scan of the keyspace ---------------------------------------------------------------

/// Calls `visit` with every key's database and name, in every database (the client's own
/// database selected again after).
pub fn scan_all_dbs(ctx: &Context, mut visit: impl FnMut(i32, &[u8])) {
    scan_all_dbs_keys(ctx, |db, key| visit(db, key.name()));
}

/// A key as a scan of the keyspace meets it: its name, and its expiry read on demand.
pub struct ScannedKey<'a> {
    name: &'a [u8],
    key: *mut raw::RedisModuleKey,
}

impl ScannedKey<'_> {
    pub fn name(&self) -> &[u8] {
        self.name
    }

    /// When the key expires (unix ms), if it has a time to live.
    pub fn expires_at(&self) -> Option<i64> {
        let abs_expire = unsafe { raw::RedisModule_GetAbsExpire }?;
        if self.key.is_null() {
            return None;
        }
        // SAFETY: the scan's key handle, open for reading during the callback.
        let at = unsafe { abs_expire(self.key) };
        (at >= 0).then_some(at)
    }
}

/// Calls `visit` with every key's database and the key (its name and expiry), in every
/// database (the client's own database selected again after).
pub fn scan_all_dbs_keys(ctx: &Context, mut visit: impl FnMut(i32, &ScannedKey<'_>)) {
    // The crate's `KeysCursor` scans only the selected database and retains every key name.
    let (Some(create), Some(scan), Some(destroy)) = (unsafe {
        (
            raw::RedisModule_ScanCursorCreate,
            raw::RedisModule_Scan,
            raw::RedisModule_ScanCursorDestroy,
        )
    }) else {
        return;
    };
    let original = selected_db(ctx);
    let mut db = 0;
    while select_db(ctx, db) {
        let mut each = |key: &ScannedKey<'_>| visit(db, key);
        let mut f: &mut dyn FnMut(&ScannedKey<'_>) = &mut each;
        let privdata = (&raw mut f).cast::<c_void>();
        // SAFETY: the cursor is created, used and destroyed here, on the main thread;
        // `privdata` points to `f`, alive for the whole scan.
        unsafe {
            let cursor = create();
            while scan(ctx.ctx, cursor, Some(on_scanned_key), privdata) != 0 {}
            destroy(cursor);
        }
        db += 1;
    }
    select_db(ctx, original);
}

unsafe extern "C" fn on_scanned_key(
    _ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    k: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) {
    guard(|| {
        // SAFETY: `privdata` is the `&mut dyn FnMut` of `scan_all_dbs_keys`, alive for the
        // scan.
        let f = unsafe { &mut *privdata.cast::<&mut dyn FnMut(&ScannedKey<'_>)>() };
        f(&ScannedKey {
            name: string_bytes(key),
            key: k,
        });
    });
}

// ---- INFO ---------------------------------------------------------------------------------

pub trait InfoSection {
    fn info(ctx: &InfoContext);
}

/// Registers `H` as the module's `INFO` section.
pub fn register_info<H: InfoSection>(ctx: &Context) {
    if unsafe { raw::RedisModule_RegisterInfoFunc }.is_some() {
        raw::register_info_function(ctx.ctx, Some(on_info::<H>));
    }
}

extern "C" fn on_info<H: InfoSection>(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    guard(|| H::info(&InfoContext::new(ctx)));
}
