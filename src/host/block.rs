//! Blocking a client on a key (`EMQ.CLAIM ... BLOCK`): the server keeps it waiting until the
//! key is signalled ready or the time runs out, and calls back into EchoMQ behind the guard.

use std::os::raw::{c_int, c_void};

use valkey_module::{raw, Context};

use crate::protocol::EmqError;

use super::guard::{dispatch_ready, guard, reply_timeout};
use super::reply::{Args, CommandResult};
use super::string::Str;

/// What a blocked client does when its key is signalled ready: answer (`Some`), or wait on
/// (`None`); and what it holds while it waits, handed back once the server lets it go.
pub trait Waiter {
    type Held: 'static;
    fn ready(ctx: &Context, args: &Args) -> Option<CommandResult>;
    /// The client is no longer blocked: answered, timed out, unblocked or disconnected.
    fn released(held: Self::Held);
}

/// Blocks the calling client until `key` is signalled ready ([`Waiter::ready`] then decides)
/// or `timeout_ms` passes (0 waits forever; the timeout answers null, as `BLPOP` does). The
/// server hands `held` back to [`Waiter::released`] whichever way the wait ends.
pub fn block_on_keys<W: Waiter>(
    ctx: &Context,
    keys: &[Str<'_>],
    timeout_ms: i64,
    held: W::Held,
) -> Result<(), EmqError> {
    let block = unsafe { raw::RedisModule_BlockClientOnKeys }.ok_or(EmqError::Internal)?;
    let mut keys: Vec<_> = keys.iter().map(|k| k.as_ptr()).collect();
    let count = c_int::try_from(keys.len()).map_err(|_| EmqError::Internal)?;
    let held = Box::into_raw(Box::new(held));
    // SAFETY: live context; the server copies the key list, and hands `held` to
    // `on_released` once, when the client is let go.
    let bc = unsafe {
        block(
            ctx.ctx,
            Some(on_ready::<W>),
            Some(reply_timeout),
            Some(on_released::<W>),
            timeout_ms,
            keys.as_mut_ptr(),
            count,
            held.cast::<c_void>(),
        )
    };
    if bc.is_null() {
        // SAFETY: the server took nothing: `held` is still this function's.
        W::released(*unsafe { Box::from_raw(held) });
        return Err(EmqError::Internal);
    }
    Ok(())
}

unsafe extern "C" fn on_released<W: Waiter>(_ctx: *mut raw::RedisModuleCtx, held: *mut c_void) {
    if held.is_null() {
        return;
    }
    // SAFETY: the pointer `block_on_keys` gave the server, which hands it back once.
    let held = unsafe { Box::from_raw(held.cast::<W::Held>()) };
    guard(|| W::released(*held));
}

/// The name of the key whose signal is being served, in [`Waiter::ready`].
pub fn ready_key(ctx: &Context) -> Option<Vec<u8>> {
    let get = unsafe { raw::RedisModule_GetBlockedClientReadyKey }?;
    // SAFETY: live context of a blocked client's ready callback; the string is the server's.
    let key = unsafe { get(ctx.ctx) };
    let key = std::ptr::NonNull::new(key)?;
    let mut len = 0;
    // SAFETY: a live string, read before the callback returns.
    let ptr = unsafe { raw::RedisModule_StringPtrLen.map(|f| f(key.as_ptr(), &mut len)) }?;
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the server's `len` bytes at `ptr`.
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
}

extern "C" fn on_ready<W: Waiter>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch_ready(ctx, argv, argc, W::ready)
}
