//! Server strings: borrowed ([`Str`]), owned ([`OwnedString`]), either ([`Text`]), retained
//! for the module's life, and the cache of hot key names.

use std::os::raw::c_char;
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use valkey_module::{raw, Context};

use crate::protocol::EmqError;

/// The bytes of a server string (empty for a null one).
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

/// A server string borrowed for the duration of a call: an argument or an [`OwnedString`].
#[derive(Clone, Copy)]
pub struct Str<'a> {
    ptr: NonNull<raw::RedisModuleString>,
    _life: std::marker::PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> Str<'a> {
    /// # Safety
    /// `ptr` must be a live server string for the chosen lifetime.
    pub(crate) unsafe fn from_raw(ptr: NonNull<raw::RedisModuleString>) -> Self {
        Self {
            ptr,
            _life: std::marker::PhantomData,
        }
    }

    pub(crate) fn as_ptr(self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }

    pub fn bytes(self) -> &'a [u8] {
        string_bytes(self.ptr.as_ptr())
    }
}

/// A string the module created (or was handed) and frees on drop.
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

    /// Takes ownership of a string the server handed us (a zset element, a hash value).
    pub(crate) fn adopt(
        ctx: *mut raw::RedisModuleCtx,
        p: *mut raw::RedisModuleString,
    ) -> Option<Self> {
        NonNull::new(p).map(|ptr| Self { ctx, ptr })
    }

    pub(crate) fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }

    pub fn as_str(&self) -> Str<'_> {
        // SAFETY: alive as long as `self`.
        unsafe { Str::from_raw(self.ptr) }
    }

    pub fn bytes(&self) -> &[u8] {
        string_bytes(self.ptr.as_ptr())
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

/// A string a store writes: a client's argument, borrowed for the call, or one of its own.
pub enum Text<'a> {
    Borrowed(Str<'a>),
    Owned(OwnedString),
}

impl Text<'_> {
    pub fn as_str(&self) -> Str<'_> {
        match self {
            Text::Borrowed(s) => *s,
            Text::Owned(s) => s.as_str(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Text::Borrowed(s) => s.bytes(),
            Text::Owned(s) => s.bytes(),
        }
    }
}

/// A string no call frees, made without a context (the words, the name cache); freed by
/// [`release`].
pub(crate) fn retained(text: &[u8]) -> Option<Str<'static>> {
    let create = unsafe { raw::RedisModule_CreateString }?;
    // SAFETY: a NULL context makes a string no call frees; `release` frees it.
    let p = unsafe { create(ptr::null_mut(), text.as_ptr().cast::<c_char>(), text.len()) };
    // SAFETY: kept alive until `release`.
    NonNull::new(p).map(|p| unsafe { Str::from_raw(p) })
}

/// Frees a [`retained`] string (callers may still hold references of their own).
pub(crate) fn release(ptr: NonNull<raw::RedisModuleString>) {
    if let Some(f) = unsafe { raw::RedisModule_FreeString } {
        // SAFETY: created with a NULL context in `retained`, released once.
        unsafe { f(ptr::null_mut(), ptr.as_ptr()) };
    }
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
    #[inline]
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

/// Empties the cache, its own buffer included (the module's memory must be gone at unload).
pub fn free_names() {
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    for name in std::mem::take(&mut names.0) {
        release(name.ptr);
    }
    names.1 = 0;
}
