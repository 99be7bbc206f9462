//! The one panic guard: every entry from the server into EchoMQ (a command, a blocked
//! client's reply, a keyspace or server event, the timer, the command filter, `INFO`) runs
//! behind it, so no panic crosses into `valkey-server`.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use valkey_module::{raw, Context};

use crate::protocol::{counters, EmqError};

use super::reply::{render, reply_error, Args, CommandResult, Handler, Reply};
use super::server::log;

/// Runs `f` (an event's or the timer's work), swallowing a panic: the server goes on.
#[inline]
pub fn guard(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// The raw command callback the server calls.
pub type Callback =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Wraps a handler in the raw callback the server calls, behind the panic guard.
#[macro_export]
macro_rules! callback {
    ($handler:path) => {{
        extern "C" fn call(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
            argv: *mut *mut valkey_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            $crate::host::guard::dispatch(ctx, argv, argc, $handler)
        }
        call as $crate::host::guard::Callback
    }};
}

/// Runs `handler` for one call, renders its reply or error, and turns a panic into an error
/// reply instead of an aborted server.
pub fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    guarded(ctx, argv, argc, |context, args| {
        Some(handler(context, args))
    })
}

/// Runs the reply callback of a client blocked on a key, behind the panic guard: `handler`
/// answers `None` to keep waiting. Returns `REDISMODULE_ERR` to keep the client blocked.
pub(crate) fn dispatch_ready(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: fn(&Context, &Args) -> Option<CommandResult>,
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
    super::propagate::command_started();
    super::acl::command_ended();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let argv = match usize::try_from(argc) {
            // SAFETY: the server passes `argc` valid string pointers in `argv`.
            Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
            _ => &[],
        };
        let context = Context::new(ctx);
        let args = Args::new(argv);
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
                        &context,
                        c"warning",
                        &format!("EchoMQ: {name} hit an internal error"),
                    );
                }
                counters::refused(&err);
                reply_error(ctx, &err);
                true
            }
        }
    }));
    super::propagate::command_finished();
    super::acl::command_ended();
    match outcome {
        Ok(true) => raw::REDISMODULE_OK as c_int,
        Ok(false) => raw::REDISMODULE_ERR as c_int,
        Err(_) => {
            let _ = catch_unwind(|| {
                log(
                    &Context::new(ctx),
                    c"warning",
                    "EchoMQ: a handler panicked; replied with an error",
                );
                counters::refused(&EmqError::Internal);
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
