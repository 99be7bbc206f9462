//! The only code that touches the server's low-level key API: strings, keys, the hash row,
//! the zsets, ACL checks, keyspace notifications and replication by effect.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};
use std::ptr::{self, NonNull};

use valkey_module::{raw, Context};

use crate::error::EmqError;

/// A server string borrowed for the duration of a call: an argument or an [`OwnedString`].
#[derive(Clone, Copy)]
pub struct Str<'a> {
    ptr: NonNull<raw::RedisModuleString>,
    _life: PhantomData<&'a raw::RedisModuleString>,
}

impl Str<'_> {
    /// # Safety
    /// `ptr` must be a live server string for the chosen lifetime.
    pub(crate) unsafe fn from_raw(ptr: NonNull<raw::RedisModuleString>) -> Self {
        Self {
            ptr,
            _life: PhantomData,
        }
    }

    fn as_ptr(self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }
}

/// A string the module created and frees on drop.
pub struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    ptr: NonNull<raw::RedisModuleString>,
}

impl OwnedString {
    pub fn new(ctx: &Context, bytes: &[u8]) -> Result<Self, EmqError> {
        let create = unsafe { raw::RedisModule_CreateString }.ok_or(EmqError::Internal)?;
        // SAFETY: the buffer is valid for `len` bytes; the server copies it.
        let p = unsafe { create(ctx.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
        NonNull::new(p)
            .map(|ptr| Self { ctx: ctx.ctx, ptr })
            .ok_or(EmqError::Internal)
    }

    fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }

    pub fn as_str(&self) -> Str<'_> {
        // SAFETY: alive as long as `self`.
        unsafe { Str::from_raw(self.ptr) }
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        if let Some(free) = unsafe { raw::RedisModule_FreeString } {
            // SAFETY: created by us with this context and not freed elsewhere.
            unsafe { free(self.ctx, self.ptr.as_ptr()) };
        }
    }
}

/// What a key holds, as far as EchoMQ cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    Nothing,
    Hash,
    Zset,
    Other,
}

/// A key opened for writing; closed on drop.
pub struct Key<'n> {
    ptr: NonNull<raw::RedisModuleKey>,
    name: &'n OwnedString,
}

impl<'n> Key<'n> {
    /// Opens `name` for reading and writing (a missing key opens empty).
    pub fn open(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        let open = unsafe { raw::RedisModule_OpenKey }.ok_or(EmqError::Internal)?;
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: live context and string; the key is closed in Drop.
        let p = unsafe { open(ctx.ctx, name.as_ptr(), mode) };
        NonNull::new(p.cast::<raw::RedisModuleKey>())
            .map(|ptr| Self { ptr, name })
            .ok_or(EmqError::Internal)
    }

    pub fn name(&self) -> &OwnedString {
        self.name
    }

    pub fn holds(&self) -> Holds {
        let Some(key_type) = (unsafe { raw::RedisModule_KeyType }) else {
            return Holds::Other;
        };
        // SAFETY: the key is open.
        match unsafe { key_type(self.ptr.as_ptr()) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Holds::Nothing,
            raw::REDISMODULE_KEYTYPE_HASH => Holds::Hash,
            raw::REDISMODULE_KEYTYPE_ZSET => Holds::Zset,
            _ => Holds::Other,
        }
    }

    /// Sets hash fields in the given order (C-string names, server-string values).
    pub fn hash_set3(&self, fields: [(&CStr, Str<'_>); 3]) -> Result<(), EmqError> {
        let hset = unsafe { raw::RedisModule_HashSet }.ok_or(EmqError::Internal)?;
        let [(f1, v1), (f2, v2), (f3, v3)] = fields;
        // SAFETY: the key is open for writing; the variadic list is NULL-terminated.
        let n = unsafe {
            hset(
                self.ptr.as_ptr(),
                raw::REDISMODULE_HASH_CFIELDS as c_int,
                f1.as_ptr(),
                v1.as_ptr(),
                f2.as_ptr(),
                v2.as_ptr(),
                f3.as_ptr(),
                v3.as_ptr(),
                ptr::null::<c_char>(),
            )
        };
        if n < 0 {
            return Err(EmqError::WrongType);
        }
        Ok(())
    }

    /// `ZADD key score member`.
    pub fn zadd(&self, score: f64, member: Str<'_>) -> Result<(), EmqError> {
        let zadd = unsafe { raw::RedisModule_ZsetAdd }.ok_or(EmqError::Internal)?;
        // SAFETY: the key is open for writing and holds a zset or nothing.
        let status = unsafe { zadd(self.ptr.as_ptr(), score, member.as_ptr(), ptr::null_mut()) };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(EmqError::WrongType);
        }
        Ok(())
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
            // SAFETY: opened by us and closed once.
            unsafe { close(self.ptr.as_ptr()) };
        }
    }
}

/// The calling user's read+write permission on each key; a refusal is logged in `ACL LOG`
/// like the server's own key refusals.
pub fn check_access(ctx: &Context, keys: &[&OwnedString]) -> Result<(), EmqError> {
    let (Some(user_name), Some(get_user), Some(check), Some(free_user)) = (unsafe {
        (
            raw::RedisModule_GetCurrentUserName,
            raw::RedisModule_GetModuleUserFromUserName,
            raw::RedisModule_ACLCheckKeyPermissions,
            raw::RedisModule_FreeModuleUser,
        )
    }) else {
        return Ok(());
    };
    // SAFETY: live context; a NULL name means an internal client with full rights.
    let name = unsafe { user_name(ctx.ctx) };
    if name.is_null() {
        return Ok(());
    }
    let name = OwnedString {
        ctx: ctx.ctx,
        ptr: NonNull::new(name).ok_or(EmqError::Internal)?,
    };
    // SAFETY: `name` is a live string; the user is freed below.
    let user = unsafe { get_user(name.as_ptr()) };
    if user.is_null() {
        return Err(EmqError::NoPerm);
    }
    let flags = (raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE) as c_int;
    let mut result = Ok(());
    for key in keys {
        // SAFETY: live user and key name.
        if unsafe { check(user, key.as_ptr(), flags) } != raw::REDISMODULE_OK as c_int {
            if let Some(log) = unsafe { raw::RedisModule_ACLAddLogEntry } {
                // SAFETY: live context, user and key name.
                unsafe {
                    log(
                        ctx.ctx,
                        user,
                        key.as_ptr(),
                        raw::RedisModuleACLLogEntryReason_REDISMODULE_ACL_LOG_KEY,
                    )
                };
            }
            result = Err(EmqError::NoPerm);
            break;
        }
    }
    // SAFETY: obtained above, freed once.
    unsafe { free_user(user) };
    result
}

/// Fires a keyspace event as the native command would.
pub fn notify(ctx: &Context, class: c_int, event: &CStr, key: &OwnedString) {
    if let Some(f) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
        // SAFETY: live context and key name.
        unsafe { f(ctx.ctx, class, event.as_ptr(), key.as_ptr()) };
    }
}

pub const NOTIFY_HASH: c_int = raw::REDISMODULE_NOTIFY_HASH;
pub const NOTIFY_ZSET: c_int = raw::REDISMODULE_NOTIFY_ZSET;

/// Replicates `HSET row f1 v1 f2 v2 f3 v3` to replicas and the AOF.
pub fn replicate_hset3(ctx: &Context, row: &OwnedString, fields: [(&CStr, Str<'_>); 3]) {
    if let Some(rep) = unsafe { raw::RedisModule_Replicate } {
        let [(f1, v1), (f2, v2), (f3, v3)] = fields;
        // SAFETY: format "scscscs" matches the arguments.
        unsafe {
            rep(
                ctx.ctx,
                c"HSET".as_ptr(),
                c"scscscs".as_ptr(),
                row.as_ptr(),
                f1.as_ptr(),
                v1.as_ptr(),
                f2.as_ptr(),
                v2.as_ptr(),
                f3.as_ptr(),
                v3.as_ptr(),
            )
        };
    }
}

/// Replicates `ZADD key <score> member`, the score given as text so it is exact.
pub fn replicate_zadd(ctx: &Context, key: &OwnedString, score: &CStr, member: Str<'_>) {
    if let Some(rep) = unsafe { raw::RedisModule_Replicate } {
        // SAFETY: format "scs" matches the arguments.
        unsafe {
            rep(
                ctx.ctx,
                c"ZADD".as_ptr(),
                c"scs".as_ptr(),
                key.as_ptr(),
                score.as_ptr(),
                member.as_ptr(),
            )
        };
    }
}
