//! How EchoMQ's writes reach the rest of the server: keyspace events, replication by effect
//! (through the effects gate), the change counter, and waking blocked clients.
//!
//! The gate (see `runtime::effects` for when it opens and closes): while it is open, every
//! effect goes to `RM_Replicate`; while it is closed, an effect goes there only when the AOF
//! is on or the write happens outside a command (a timer tick), and otherwise only counts as
//! a change for the server's save points.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use std::sync::RwLock;

use valkey_module::{raw, Context};

use crate::protocol::EmqError;

use super::client::Flags;
use super::string::{OwnedString, Str};

/// Fires a keyspace event as the native command would. When nothing but EchoMQ takes keyspace
/// events (see [`set_others_listen`]), the server is not called: the event reaches EchoMQ's
/// own handler directly, which is all the server would do with it.
pub fn notify(ctx: &Context, class: c_int, event: &CStr, key: &OwnedString) {
    let own = class & OWN_CLASSES.load(Ordering::Relaxed) != 0;
    if OTHERS_LISTEN.load(Ordering::Relaxed) {
        if let Some(f) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
            // SAFETY: live context and key name.
            unsafe { f(ctx.ctx, class, event.as_ptr(), key.as_ptr()) };
        }
        // EchoMQ's subscription on every key took it from the server.
        if SUBSCRIBED.load(Ordering::Relaxed) {
            return;
        }
    }
    if own {
        if let Ok(handler) = OWN.read() {
            (*handler)(ctx, class, event, key.as_str());
        }
    }
}

/// What EchoMQ's own notifications of some classes reach directly, when the server does not
/// bring them (see `events::route_own_events`).
pub type OwnEvents = fn(&Context, c_int, &CStr, Str<'_>);
static OWN: RwLock<OwnEvents> = RwLock::new(no_event);
/// The classes of EchoMQ's own events that reach [`OWN`] (0: none).
static OWN_CLASSES: AtomicI32 = AtomicI32::new(0);
/// Whether EchoMQ is subscribed to the [`OWN_CLASSES`] on every key, so that a call of the
/// server's notification brings them to it.
static SUBSCRIBED: AtomicBool = AtomicBool::new(false);
/// Whether anything but EchoMQ may take a keyspace event: another module, or clients through
/// the channels of `notify-keyspace-events`. Until told otherwise, something may.
static OTHERS_LISTEN: AtomicBool = AtomicBool::new(true);

fn no_event(_: &Context, _: c_int, _: &CStr, _: Str<'_>) {}

/// Has EchoMQ's own events of `classes` reach `handler` (0: none); `subscribed`: EchoMQ's
/// subscription on every key takes those classes from the server.
pub fn set_own_events(handler: OwnEvents, classes: c_int, subscribed: bool) {
    if let Ok(mut own) = OWN.write() {
        *own = handler;
    }
    OWN_CLASSES.store(classes, Ordering::Relaxed);
    SUBSCRIBED.store(subscribed, Ordering::Relaxed);
}

/// Says whether anything but EchoMQ may take keyspace events; while nothing does, EchoMQ's
/// writes notify only EchoMQ, without the server.
pub fn set_others_listen(listen: bool) {
    OTHERS_LISTEN.store(listen, Ordering::Relaxed);
}

pub fn others_listen() -> bool {
    OTHERS_LISTEN.load(Ordering::Relaxed)
}

pub const NOTIFY_HASH: c_int = raw::REDISMODULE_NOTIFY_HASH;
pub const NOTIFY_ZSET: c_int = raw::REDISMODULE_NOTIFY_ZSET;
pub const NOTIFY_GENERIC: c_int = raw::REDISMODULE_NOTIFY_GENERIC;
pub const NOTIFY_EXPIRED: c_int = raw::REDISMODULE_NOTIFY_EXPIRED;
pub const NOTIFY_EVICTED: c_int = raw::REDISMODULE_NOTIFY_EVICTED;

/// Replicates `cmd args...` to replicas and the AOF. Several calls within one command (or
/// timer tick) reach them as one MULTI/EXEC.
fn replicate(ctx: &Context, cmd: &CStr, args: &[Str<'_>]) {
    let Some(rep) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let (c, a) = (ctx.ctx, cmd.as_ptr());
    let p = |i: usize| args[i].as_ptr();
    // The effects of single jobs (up to HSET's seven arguments) go as "s" arguments: the "v"
    // form costs the server an extra argument-vector reallocation per call.
    // SAFETY (each call): the format has one "s" per string argument that follows.
    unsafe {
        match args.len() {
            1 => rep(c, a, c"s".as_ptr(), p(0)),
            2 => rep(c, a, c"ss".as_ptr(), p(0), p(1)),
            3 => rep(c, a, c"sss".as_ptr(), p(0), p(1), p(2)),
            5 => rep(c, a, c"sssss".as_ptr(), p(0), p(1), p(2), p(3), p(4)),
            7 => rep(
                c,
                a,
                c"sssssss".as_ptr(),
                p(0),
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
            ),
            _ => {
                let mut argv: Vec<*mut raw::RedisModuleString> =
                    args.iter().map(|s| s.as_ptr()).collect();
                // SAFETY: format "v" takes an array of strings and its length.
                rep(c, a, c"v".as_ptr(), argv.as_mut_ptr(), argv.len())
            }
        };
    }
}

/// Counts one change toward the server's save points (`server.dirty`), as a replicated
/// effect would, through `RM_ReplicateVerbatim`. Only for when the server propagates nothing
/// (see `effects`): the server then drops the call before propagating anything.
fn count_change(ctx: &Context) {
    ctx.replicate_verbatim();
}

/// Wakes clients blocked on `key` (a ZADD to an existing zset does not do it by itself).
pub fn signal_ready(ctx: &Context, key: Str<'_>) {
    if let Some(f) = unsafe { raw::RedisModule_SignalKeyAsReady } {
        // SAFETY: live context and key name.
        unsafe { f(ctx.ctx, key.as_ptr()) };
    }
}

/// Whether effects go to `RM_Replicate` whatever the AOF says.
static OPEN: AtomicBool = AtomicBool::new(true);
/// The AOF state as read by the running command: a command cannot turn AOF on while it runs,
/// so one read serves all its effects (a batch has one per job). `OUTSIDE` between commands,
/// and after a command nested in another (through a keyspace event) finishes: effects then
/// replicate whatever the gate says.
static AOF_MEMO: AtomicU8 = AtomicU8::new(OUTSIDE);
const OUTSIDE: u8 = 0;
const UNREAD: u8 = 1;
const AOF_ON: u8 = 2;
const AOF_OFF: u8 = 3;

/// Replicates `cmd args...` as an effect when anything can receive it (several effects of
/// one command reach replicas and the AOF as one MULTI/EXEC); otherwise counts the change.
pub fn emit(ctx: &Context, cmd: &CStr, args: &[Str<'_>]) {
    WROTE.store(true, Ordering::Relaxed);
    if propagating(ctx) {
        replicate(ctx, cmd, args);
    } else {
        count_change(ctx);
    }
}

/// As [`emit`], for the effect `cmd key at_ms`: the time's text is made only where the effect
/// is sent, not where the change is only counted.
pub fn emit_at(ctx: &Context, cmd: &CStr, key: Str<'_>, at_ms: i64) -> Result<(), EmqError> {
    WROTE.store(true, Ordering::Relaxed);
    if propagating(ctx) {
        let at = OwnedString::from_i64(ctx, at_ms)?;
        replicate(ctx, cmd, &[key, at.as_str()]);
    } else {
        count_change(ctx);
    }
    Ok(())
}

/// Whether effects go to `RM_Replicate`: the gate is open, AOF is on, or the write happens
/// outside a command (a timer tick). Those few writes always replicate: counting a skipped
/// change goes through `RM_ReplicateVerbatim`, which belongs to a command's own arguments.
fn propagating(ctx: &Context) -> bool {
    if OPEN.load(Ordering::Relaxed) {
        return true;
    }
    match AOF_MEMO.load(Ordering::Relaxed) {
        AOF_ON | OUTSIDE => true,
        AOF_OFF => false,
        _ => {
            let on = Flags::of(ctx).aof();
            AOF_MEMO.store(if on { AOF_ON } else { AOF_OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// A command of this module starts: the AOF state is read at most once until it finishes.
pub(crate) fn command_started() {
    AOF_MEMO.store(UNREAD, Ordering::Relaxed);
}

/// The command finished: outside commands (timer ticks), every effect replicates.
pub(crate) fn command_finished() {
    AOF_MEMO.store(OUTSIDE, Ordering::Relaxed);
}

/// Opens the gate (`true`) or closes it; whether it was open.
pub fn set_gate(open: bool) -> bool {
    OPEN.swap(open, Ordering::Relaxed)
}

/// Whether EchoMQ wrote anything since the last call (and forgets it): the gate's probe asks
/// the server nothing while nothing was written.
pub fn wrote_since() -> bool {
    WROTE.swap(false, Ordering::Relaxed)
}
static WROTE: AtomicBool = AtomicBool::new(true);

/// Whether the gate is open (for `INFO emq`).
pub fn gate_open() -> bool {
    OPEN.load(Ordering::Relaxed)
}

/// Module load: the gate starts open (a module loaded again after an unload must not trust
/// what it saw before; replicas may have attached in between).
pub fn reset_gate() {
    OPEN.store(true, Ordering::Relaxed);
    WROTE.store(true, Ordering::Relaxed);
    AOF_MEMO.store(OUTSIDE, Ordering::Relaxed);
}
