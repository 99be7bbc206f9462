//! The boundary with the server: arguments in, replies out, and the guard that keeps any
//! panic from crossing into `valkey-server`.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_long};
use std::panic::{catch_unwind, AssertUnwindSafe};

use valkey_module::{raw, Context, ValkeyValue};

use crate::error::EmqError;
use crate::metrics;
use crate::store::Str;
use std::ptr::NonNull;

/// A command's arguments, borrowed from the server for the duration of the call.
pub struct Args<'a> {
    argv: &'a [*mut raw::RedisModuleString],
}

impl<'a> Args<'a> {
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }

    /// The bytes of argument `i` (0 is the command name); empty past the end.
    pub fn bytes(&self, i: usize) -> &'a [u8] {
        let Some(&s) = self.argv.get(i) else {
            return &[];
        };
        string_bytes(s)
    }

    /// The whole argument vector, command name first, as the server passed it.
    pub fn raw(&self) -> &'a [*mut raw::RedisModuleString] {
        self.argv
    }

    /// The server's own string for argument `i`, to hand back without copying.
    pub fn string(&self, i: usize) -> Option<Str<'a>> {
        let p = NonNull::new(*self.argv.get(i)?)?;
        // SAFETY: the server keeps its arguments alive for the whole call.
        Some(unsafe { Str::from_raw(p) })
    }
}

/// The bytes of a server string.
pub(crate) fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let Some(ptr_len) = (unsafe { raw::RedisModule_StringPtrLen }) else {
        return &[];
    };
    if s.is_null() {
        return &[];
    }
    let mut len = 0usize;
    // SAFETY: `s` is a live server string; the server owns the buffer for the call.
    unsafe {
        let p = ptr_len(s, &mut len);
        if p.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// What a command answers.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Reply>),
    /// A RESP3 map (a flat array under RESP2).
    Map(Vec<(&'static str, Reply)>),
    /// No reply now: the client is blocked and is answered later.
    Blocked,
}

pub type CommandResult = Result<Reply, EmqError>;

/// A command handler: pure parsing and checks, then at most one write through `store`.
pub type Handler = fn(&Context, &Args) -> CommandResult;

/// Runs `handler` for one call, renders its reply or error, and turns a panic into an error
/// reply instead of an aborted server.
pub(crate) fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    guarded(ctx, argv, argc, |context, args| {
        Some(handler(context, args))
    })
}

/// A blocked client's reply callback: `handler` answers `None` to keep waiting.
pub type ReadyHandler = fn(&Context, &Args) -> Option<CommandResult>;

/// Runs the reply callback of a client blocked on a key, behind the panic guard. Returns
/// `REDISMODULE_ERR` to keep the client blocked.
pub(crate) fn dispatch_ready(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: ReadyHandler,
) -> c_int {
    guarded(ctx, argv, argc, handler)
}

/// The one entry from the server into a handler: arguments in, the answer out, no panic
/// across. `REDISMODULE_ERR` when the handler chose not to answer (a blocked client waits on).
fn guarded(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: impl FnOnce(&Context, &Args) -> Option<CommandResult>,
) -> c_int {
    crate::effects::command_started();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let argv = match usize::try_from(argc) {
            // SAFETY: the server passes `argc` valid string pointers in `argv`.
            Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
            _ => &[],
        };
        let context = Context::new(ctx);
        let args = Args { argv };
        match handler(&context, &args) {
            None => false,
            Some(Ok(reply)) => {
                render(ctx, &reply);
                true
            }
            Some(Err(err)) => {
                if err == EmqError::Internal {
                    let name = String::from_utf8_lossy(args.bytes(0));
                    log(
                        ctx,
                        c"warning",
                        &format!("EchoMQ: {name} hit an internal error"),
                    );
                }
                metrics::refused(&err);
                reply_error(ctx, &err);
                true
            }
        }
    }));
    crate::effects::command_finished();
    match outcome {
        Ok(true) => raw::REDISMODULE_OK as c_int,
        Ok(false) => raw::REDISMODULE_ERR as c_int,
        Err(_) => {
            let _ = catch_unwind(|| {
                log(
                    ctx,
                    c"warning",
                    "EchoMQ: a handler panicked; replied with an error",
                );
                metrics::refused(&EmqError::Internal);
                reply_error(ctx, &EmqError::Internal);
            });
            raw::REDISMODULE_OK as c_int
        }
    }
}

/// A blocked client's timeout: a null reply, as `BLPOP` gives.
pub(crate) extern "C" fn reply_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let _ = catch_unwind(|| render(ctx, &Reply::Null));
    raw::REDISMODULE_OK as c_int
}

fn reply_error(ctx: *mut raw::RedisModuleCtx, err: &EmqError) {
    let text = CString::new(err.message().as_bytes())
        .unwrap_or_else(|_| CString::from(c"ERR invalid error text"));
    if let Some(f) = unsafe { raw::RedisModule_ReplyWithError } {
        // SAFETY: `ctx` is the live call context; `text` is NUL-terminated.
        unsafe { f(ctx, text.as_ptr()) };
    }
}

fn render(ctx: *mut raw::RedisModuleCtx, reply: &Reply) {
    // SAFETY (all calls): `ctx` is the live call context of this command.
    unsafe {
        match reply {
            Reply::Integer(n) => {
                if let Some(f) = raw::RedisModule_ReplyWithLongLong {
                    f(ctx, *n);
                }
            }
            Reply::Bulk(b) => bulk(ctx, b),
            Reply::Null => {
                if let Some(f) = raw::RedisModule_ReplyWithNull {
                    f(ctx);
                }
            }
            Reply::Array(items) => {
                if let Some(f) = raw::RedisModule_ReplyWithArray {
                    f(ctx, items.len() as c_long);
                }
                for item in items {
                    render(ctx, item);
                }
            }
            Reply::Blocked => {}
            Reply::Map(pairs) => {
                if let Some(f) = raw::RedisModule_ReplyWithMap {
                    f(ctx, pairs.len() as c_long);
                } else if let Some(f) = raw::RedisModule_ReplyWithArray {
                    f(ctx, (pairs.len() * 2) as c_long);
                }
                for (k, v) in pairs {
                    bulk(ctx, k.as_bytes());
                    render(ctx, v);
                }
            }
        }
    }
}

unsafe fn bulk(ctx: *mut raw::RedisModuleCtx, b: &[u8]) {
    if let Some(f) = raw::RedisModule_ReplyWithStringBuffer {
        f(ctx, b.as_ptr().cast::<c_char>(), b.len());
    }
}

/// Whether `every_ms` has passed since the time stamped in `last` (0: never); if so, stamps
/// `now_ms`. For work done at most so often from the cron or the timer (main thread only).
pub(crate) fn once_every(last: &std::sync::atomic::AtomicU64, now_ms: u64, every_ms: u64) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    if now_ms.saturating_sub(last.load(Relaxed)) < every_ms {
        return false;
    }
    last.store(now_ms, Relaxed);
    true
}

/// The server's version as `0x00MMmmpp` (Valkey's own numbering on Valkey, Redis's on Redis),
/// or 0 where the server cannot say.
pub(crate) fn version() -> c_int {
    // SAFETY: a server function without arguments.
    unsafe { raw::RedisModule_GetServerVersion }.map_or(0, |f| unsafe { f() })
}

/// A reply of the server's own command (`ctx.call`) as text: a string, or an integer in
/// decimal; `None` for anything else.
pub(crate) fn reply_text(v: &ValkeyValue) -> Option<String> {
    match v {
        ValkeyValue::BulkString(s) | ValkeyValue::SimpleString(s) => Some(s.clone()),
        ValkeyValue::StringBuffer(b) => Some(String::from_utf8_lossy(b).into_owned()),
        ValkeyValue::Integer(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The server's clock, in unix milliseconds.
pub fn now_ms() -> u64 {
    match unsafe { raw::RedisModule_Milliseconds } {
        // SAFETY: a plain clock read.
        Some(f) => u64::try_from(unsafe { f() }).unwrap_or(0),
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    }
}

/// Writes `message` to the server log at `level` (`notice`, `warning`, ...). The message is an
/// argument of a `%s` format, never a format itself. `ctx` may be null (no module prefix).
pub(crate) fn log(ctx: *mut raw::RedisModuleCtx, level: &std::ffi::CStr, message: &str) {
    let Some(log) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: NUL-terminated strings; "%s" takes exactly one string argument.
    unsafe { log(ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
}
