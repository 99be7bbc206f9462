//! ACL checks on the keys a command derives, and on a blocked command served later.

use std::cell::Cell;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use valkey_module::{raw, Context};

use crate::protocol::EmqError;

use super::client::client_id;
use super::reply::Args;
use super::string::OwnedString;

/// What a command does with a key, for the ACL check.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// The calling user's permission on each key for what is done with it, logged in `ACL LOG` on
/// refusal; one lookup of the user a command for all of them.
#[inline]
pub fn check_permission<'k>(
    ctx: &Context,
    keys: impl Iterator<Item = Result<(&'k OwnedString, Access), EmqError>>,
) -> Result<(), EmqError> {
    let Some(check) = (unsafe { raw::RedisModule_ACLCheckKeyPermissions }) else {
        return Ok(());
    };
    with_acl_user(ctx, |user| {
        for key in keys {
            let (key, access) = key?;
            let flags = match access {
                Access::Read => raw::REDISMODULE_CMD_KEY_ACCESS,
                Access::ReadWrite => {
                    raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE
                }
            } as c_int;
            // SAFETY: live user and key name.
            if unsafe { check(user, key.as_ptr(), flags) } != raw::REDISMODULE_OK as c_int {
                acl_log(
                    ctx,
                    user,
                    key.as_ptr(),
                    raw::RedisModuleACLLogEntryReason_REDISMODULE_ACL_LOG_KEY,
                );
                return Err(EmqError::NoPerm);
            }
        }
        Ok(())
    })
}

/// Runs `f` with a test of whether the calling user may read a key, by name: for a command
/// that lists what the user may see rather than refusing what it may not, so a key the user
/// may not read adds no `ACL LOG` entry. A client without a user may read every key; a user
/// that is not in the ACL list cannot be checked and is refused, as everywhere.
pub fn with_key_reads<R>(
    ctx: &Context,
    f: impl FnOnce(&dyn Fn(&[u8]) -> bool) -> R,
) -> Result<R, EmqError> {
    let (Some(check), Some(get_user), Some(free_user)) = (unsafe {
        (
            raw::RedisModule_ACLCheckKeyPermissions,
            raw::RedisModule_GetModuleUserFromUserName,
            raw::RedisModule_FreeModuleUser,
        )
    }) else {
        return Ok(f(&|_| true));
    };
    let Some(name) = current_user_name(ctx)? else {
        return Ok(f(&|_| true));
    };
    // SAFETY: `name` is a live string; the user is freed below.
    let user = unsafe { get_user(name.as_ptr()) };
    if user.is_null() {
        return Err(EmqError::UncheckableUser);
    }
    let may_read = |key: &[u8]| {
        OwnedString::new(ctx, key).is_ok_and(|key| {
            // SAFETY: live user and key name.
            let ok = unsafe { check(user, key.as_ptr(), raw::REDISMODULE_CMD_KEY_ACCESS as c_int) };
            ok == raw::REDISMODULE_OK as c_int
        })
    };
    let result = f(&may_read);
    // SAFETY: obtained above, freed once.
    unsafe { free_user(user) };
    Ok(result)
}

/// The calling user's permission to run the command `args` (name first), logged in `ACL LOG`
/// on refusal. The server checks this before a command runs; a blocked command served later
/// asks again, since the user's rules may have changed while it waited.
pub fn check_command(ctx: &Context, args: &Args) -> Result<(), EmqError> {
    let argv = args.raw();
    let Some(check) = (unsafe { raw::RedisModule_ACLCheckCommandPermissions }) else {
        return Ok(());
    };
    let (Some(&name), Ok(argc)) = (argv.first(), c_int::try_from(argv.len())) else {
        return Err(EmqError::Internal);
    };
    with_acl_user(ctx, |user| {
        // SAFETY: live user; the server only reads the argument vector.
        if unsafe { check(user, argv.as_ptr().cast_mut(), argc) } != raw::REDISMODULE_OK as c_int {
            acl_log(
                ctx,
                user,
                name,
                raw::RedisModuleACLLogEntryReason_REDISMODULE_ACL_LOG_CMD,
            );
            return Err(EmqError::NoPermCommand);
        }
        Ok(())
    })
}

/// Runs `check` with the calling client's ACL user, looked up by name once a command (the
/// first check's lookup serves the rest; [`command_ended`] frees it). A client without a user
/// (the primary's link, another module's `RM_Call` without `C`) may do everything; a user that
/// is not in the ACL list cannot be checked and is refused.
#[inline]
fn with_acl_user(
    ctx: &Context,
    check: impl FnOnce(*mut raw::RedisModuleUser) -> Result<(), EmqError>,
) -> Result<(), EmqError> {
    let user = match USER.get() {
        Some(user) => user,
        None => {
            let user = lookup_user(ctx)?;
            USER.set(Some(user));
            user
        }
    };
    match user {
        Some(user) => check(user.as_ptr()),
        None => Ok(()),
    }
}

thread_local! {
    /// The running command's user: `None` until its first check looks it up, `Some(None)` for
    /// a client without one. It is the server's live ACL user, valid for the command: only
    /// another module's keyspace-event handler could delete it in between (`ACL DELUSER` from
    /// `RM_Call`), which no module of this project does.
    static USER: Cell<Option<Option<NonNull<raw::RedisModuleUser>>>> = const { Cell::new(None) };
}

/// The calling client's ACL user (`None`: it has none), to be freed by [`command_ended`].
fn lookup_user(ctx: &Context) -> Result<Option<NonNull<raw::RedisModuleUser>>, EmqError> {
    let Some(get_user) = (unsafe { raw::RedisModule_GetModuleUserFromUserName }) else {
        return Ok(None);
    };
    // Only command handlers call this: timer and event contexts have no user to check.
    let Some(name) = current_user_name(ctx)? else {
        return Ok(None);
    };
    // SAFETY: `name` is a live string; the user is freed when the command ends.
    match NonNull::new(unsafe { get_user(name.as_ptr()) }) {
        Some(user) => Ok(Some(user)),
        // Not in the ACL list: a module-created user, whose rules cannot be read by name.
        None => Err(EmqError::UncheckableUser),
    }
}

/// A command's handler returned (or has yet to start): the user its checks looked up is freed,
/// so the next command looks up its own.
pub(crate) fn command_ended() {
    if let Some(Some(user)) = USER.take() {
        if let Some(free_user) = unsafe { raw::RedisModule_FreeModuleUser } {
            // SAFETY: looked up by `lookup_user`, freed once (taken out of `USER`).
            unsafe { free_user(user.as_ptr()) };
        }
    }
}

/// An `ACL LOG` entry for `user` refused `object` (a key or a command name) for `reason`.
fn acl_log(
    ctx: &Context,
    user: *mut raw::RedisModuleUser,
    object: *mut raw::RedisModuleString,
    reason: raw::RedisModuleACLLogEntryReason,
) {
    if let Some(log) = unsafe { raw::RedisModule_ACLAddLogEntry } {
        // SAFETY: live context, user and object name.
        unsafe { log(ctx.ctx, user, object, reason) };
    }
}

/// The name of the user the command runs as, or `None` for a client that has none: the
/// primary's replication link, or another module's `RM_Call` made without its `C` flag. Such a
/// client may do everything (the server does not check its native commands either).
///
/// `RM_GetCurrentUserName` reads the client's user without looking whether there is one, so it
/// is asked only once that is known. A connected client is looked up by id; a client that is
/// not connected (a script's or function's, the AOF loader's, another module's `RM_Call`) is
/// probed with an `RM_Call` run as its user, which the server refuses with `ENOTSUP`, before
/// running anything, when there is none.
fn current_user_name(ctx: &Context) -> Result<Option<OwnedString>, EmqError> {
    let current = unsafe { raw::RedisModule_GetCurrentUserName }.ok_or(EmqError::Internal)?;
    let owned = |ptr: *mut raw::RedisModuleString| OwnedString::adopt(ctx.ctx, ptr);
    let id = client_id(ctx);
    let has_user = if id != 0 && USER_CLIENT.load(Ordering::Relaxed) == id {
        true // the last connected client found to have a user (its pipeline goes on)
    } else if let Some(name_by_id) = unsafe { raw::RedisModule_GetClientUserNameById } {
        // SAFETY: a command's context; the id is that of its own client.
        if let Some(name) = owned(unsafe { name_by_id(ctx.ctx, id) }) {
            // Ids are never reused, and a connected client's user is never taken away
            // (deleting it moves the client to the default user before closing it).
            USER_CLIENT.store(id, Ordering::Relaxed);
            return Ok(Some(name));
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(ENOTSUP) => false, // connected, without a user: the primary
            _ => client_has_user(ctx)?,
        }
    } else {
        client_has_user(ctx)?
    };
    if !has_user {
        return Ok(None);
    }
    // SAFETY: the client has a user, which is what this call reads.
    owned(unsafe { current(ctx.ctx) })
        .map(Some)
        .ok_or(EmqError::Internal)
}

/// The id of the last connected client found to have a user (0: none yet).
static USER_CLIENT: AtomicU64 = AtomicU64::new(0);

/// `ENOTSUP`, as Linux numbers it: what the server sets when a client has no user.
const ENOTSUP: i32 = 95;

/// Whether this command's client has a user, asked by running, as that user, a command that
/// cannot exist: the server checks for the user first (`ENOTSUP` without one) and then fails
/// the lookup, so nothing runs and nothing is logged. Without `RM_Call` the command is
/// refused rather than run with rights nobody checked.
fn client_has_user(ctx: &Context) -> Result<bool, EmqError> {
    let call = unsafe { raw::RedisModule_Call }.ok_or(EmqError::Internal)?;
    // SAFETY: a command's context; "C" runs the call as the client's user, no arguments. A
    // name with spaces is no command's.
    let reply = unsafe { call(ctx.ctx, c"emq user probe".as_ptr(), c"C".as_ptr()) };
    let missing_user =
        reply.is_null() && std::io::Error::last_os_error().raw_os_error() == Some(ENOTSUP);
    if !reply.is_null() {
        if let Some(free) = unsafe { raw::RedisModule_FreeCallReply } {
            // SAFETY: the reply of the call above, freed once.
            unsafe { free(reply) };
        }
    }
    Ok(!missing_user)
}
