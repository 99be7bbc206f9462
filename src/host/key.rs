//! An open key and what EchoMQ does with one: the zset and hash operations of the lifecycle.

use std::cell::Cell;
use std::os::raw::{c_char, c_int};
use std::ptr::{self, NonNull};

use valkey_module::{raw, Context};

use crate::protocol::{EmqError, Holds};

use super::string::{string_bytes, OwnedString, Str, Text};

const READ_WRITE: u32 = raw::REDISMODULE_READ | raw::REDISMODULE_WRITE;

/// One field of [`Key::hash_fields`]'s walk: copied, nothing else (no panic can start here).
unsafe extern "C" fn on_hash_field(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    privdata: *mut std::ffi::c_void,
) {
    // SAFETY: `privdata` is the vector of `hash_fields`, alive for the scan; the strings are
    // the server's, live for this callback.
    let fields = unsafe { &mut *privdata.cast::<Vec<(Vec<u8>, Vec<u8>)>>() };
    fields.push((string_bytes(field).to_vec(), string_bytes(value).to_vec()));
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
    name: KeyName<'n>,
    ctx: *mut raw::RedisModuleCtx,
    modified: Cell<bool>,
}

/// A key's name: borrowed from the caller, or made for the key and kept with it.
enum KeyName<'n> {
    Borrowed(&'n OwnedString),
    Owned(OwnedString),
}

impl<'n> Key<'n> {
    /// Opens `name` for reading and writing (a missing key opens empty).
    pub fn open(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        Self::open_mode(ctx, KeyName::Borrowed(name), READ_WRITE)
    }

    /// Opens `name` for reading only, as a read command's lookup: counted in the server's
    /// keyspace hits and misses.
    pub fn open_read(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        Self::open_mode(ctx, KeyName::Borrowed(name), raw::REDISMODULE_READ)
    }

    /// Opens `name`, kept with the key, for reading and writing (`write`) or reading only.
    pub fn open_owned(ctx: &Context, name: OwnedString, write: bool) -> Result<Self, EmqError> {
        let mode = if write {
            READ_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        Self::open_mode(ctx, KeyName::Owned(name), mode)
    }

    /// Opens `name` to see what it holds, before a write or in the timer: like a write
    /// command's lookups, not counted in keyspace hits and misses, no `keymiss` event, and the
    /// key's LRU/LFU left as it is. (Servers that lack these flags ignore them.)
    pub fn probe(ctx: &Context, name: &'n OwnedString) -> Result<Self, EmqError> {
        let quiet = raw::REDISMODULE_OPEN_KEY_NOSTATS
            | raw::REDISMODULE_OPEN_KEY_NONOTIFY
            | raw::REDISMODULE_OPEN_KEY_NOTOUCH;
        Self::open_mode(ctx, KeyName::Borrowed(name), raw::REDISMODULE_READ | quiet)
    }

    fn open_mode(ctx: &Context, name: KeyName<'n>, mode: u32) -> Result<Self, EmqError> {
        let open = unsafe { raw::RedisModule_OpenKey }.ok_or(EmqError::Internal)?;
        let text = match &name {
            KeyName::Borrowed(name) => *name,
            KeyName::Owned(name) => name,
        };
        // SAFETY: live context and string; the key is closed in Drop.
        let p = unsafe { open(ctx.ctx, text.as_ptr(), mode as c_int) };
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

    /// `ZCARD`, `HLEN`: the key's length (0 for a missing key).
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
    ) -> Result<Vec<(Text<'static>, f64)>, EmqError> {
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
                    Some(member) => out.push((Text::Owned(member), score)),
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

    /// The highest score in the zset (`None` when it is empty or missing).
    pub fn zlast_score(&self) -> Result<Option<f64>, EmqError> {
        if self.holds() != Holds::Zset {
            return Ok(None);
        }
        let (Some(last), Some(current), Some(stop)) = (unsafe {
            (
                raw::RedisModule_ZsetLastInScoreRange,
                raw::RedisModule_ZsetRangeCurrentElement,
                raw::RedisModule_ZsetRangeStop,
            )
        }) else {
            return Err(EmqError::Internal);
        };
        let key = self.handle()?;
        // SAFETY: the key is an open zset; the range is stopped before returning, and the
        // element it hands over is freed by `adopt`'s string.
        unsafe {
            if last(key, f64::NEG_INFINITY, f64::INFINITY, 0, 0) != raw::REDISMODULE_OK as c_int {
                return Ok(None);
            }
            let mut score = 0.0;
            let found = OwnedString::adopt(self.ctx, current(key, &mut score)).is_some();
            stop(key);
            Ok(found.then_some(score))
        }
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

    /// `HGET key field`, the field a server string (any bytes; the hot paths' names are made
    /// once at load, as a C-string name would be copied into a new string on every call).
    pub fn hash_get(&self, field: Str<'_>) -> Option<OwnedString> {
        if self.holds() != Holds::Hash {
            return None;
        }
        let f = unsafe { raw::RedisModule_HashGet }?;
        let mut value: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: the key is an open hash; the field is a server string; the variadic list is
        // NULL-terminated. The value is an auto-memory-free string we take ownership of.
        unsafe {
            f(
                self.ptr?.as_ptr(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.as_ptr(),
                &mut value as *mut *mut raw::RedisModuleString,
                ptr::null::<c_char>(),
            )
        };
        OwnedString::adopt(self.ctx, value)
    }

    /// `HMGET key f1 f2 f3`: three fields in one call of the server's hash read, which looks
    /// each up as `HGET` does but makes one call, one type check and one argument walk of
    /// them (the claim and the settle each read three fields of every job's row).
    #[inline]
    pub fn hash_get3(&self, fields: [Str<'_>; 3]) -> [Option<OwnedString>; 3] {
        self.hash_get_n(fields)
    }

    /// `HMGET key f1 f2 f3 f4`, as [`Key::hash_get3`] (a parent's hand-over reads its child's
    /// field and three counters).
    #[inline]
    pub fn hash_get4(&self, fields: [Str<'_>; 4]) -> [Option<OwnedString>; 4] {
        self.hash_get_n(fields)
    }

    /// `HMGET` of three or four fields (none for another count: a C variadic call cannot take
    /// a slice, so one call is written for each count).
    #[inline(always)]
    fn hash_get_n<const N: usize>(&self, fields: [Str<'_>; N]) -> [Option<OwnedString>; N] {
        let none = || [(); N].map(|()| None);
        if self.holds() != Holds::Hash {
            return none();
        }
        let (Some(f), Some(key)) = (unsafe { raw::RedisModule_HashGet }, self.ptr) else {
            return none();
        };
        // The crate's `hash_get_multi` copies each field name into a new server string per
        // call; these names are made once at load.
        let mut values: [*mut raw::RedisModuleString; N] = [ptr::null_mut(); N];
        let v = values.as_mut_ptr();
        let (k, all, end) = (
            key.as_ptr(),
            raw::REDISMODULE_HASH_NONE as c_int,
            ptr::null::<c_char>(),
        );
        // Field i and its value's slot (i < N in each arm below).
        let p = |i: usize| (fields[i].as_ptr(), v.wrapping_add(i));
        // SAFETY: the key is an open hash; the fields are server strings; the variadic list is
        // field, value pointer pairs, NULL-terminated, each value pointer one of `values`'
        // slots. Each value is an auto-memory-free string we take ownership of (NULL for a
        // missing field).
        #[rustfmt::skip]
        unsafe {
            match N {
                3 => f(k, all, p(0).0, p(0).1, p(1).0, p(1).1, p(2).0, p(2).1, end),
                4 => f(k, all, p(0).0, p(0).1, p(1).0, p(1).1, p(2).0, p(2).1, p(3).0, p(3).1, end),
                _ => return none(),
            }
        };
        values.map(|v| OwnedString::adopt(self.ctx, v))
    }

    /// Every field of the hash with its value, in one pass (`RM_ScanKey`), up to `limit` of
    /// them; `None` for a hash with more (or a key that is not a hash), to be read field by
    /// field instead. A few-field hash costs one walk, not one lookup a field.
    pub fn hash_fields(&self, limit: usize) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        if self.holds() != Holds::Hash || self.len() > limit as u64 {
            return None;
        }
        // The crate has no safe `RM_ScanKey`.
        let (create, scan, destroy) = unsafe {
            (
                raw::RedisModule_ScanCursorCreate?,
                raw::RedisModule_ScanKey?,
                raw::RedisModule_ScanCursorDestroy?,
            )
        };
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(self.len() as usize);
        let privdata = (&raw mut fields).cast::<std::ffi::c_void>();
        // SAFETY: the key is an open hash; the cursor is created, used and destroyed here; the
        // callback only copies bytes into `fields`, alive for the scan.
        unsafe {
            let cursor = create();
            while scan(self.ptr?.as_ptr(), cursor, Some(on_hash_field), privdata) != 0 {}
            destroy(cursor);
        }
        (fields.len() <= limit).then_some(fields)
    }

    /// `HSET key field value ...` for one to four fields, in the given order, in one call.
    pub fn hash_set(&self, fields: &[(Str<'_>, Str<'_>)]) -> Result<(), EmqError> {
        let hset = unsafe { raw::RedisModule_HashSet }.ok_or(EmqError::Internal)?;
        if !(1..=4).contains(&fields.len()) {
            return Err(EmqError::Internal);
        }
        let key = self.write_handle()?;
        let none = raw::REDISMODULE_HASH_NONE as c_int;
        let end = ptr::null::<c_char>();
        let p = |i: usize| (fields[i].0.as_ptr(), fields[i].1.as_ptr());
        // SAFETY (each call): the key is open for writing; the fields and values are server
        // strings; the variadic list is NULL-terminated. (A C variadic call cannot take a
        // slice: one call for each count.)
        let n = unsafe {
            match fields.len() {
                1 => hset(key, none, p(0).0, p(0).1, end),
                2 => hset(key, none, p(0).0, p(0).1, p(1).0, p(1).1, end),
                3 => hset(
                    key,
                    none,
                    p(0).0,
                    p(0).1,
                    p(1).0,
                    p(1).1,
                    p(2).0,
                    p(2).1,
                    end,
                ),
                4 => hset(
                    key,
                    none,
                    p(0).0,
                    p(0).1,
                    p(1).0,
                    p(1).1,
                    p(2).0,
                    p(2).1,
                    p(3).0,
                    p(3).1,
                    end,
                ),
                _ => return Err(EmqError::Internal),
            }
        };
        if n < 0 {
            return Err(EmqError::WrongType);
        }
        Ok(())
    }

    /// `HDEL key field`, the field a server string (any bytes); whether the field was there.
    pub fn hash_del(&self, field: Str<'_>) -> Result<bool, EmqError> {
        if self.holds() != Holds::Hash {
            return Ok(false);
        }
        let hset = unsafe { raw::RedisModule_HashSet }.ok_or(EmqError::Internal)?;
        // `REDISMODULE_HASH_DELETE`, a C macro: the value that deletes its field.
        let delete = ptr::without_provenance_mut::<raw::RedisModuleString>(1);
        // SAFETY: the key is an open hash; the field is a server string; the variadic list is
        // NULL-terminated.
        let n = unsafe {
            hset(
                self.handle()?,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.as_ptr(),
                delete,
                ptr::null::<c_char>(),
            )
        };
        if n > 0 {
            self.modified.set(true);
        }
        Ok(n > 0)
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
        match &self.name {
            KeyName::Borrowed(name) => name,
            KeyName::Owned(name) => name,
        }
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
            raw::REDISMODULE_KEYTYPE_STREAM => Holds::Stream,
            _ => Holds::Other,
        }
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

/// The expiry EchoMQ is announcing (`expire` event) for a key, by the key name's string, while
/// the event runs: the event names the same string, so a reader of it need not open the key
/// again. Cleared as soon as the event returns, so no later string at the same address matches.
static LAST_EXPIRY: std::sync::Mutex<(usize, i64)> = std::sync::Mutex::new((0, 0));

/// Runs `announce` (the `expire` event of `name`) with `at_ms` known as its new expiry.
pub fn announcing_expiry(name: &OwnedString, at_ms: i64, announce: impl FnOnce()) {
    *LAST_EXPIRY.lock().unwrap_or_else(|p| p.into_inner()) = (name.as_ptr() as usize, at_ms);
    announce();
    *LAST_EXPIRY.lock().unwrap_or_else(|p| p.into_inner()) = (0, 0);
}

/// The expiry EchoMQ is announcing for the key `name`, while its `expire` event runs.
pub fn announced_expiry(name: Str<'_>) -> Option<i64> {
    let last = *LAST_EXPIRY.lock().unwrap_or_else(|p| p.into_inner());
    (last.0 != 0 && last.0 == name.as_ptr() as usize).then_some(last.1)
}

/// When the key `name` expires (unix ms), if it exists and has a time to live; looked up
/// quietly, as [`Key::probe`] does (no keyspace hit or miss, no `keymiss` event, LRU kept).
/// For the key EchoMQ has just given an expiry (its event being handled), that expiry.
pub fn expires_at(ctx: &Context, name: Str<'_>) -> Option<i64> {
    if let Some(at) = announced_expiry(name) {
        return Some(at);
    }
    let (Some(open), Some(close), Some(abs_expire)) = (unsafe {
        (
            raw::RedisModule_OpenKey,
            raw::RedisModule_CloseKey,
            raw::RedisModule_GetAbsExpire,
        )
    }) else {
        return None;
    };
    let mode = raw::REDISMODULE_READ
        | raw::REDISMODULE_OPEN_KEY_NOSTATS
        | raw::REDISMODULE_OPEN_KEY_NONOTIFY
        | raw::REDISMODULE_OPEN_KEY_NOTOUCH;
    // SAFETY: live context and string; the key is closed below.
    let key = NonNull::new(unsafe { open(ctx.ctx, name.as_ptr(), mode as c_int) })?;
    // SAFETY: the key is open; -1 means it has no expiry (or does not exist).
    let at = unsafe { abs_expire(key.as_ptr()) };
    // SAFETY: opened above, closed once.
    unsafe { close(key.as_ptr()) };
    (at >= 0).then_some(at)
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if self.modified.get() {
            if let Some(signal) = unsafe { raw::RedisModule_SignalModifiedKey } {
                // SAFETY: live context and key name.
                unsafe { signal(self.ctx, self.name().as_ptr()) };
            }
        }
        if let (Some(close), Some(ptr)) = (unsafe { raw::RedisModule_CloseKey }, self.ptr) {
            // SAFETY: opened by us and closed once.
            unsafe { close(ptr.as_ptr()) };
        }
    }
}
