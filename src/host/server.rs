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
    let info = ctx.server_info("replication");
    Some(ReplicationView {
        primary: info.field_c("role")? == "master",
        replicas: info.field_signed("connected_slaves")?,
        backlog: info.field_signed("repl_backlog_active")? != 0,
    })
}

/// One text field of an `INFO` section (`maxmemory_policy` of `memory`, say).
pub fn info_field(ctx: &Context, section: &str, field: &str) -> Option<Vec<u8>> {
    let info = ctx.server_info(section);
    info.field_c(field).map(|v| v.as_bytes().to_vec())
}

/// The server's version as `0x00MMmmpp` (Valkey's own numbering on Valkey, Redis's on Redis),
/// or 0 where the server cannot say.
pub fn version() -> c_int {
    // `GetServerVersion` takes no context.
    match Context::dummy().get_server_version() {
        Ok(v) => (v.major << 16) | (v.minor << 8) | v.patch,
        Err(_) => 0,
    }
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

/// The name EchoMQ registers itself under (`MODULE LIST`, `MODULE UNLOAD emq`).
pub const MODULE_NAME: &CStr = c"emq";

/// Whether the server has loaded a module that may take keyspace events: any but EchoMQ,
/// `leaving` (a module being unloaded, still listed) and the Lua scripting engine Valkey 9
/// loads as a module of its own (listed as `lua` at path `lua`), which takes none. `true` if
/// the server cannot say.
pub fn other_modules_loaded(ctx: &Context, leaving: Option<&str>) -> bool {
    let Ok(ValkeyValue::Array(modules)) = ctx.call("MODULE", &["LIST"]) else {
        return true;
    };
    // Each module: its fields as name-value pairs (`name`, `ver`, `path`, `args`).
    let field = |entry: &ValkeyValue, wanted: &str| match entry {
        ValkeyValue::Array(fields) => fields
            .chunks(2)
            .find(|pair| pair.len() == 2 && reply_text(&pair[0]).as_deref() == Some(wanted))
            .and_then(|pair| reply_text(&pair[1])),
        _ => None,
    };
    modules.iter().any(|m| {
        let (name, path) = (field(m, "name"), field(m, "path"));
        let built_in_lua = name.as_deref() == Some("lua") && path.as_deref() == Some("lua");
        name.as_deref() != MODULE_NAME.to_str().ok() && name.as_deref() != leaving && !built_in_lua
    })
}

/// Whether `notify-keyspace-events` publishes keyspace events to clients (it names a channel
/// kind: `K` or `E`); `true` if the server cannot say.
pub fn keyspace_channels(ctx: &Context) -> bool {
    let Ok(ValkeyValue::Array(reply)) = ctx.call("CONFIG", &["GET", "notify-keyspace-events"])
    else {
        return true;
    };
    match reply.get(1).and_then(reply_text) {
        Some(flags) => flags.contains(['K', 'E']),
        None => true,
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
