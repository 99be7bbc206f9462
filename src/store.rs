//! The only code that touches the server's low-level key API: strings, keys, the hash row,
//! the zsets, ACL checks, keyspace notifications and replication by effect.

use std::cell::Cell;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use valkey_module::{raw, Context};

use crate::error::EmqError;

/// A server string borrowed for the duration of a call: an argument or an [`OwnedString`].
#[derive(Clone, Copy)]
pub struct Str<'a> {
    ptr: NonNull<raw::RedisModuleString>,
    _life: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> Str<'a> {
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

    pub fn bytes(self) -> &'a [u8] {
        crate::server::string_bytes(self.ptr.as_ptr())
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

    /// The decimal text of `n`, made by the server (`CreateStringFromLongLong`).
    pub fn from_i64(ctx: &Context, n: i64) -> Result<Self, EmqError> {
        let create =
            unsafe { raw::RedisModule_CreateStringFromLongLong }.ok_or(EmqError::Internal)?;
        // SAFETY: live context; the string is freed on drop.
        let p = unsafe { create(ctx.ctx, n as std::os::raw::c_longlong) };
        NonNull::new(p)
            .map(|ptr| Self { ctx: ctx.ctx, ptr })
            .ok_or(EmqError::Internal)
    }

    /// Takes ownership of a string the server handed us (e.g. a zset element).
    fn adopt(ctx: *mut raw::RedisModuleCtx, p: *mut raw::RedisModuleString) -> Option<Self> {
        NonNull::new(p).map(|ptr| Self { ctx, ptr })
    }

    pub fn bytes(&self) -> &[u8] {
        crate::server::string_bytes(self.ptr.as_ptr())
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

/// An open key; closed on drop.
///
/// The server signals a key as modified (aborting `WATCH`es, invalidating tracked copies)
/// only when a write changed it, as a native command does: EchoMQ loads with
/// `NO_IMPLICIT_SIGNAL_MODIFIED`, every write below marks its key, and drop signals the
/// marked ones. A duplicate enqueue or a claim that finds nothing leaves watchers alone.
pub struct Key<'n> {
    /// `None` for a missing key opened read-only (the server gives no handle for those).
    ptr: Option<NonNull<raw::RedisModuleKey>>,
    name: &'n OwnedString,
    ctx: *mut raw::RedisModuleCtx,
    modified: Cell<bool>,
}

impl<'n> Key<'n> {
    /// Opens `name` for reading and writing (a missing key opens empty).
    pub fn open(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        Self::open_mode(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    /// Opens `name` for reading only, as a read command's lookup: counted in the server's
    /// keyspace hits and misses.
    pub fn open_read(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        Self::open_mode(ctx, name, raw::REDISMODULE_READ)
    }

    /// Opens `name` to see what it holds, before a write or in the timer: like a write
    /// command's lookups, not counted in keyspace hits and misses, no `keymiss` event, and the
    /// key's LRU/LFU left as it is. (Servers that lack these flags ignore them.)
    pub fn probe(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        let quiet = raw::REDISMODULE_OPEN_KEY_NOSTATS
            | raw::REDISMODULE_OPEN_KEY_NONOTIFY
            | raw::REDISMODULE_OPEN_KEY_NOTOUCH;
        Self::open_mode(ctx, name, raw::REDISMODULE_READ | quiet)
    }

    fn open_mode(ctx: &Context, name: &'n OwnedString, mode: u32) -> Result<Self, EmqError> {
        let open = unsafe { raw::RedisModule_OpenKey }.ok_or(EmqError::Internal)?;
        // SAFETY: live context and string; the key is closed in Drop.
        let p = unsafe { open(ctx.ctx, name.as_ptr(), mode as c_int) };
        let ptr = NonNull::new(p.cast::<raw::RedisModuleKey>());
        if ptr.is_none() && mode & raw::REDISMODULE_WRITE != 0 {
            return Err(EmqError::Internal);
        }
        Ok(Self {
            ptr,
            name,
            ctx: ctx.ctx,
            modified: Cell::new(false),
        })
    }

    /// The open handle; `Internal` for a missing key opened read-only.
    fn handle(&self) -> Result<*mut raw::RedisModuleKey, EmqError> {
        self.ptr.map(NonNull::as_ptr).ok_or(EmqError::Internal)
    }

    /// The handle for a write, which marks the key as modified (signalled when it closes).
    /// Marked before the write: a write that failed half-way must still be signalled.
    fn write_handle(&self) -> Result<*mut raw::RedisModuleKey, EmqError> {
        let handle = self.handle()?;
        self.modified.set(true);
        Ok(handle)
    }

    /// `Ok` when the key is empty or a zset; `WRONGTYPE` otherwise.
    pub fn expect_zset(&self) -> Result<(), EmqError> {
        match self.holds() {
            Holds::Nothing | Holds::Zset => Ok(()),
            _ => Err(EmqError::WrongType),
        }
    }

    /// `ZCARD` (0 for a missing key).
    pub fn len(&self) -> u64 {
        match (unsafe { raw::RedisModule_ValueLength }, self.ptr) {
            // SAFETY: the key is open.
            (Some(f), Some(ptr)) => (unsafe { f(ptr.as_ptr()) }) as u64,
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `limit` members with `min <= score <= max`, lowest first (by score, then bytes).
    pub fn zrange_by_score(
        &self,
        min: f64,
        max: f64,
        limit: usize,
    ) -> Result<Vec<(OwnedString, f64)>, EmqError> {
        let mut out = Vec::new();
        if limit == 0 || self.holds() != Holds::Zset {
            return Ok(out);
        }
        let (Some(first), Some(current), Some(next), Some(stop)) = (unsafe {
            (
                raw::RedisModule_ZsetFirstInScoreRange,
                raw::RedisModule_ZsetRangeCurrentElement,
                raw::RedisModule_ZsetRangeNext,
                raw::RedisModule_ZsetRangeStop,
            )
        }) else {
            return Err(EmqError::Internal);
        };
        let key = self.handle()?;
        // SAFETY: the key is an open zset; the range is stopped before returning.
        unsafe {
            if first(key, min, max, 0, 0) != raw::REDISMODULE_OK as c_int {
                return Ok(out);
            }
            loop {
                let mut score = 0.0;
                let ele = current(key, &mut score);
                match OwnedString::adopt(self.ctx, ele) {
                    Some(member) => out.push((member, score)),
                    None => break,
                }
                if out.len() >= limit || next(key) == 0 {
                    break;
                }
            }
            stop(key);
        }
        Ok(out)
    }

    /// The score of `member`, if it is in the zset.
    pub fn zscore(&self, member: Str<'_>) -> Option<f64> {
        if self.holds() != Holds::Zset {
            return None;
        }
        let f = unsafe { raw::RedisModule_ZsetScore }?;
        let mut score = 0.0;
        // SAFETY: the key is an open zset.
        let ok = unsafe { f(self.ptr?.as_ptr(), member.as_ptr(), &mut score) };
        (ok == raw::REDISMODULE_OK as c_int).then_some(score)
    }

    /// `ZREM key member`; whether it was there.
    pub fn zrem(&self, member: Str<'_>) -> Result<bool, EmqError> {
        if self.holds() != Holds::Zset {
            return Ok(false);
        }
        let f = unsafe { raw::RedisModule_ZsetRem }.ok_or(EmqError::Internal)?;
        let mut deleted: c_int = 0;
        // SAFETY: the key is an open zset.
        let ok = unsafe { f(self.handle()?, member.as_ptr(), &mut deleted) };
        if ok != raw::REDISMODULE_OK as c_int {
            return Err(EmqError::WrongType);
        }
        if deleted != 0 {
            self.modified.set(true);
        }
        Ok(deleted != 0)
    }

    /// `HGET key field`.
    pub fn hash_get(&self, field: &CStr) -> Option<OwnedString> {
        if self.holds() != Holds::Hash {
            return None;
        }
        let f = unsafe { raw::RedisModule_HashGet }?;
        let mut value: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: the key is an open hash; the variadic list is NULL-terminated. The value
        // is an auto-memory-free string we take ownership of.
        unsafe {
            f(
                self.ptr?.as_ptr(),
                raw::REDISMODULE_HASH_CFIELDS as c_int,
                field.as_ptr(),
                &mut value as *mut *mut raw::RedisModuleString,
                ptr::null::<c_char>(),
            )
        };
        OwnedString::adopt(self.ctx, value)
    }

    /// `HSET key field value` for one field.
    pub fn hash_set(&self, field: Str<'_>, value: Str<'_>) -> Result<(), EmqError> {
        let hset = unsafe { raw::RedisModule_HashSet }.ok_or(EmqError::Internal)?;
        // SAFETY: the key is open for writing; the variadic list is NULL-terminated.
        let n = unsafe {
            hset(
                self.write_handle()?,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.as_ptr(),
                value.as_ptr(),
                ptr::null::<c_char>(),
            )
        };
        if n < 0 {
            return Err(EmqError::WrongType);
        }
        Ok(())
    }

    /// `DEL key`.
    pub fn delete(&self) -> Result<(), EmqError> {
        let f = unsafe { raw::RedisModule_DeleteKey }.ok_or(EmqError::Internal)?;
        // SAFETY: the key is open for writing.
        if unsafe { f(self.write_handle()?) } != raw::REDISMODULE_OK as c_int {
            return Err(EmqError::Internal);
        }
        Ok(())
    }

    /// `PEXPIREAT key at_ms`.
    pub fn expire_at(&self, at_ms: i64) -> Result<(), EmqError> {
        let f = unsafe { raw::RedisModule_SetAbsExpire }.ok_or(EmqError::Internal)?;
        // SAFETY: the key is open for writing and not empty.
        if unsafe { f(self.write_handle()?, at_ms) } != raw::REDISMODULE_OK as c_int {
            return Err(EmqError::Internal);
        }
        Ok(())
    }

    pub fn name(&self) -> &OwnedString {
        self.name
    }

    pub fn holds(&self) -> Holds {
        let Some(ptr) = self.ptr else {
            return Holds::Nothing;
        };
        let Some(key_type) = (unsafe { raw::RedisModule_KeyType }) else {
            return Holds::Other;
        };
        // SAFETY: the key is open.
        match unsafe { key_type(ptr.as_ptr()) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Holds::Nothing,
            raw::REDISMODULE_KEYTYPE_HASH => Holds::Hash,
            raw::REDISMODULE_KEYTYPE_ZSET => Holds::Zset,
            _ => Holds::Other,
        }
    }

    /// Sets three hash fields in the given order, in one call.
    pub fn hash_set3(&self, fields: [(Str<'_>, Str<'_>); 3]) -> Result<(), EmqError> {
        let hset = unsafe { raw::RedisModule_HashSet }.ok_or(EmqError::Internal)?;
        let [(f1, v1), (f2, v2), (f3, v3)] = fields;
        // SAFETY: the key is open for writing; the variadic list is NULL-terminated.
        let n = unsafe {
            hset(
                self.write_handle()?,
                raw::REDISMODULE_HASH_NONE as c_int,
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

    /// `ZADD key score member`; whether the member was added or its score changed.
    pub fn zadd(&self, score: f64, member: Str<'_>) -> Result<bool, EmqError> {
        let zadd = unsafe { raw::RedisModule_ZsetAdd }.ok_or(EmqError::Internal)?;
        // In: no NX/XX; out: whether the member was added, its score changed, or neither.
        let mut flags: c_int = 0;
        // SAFETY: the key is open for writing and holds a zset or nothing.
        let status = unsafe { zadd(self.handle()?, score, member.as_ptr(), &mut flags) };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(EmqError::WrongType);
        }
        let changed =
            flags & (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as c_int != 0;
        if changed {
            self.modified.set(true);
        }
        Ok(changed)
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if self.modified.get() {
            if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
                // SAFETY: live context and key name.
                unsafe { signal(self.ctx, self.name.as_ptr()) };
            }
        }
        if let (Some(close), Some(ptr)) = (unsafe { raw::RedisModule_CloseKey }, self.ptr) {
            // SAFETY: opened by us and closed once.
            unsafe { close(ptr.as_ptr()) };
        }
    }
}

/// What a command does with a key, for the ACL check.
#[derive(Clone, Copy)]
pub enum Access {
    Read,
    ReadWrite,
}

/// The calling user's read+write permission on each key; a refusal is logged in `ACL LOG`
/// like the server's own key refusals.
pub fn check_access(ctx: &Context, keys: &[&OwnedString]) -> Result<(), EmqError> {
    check_permission(ctx, keys, Access::ReadWrite)
}

/// The calling user's permission on each key for `access`, logged in `ACL LOG` on refusal.
pub fn check_permission(
    ctx: &Context,
    keys: &[&OwnedString],
    access: Access,
) -> Result<(), EmqError> {
    let Some(check) = (unsafe { raw::RedisModule_ACLCheckKeyPermissions }) else {
        return Ok(());
    };
    let flags = match access {
        Access::Read => raw::REDISMODULE_CMD_KEY_ACCESS,
        Access::ReadWrite => raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
    } as c_int;
    with_acl_user(ctx, |user| {
        for key in keys {
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

/// The calling user's permission to run the command `argv` (name first), logged in `ACL LOG`
/// on refusal. The server checks this before a command runs; a blocked command served later
/// asks again, since the user's rules may have changed while it waited.
pub fn check_command(ctx: &Context, argv: &[*mut raw::RedisModuleString]) -> Result<(), EmqError> {
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

/// Runs `check` with the calling client's ACL user, looked up by name and freed after. A
/// client without a user (the primary's link, another module's `RM_Call` without `C`) may do
/// everything; a user that is not in the ACL list cannot be checked and is refused.
fn with_acl_user(
    ctx: &Context,
    check: impl FnOnce(*mut raw::RedisModuleUser) -> Result<(), EmqError>,
) -> Result<(), EmqError> {
    let (Some(get_user), Some(free_user)) = (unsafe {
        (
            raw::RedisModule_GetModuleUserFromUserName,
            raw::RedisModule_FreeModuleUser,
        )
    }) else {
        return Ok(());
    };
    // Only command handlers call this: timer and event contexts have no user to check.
    let Some(name) = current_user_name(ctx)? else {
        return Ok(());
    };
    // SAFETY: `name` is a live string; the user is freed below.
    let user = unsafe { get_user(name.as_ptr()) };
    if user.is_null() {
        // Not in the ACL list: a module-created user, whose rules cannot be read by name.
        return Err(EmqError::UncheckableUser);
    }
    let result = check(user);
    // SAFETY: obtained above, freed once.
    unsafe { free_user(user) };
    result
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
    let owned = |ptr: *mut raw::RedisModuleString| {
        NonNull::new(ptr).map(|ptr| OwnedString { ctx: ctx.ctx, ptr })
    };
    let id = client_id(ctx.ctx);
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

/// The id of the context's client (0 when the server cannot say).
pub(crate) fn client_id(ctx: *mut raw::RedisModuleCtx) -> u64 {
    match unsafe { raw::RedisModule_GetClientId } {
        // SAFETY: live context.
        Some(f) => unsafe { f(ctx) },
        None => 0,
    }
}

/// The database selected on the context's client.
pub(crate) fn selected_db(ctx: *mut raw::RedisModuleCtx) -> i32 {
    match unsafe { raw::RedisModule_GetSelectedDb } {
        // SAFETY: live context.
        Some(f) => unsafe { f(ctx) },
        None => 0,
    }
}

/// Selects `db` on the context's client; whether the server took it.
pub(crate) fn select_db(ctx: *mut raw::RedisModuleCtx, db: i32) -> bool {
    match unsafe { raw::RedisModule_SelectDb } {
        // SAFETY: live context; an out-of-range db is refused with ERR.
        Some(f) => (unsafe { f(ctx, db) }) == raw::REDISMODULE_OK as c_int,
        None => db == 0,
    }
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
pub const NOTIFY_GENERIC: c_int = raw::REDISMODULE_NOTIFY_GENERIC;
pub const NOTIFY_EXPIRED: c_int = raw::REDISMODULE_NOTIFY_EXPIRED;
pub const NOTIFY_EVICTED: c_int = raw::REDISMODULE_NOTIFY_EVICTED;

/// Replicates `cmd args...` to replicas and the AOF. Several calls within one command (or
/// timer tick) reach them as one MULTI/EXEC.
pub fn replicate(ctx: &Context, cmd: &CStr, args: &[Str<'_>]) {
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
pub fn count_change(ctx: &Context) {
    if let Some(f) = unsafe { raw::RedisModule_ReplicateVerbatim } {
        // SAFETY: live context.
        unsafe { f(ctx.ctx) };
    }
}

/// What `INFO replication` says about who may receive propagated commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicationView {
    pub primary: bool,
    pub replicas: i64,
    pub backlog: bool,
}

/// Reads `role`, `connected_slaves` and `repl_backlog_active` from `INFO replication`;
/// `None` if any of them is missing.
pub fn replication_view(ctx: &Context) -> Option<ReplicationView> {
    let field_i = unsafe { raw::RedisModule_ServerInfoGetFieldSigned? };
    with_server_info(ctx, c"replication", |data| {
        let primary = info_text(data, c"role")? == b"master";
        let (mut e1, mut e2) = (0, 0);
        // SAFETY: `data` is live for this closure.
        let (replicas, backlog) = unsafe {
            (
                field_i(data, c"connected_slaves".as_ptr(), &mut e1),
                field_i(data, c"repl_backlog_active".as_ptr(), &mut e2),
            )
        };
        let ok = raw::REDISMODULE_OK as c_int;
        (e1 == ok && e2 == ok).then_some(ReplicationView {
            primary,
            replicas,
            backlog: backlog != 0,
        })
    })
}

/// One text field of an `INFO` section (`maxmemory_policy` of `memory`, say).
pub fn info_field(ctx: &Context, section: &CStr, field: &CStr) -> Option<Vec<u8>> {
    with_server_info(ctx, section, |data| info_text(data, field))
}

/// Runs `read` on one `INFO` section, freed afterwards.
fn with_server_info<T>(
    ctx: &Context,
    section: &CStr,
    read: impl FnOnce(*mut raw::RedisModuleServerInfoData) -> Option<T>,
) -> Option<T> {
    let (get, free) = unsafe {
        (
            raw::RedisModule_GetServerInfo?,
            raw::RedisModule_FreeServerInfo?,
        )
    };
    // SAFETY: live context; the data is freed once, after `read`.
    let data = unsafe { get(ctx.ctx, section.as_ptr()) };
    if data.is_null() {
        return None;
    }
    let value = read(data);
    // SAFETY: as above.
    unsafe { free(ctx.ctx, data) };
    value
}

/// A text field of live `INFO` data, copied.
fn info_text(data: *mut raw::RedisModuleServerInfoData, field: &CStr) -> Option<Vec<u8>> {
    let field_c = unsafe { raw::RedisModule_ServerInfoGetFieldC? };
    // SAFETY: live data; the text is copied before the data can be freed.
    let value = unsafe { field_c(data, field.as_ptr()) };
    // SAFETY: a NUL-terminated string owned by `data`.
    (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) }.to_bytes().to_vec())
}

/// Wakes clients blocked on `key` (a ZADD to an existing zset does not do it by itself).
pub fn signal_ready(ctx: &Context, key: Str<'_>) {
    if let Some(f) = unsafe { raw::RedisModule_SignalKeyAsReady } {
        // SAFETY: live context and key name.
        unsafe { f(ctx.ctx, key.as_ptr()) };
    }
}

/// The server's context flags (MULTI, LUA, MASTER, LOADING, ...).
pub fn context_flags(ctx: &Context) -> u32 {
    match unsafe { raw::RedisModule_GetContextFlags } {
        // SAFETY: live context.
        Some(f) => (unsafe { f(ctx.ctx) }) as u32,
        None => 0,
    }
}

/// The raw callback type of a blocked client's reply and timeout.
pub type BlockedCallback = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// Blocks the calling client until `key` is signalled ready (`on_ready` then decides whether
/// to answer or keep waiting) or `timeout_ms` passes (0 waits forever).
pub fn block_on_key(
    ctx: &Context,
    key: Str<'_>,
    timeout_ms: i64,
    on_ready: BlockedCallback,
    on_timeout: BlockedCallback,
) -> Result<(), EmqError> {
    let block = unsafe { raw::RedisModule_BlockClientOnKeys }.ok_or(EmqError::Internal)?;
    let mut keys = [key.as_ptr()];
    // SAFETY: live context; the server copies the key list.
    let bc = unsafe {
        block(
            ctx.ctx,
            Some(on_ready),
            Some(on_timeout),
            None,
            timeout_ms,
            keys.as_mut_ptr(),
            1,
            ptr::null_mut(),
        )
    };
    if bc.is_null() {
        return Err(EmqError::Internal);
    }
    Ok(())
}

/// Words the hot paths use on every call (field names and fixed values), created once at
/// load and freed at unload, so no call allocates them.
pub struct Words {
    pub state: Str<'static>,
    pub attempts: Str<'static>,
    pub payload: Str<'static>,
    pub error: Str<'static>,
    pub pending: Str<'static>,
    pub scheduled: Str<'static>,
    pub active: Str<'static>,
    pub done: Str<'static>,
    pub dead: Str<'static>,
    pub zero: Str<'static>,
}

// SAFETY: the strings are only touched on the server's main thread.
unsafe impl Send for Words {}
unsafe impl Sync for Words {}

static WORDS: std::sync::atomic::AtomicPtr<Words> =
    std::sync::atomic::AtomicPtr::new(ptr::null_mut());

impl Words {
    fn all(&self) -> [Str<'static>; 10] {
        [
            self.state,
            self.attempts,
            self.payload,
            self.error,
            self.pending,
            self.scheduled,
            self.active,
            self.done,
            self.dead,
            self.zero,
        ]
    }
}

fn retained(text: &[u8]) -> Option<Str<'static>> {
    let create = unsafe { raw::RedisModule_CreateString }?;
    // SAFETY: a NULL context makes a string no call frees; `free_words` frees it.
    let p = unsafe { create(ptr::null_mut(), text.as_ptr().cast::<c_char>(), text.len()) };
    // SAFETY: kept alive until `free_words`.
    NonNull::new(p).map(|p| unsafe { Str::from_raw(p) })
}

/// At load: keys are signalled as modified only when a write changed them (see [`Key`]);
/// `more` adds further options.
pub fn set_options(ctx: &Context, more: c_int) -> Result<(), EmqError> {
    let (Some(set_options), Some(_)) = (unsafe {
        (
            raw::RedisModule_SetModuleOptions,
            raw::RedisModule_SignalModifiedKey,
        )
    }) else {
        return Err(EmqError::Internal);
    };
    // SAFETY: the load context.
    unsafe {
        set_options(
            ctx.ctx,
            raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int | more,
        )
    };
    Ok(())
}

/// Creates the words (module load).
pub fn init_words() -> Result<(), EmqError> {
    let w = |t: &[u8]| retained(t).ok_or(EmqError::Internal);
    let words = Box::new(Words {
        state: w(b"state")?,
        attempts: w(b"attempts")?,
        payload: w(b"payload")?,
        error: w(b"error")?,
        pending: w(b"pending")?,
        scheduled: w(b"scheduled")?,
        active: w(b"active")?,
        done: w(b"done")?,
        dead: w(b"dead")?,
        zero: w(b"0")?,
    });
    let old = WORDS.swap(Box::into_raw(words), std::sync::atomic::Ordering::SeqCst);
    free(old);
    Ok(())
}

/// Frees the words and the cached key names (module unload).
pub fn free_words() {
    free(WORDS.swap(ptr::null_mut(), std::sync::atomic::Ordering::SeqCst));
    free_names();
}

fn free(words: *mut Words) {
    if words.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `init_words`, swapped out exactly once.
    let words = unsafe { Box::from_raw(words) };
    if let Some(f) = unsafe { raw::RedisModule_FreeString } {
        for s in words.all() {
            // SAFETY: created with a NULL context in `retained`.
            unsafe { f(ptr::null_mut(), s.as_ptr()) };
        }
    }
}

/// The words, or `Internal` before load.
pub fn words() -> Result<&'static Words, EmqError> {
    let p = WORDS.load(std::sync::atomic::Ordering::Acquire);
    // SAFETY: set at load, cleared only at unload, when no command runs.
    unsafe { p.as_ref() }.ok_or(EmqError::Internal)
}

// ---- hot key names ----------------------------------------------------------------------

/// A key name kept as a server string by the name cache.
struct Name {
    bytes: Vec<u8>,
    ptr: NonNull<raw::RedisModuleString>,
}

// SAFETY: the cache is used on the server's main thread only (commands and timers); the
// mutex orders any other access.
unsafe impl Send for Name {}

/// How many key names the cache keeps; beyond that, the oldest is replaced.
const NAME_SLOTS: usize = 16;

/// The key names every call of a queue's hot paths opens (its `pending` set, ...), kept as
/// server strings so a command takes a reference instead of creating and freeing a string.
/// A server string never changes once made and the server only takes references to key
/// names, so one string can serve every call.
static NAMES: Mutex<(Vec<Name>, usize)> = Mutex::new((Vec::new(), 0));

impl OwnedString {
    /// `bytes` as a server string, shared through the name cache: for key names that many
    /// calls open, such as a queue's `pending` set.
    pub fn cached(ctx: &Context, bytes: &[u8]) -> Result<Self, EmqError> {
        let hold = unsafe { raw::RedisModule_HoldString }.ok_or(EmqError::Internal)?;
        let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
        let (slots, next) = &mut *names;
        let found = slots.iter().find(|n| n.bytes == bytes).map(|n| n.ptr);
        let ptr = match found {
            Some(ptr) => ptr,
            None => {
                let made = retained(bytes).ok_or(EmqError::Internal)?;
                let name = Name {
                    bytes: bytes.to_vec(),
                    ptr: made.ptr,
                };
                if slots.len() < NAME_SLOTS {
                    slots.push(name);
                } else {
                    let old = std::mem::replace(&mut slots[*next], name);
                    *next = (*next + 1) % NAME_SLOTS;
                    release(old.ptr);
                }
                made.ptr
            }
        };
        // SAFETY: a live string of the cache; the reference taken here is dropped by the
        // returned value's FreeString.
        let held = unsafe { hold(ctx.ctx, ptr.as_ptr()) };
        NonNull::new(held)
            .map(|ptr| Self { ctx: ctx.ctx, ptr })
            .ok_or(EmqError::Internal)
    }
}

/// Drops the cache's own reference to a name (callers may still hold theirs).
fn release(ptr: NonNull<raw::RedisModuleString>) {
    if let Some(f) = unsafe { raw::RedisModule_FreeString } {
        // SAFETY: created with a NULL context in `retained`, released once by the cache.
        unsafe { f(ptr::null_mut(), ptr.as_ptr()) };
    }
}

/// Empties the cache, its own buffer included (the module's memory must be gone at unload).
fn free_names() {
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    for name in std::mem::take(&mut names.0) {
        release(name.ptr);
    }
    names.1 = 0;
}
