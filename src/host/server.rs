//! What the server says of itself (its version, `INFO` fields, its clock), its log, and the
//! replies of the server's own commands run through `ctx.call`.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use valkey_module::{raw, Context, ValkeyValue};

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

/// The server's version as `0x00MMmmpp` (Valkey's own numbering on Valkey, Redis's on Redis),
/// or 0 where the server cannot say.
pub fn version() -> c_int {
    // SAFETY: a server function without arguments.
    unsafe { raw::RedisModule_GetServerVersion }.map_or(0, |f| unsafe { f() })
}

/// A reply of the server's own command (`ctx.call`) as text: a string, or an integer in
/// decimal; `None` for anything else.
pub fn reply_text(v: &ValkeyValue) -> Option<String> {
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
/// argument of a `%s` format, never a format itself. (The crate's `log` passes the message as
/// the format, so a `%` in a queue name would be read as one, and panics on a NUL byte.)
pub fn log(ctx: &Context, level: &CStr, message: &str) {
    let Some(log) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: NUL-terminated strings; "%s" takes exactly one string argument.
    unsafe { log(ctx.ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
}

/// A context of this module's own, for code that runs without one (the command filter, slot
/// migration events), or null before load.
static MODULE_CTX: std::sync::atomic::AtomicPtr<raw::RedisModuleCtx> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Creates the module's own context (module load).
pub(crate) fn create_module_ctx(ctx: &Context) {
    if let Some(detached) = unsafe { raw::RedisModule_GetDetachedThreadSafeContext } {
        // SAFETY: OnLoad context; freed in `free_module_ctx`.
        let made = unsafe { detached(ctx.ctx) };
        free(MODULE_CTX.swap(made, std::sync::atomic::Ordering::SeqCst));
    }
}

/// Frees the module's own context (module unload).
pub(crate) fn free_module_ctx() {
    free(MODULE_CTX.swap(std::ptr::null_mut(), std::sync::atomic::Ordering::SeqCst));
}

fn free(detached: *mut raw::RedisModuleCtx) {
    if let (false, Some(free)) = (detached.is_null(), unsafe {
        raw::RedisModule_FreeThreadSafeContext
    }) {
        // SAFETY: created in `create_module_ctx`, freed once.
        unsafe { free(detached) };
    }
}

/// The module's own context, as a [`Context`] (its pointer is null before load).
pub(crate) fn module_ctx() -> Context {
    Context::new(MODULE_CTX.load(std::sync::atomic::Ordering::SeqCst))
}

/// Logs `message` at `level` with the module's name, from code that has no context.
pub fn log_module(level: &CStr, message: &str) {
    log(&module_ctx(), level, message);
}
