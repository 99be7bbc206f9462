//! Loading and unloading: the module's entry points, its settings, its options, and the
//! strings it keeps for its life.

use std::os::raw::{c_int, c_longlong, c_void};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use valkey_module::raw::ModuleOptions;
use valkey_module::{raw, Context, Status};

use crate::protocol::settings::{LEARN_FOREIGN_WRITES, METRICS, SETTINGS};
use crate::protocol::EmqError;

use super::string::{free_names, string_bytes};
use super::{server, words};

/// Defines the server's entry points, `RedisModule_OnLoad` and `RedisModule_OnUnload`, for
/// `$init` (the context and the load arguments; an error refuses the load) and `$deinit` (an
/// error refuses the unload).
#[macro_export]
macro_rules! export_module {
    ($init:path, $deinit:path) => {
        /// The server's entry point at load.
        ///
        /// # Safety
        /// Called by the server with a live load context and `argc` arguments.
        #[allow(unsafe_code)] // the server finds the entry points by these names
        #[no_mangle]
        pub unsafe extern "C" fn RedisModule_OnLoad(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
            argv: *mut *mut valkey_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            // SAFETY: as the server calls it.
            unsafe { $crate::host::load::on_load(ctx, argv, argc, $init) }
        }

        /// The server's entry point at `MODULE UNLOAD`; an error refuses the unload.
        ///
        /// # Safety
        /// Called by the server with a live context.
        #[allow(unsafe_code)] // as above
        #[no_mangle]
        pub unsafe extern "C" fn RedisModule_OnUnload(
            ctx: *mut valkey_module::raw::RedisModuleCtx,
        ) -> std::os::raw::c_int {
            $crate::host::load::on_unload(ctx, $deinit)
        }
    };
}

/// `RedisModule_OnLoad`. Only `RedisModule_Init` runs before the module's API (allocator
/// included) is usable; everything after it is behind the panic guard.
///
/// # Safety
/// `ctx` is the server's live load context; `argv` holds `argc` live strings.
pub unsafe fn on_load(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    init: fn(&Context, &[&[u8]]) -> Status,
) -> c_int {
    // SAFETY: the server's load context; the name is a static NUL-terminated string.
    let status = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            server::MODULE_NAME.as_ptr(),
            module_version(),
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if status != raw::REDISMODULE_OK as c_int {
        return raw::REDISMODULE_ERR as c_int;
    }
    match catch_unwind(|| {
        let args: Vec<&[u8]> = match usize::try_from(argc) {
            // SAFETY: the server passes `argc` live strings for the duration of the call.
            Ok(n) if n > 0 && !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) }
                .iter()
                .map(|&a| string_bytes(a))
                .collect(),
            _ => Vec::new(),
        };
        init(&Context::new(ctx), &args)
    }) {
        Ok(Status::Ok) => raw::REDISMODULE_OK as c_int,
        _ => raw::REDISMODULE_ERR as c_int,
    }
}

/// `RedisModule_OnUnload`.
pub fn on_unload(ctx: *mut raw::RedisModuleCtx, deinit: fn(&Context) -> Status) -> c_int {
    match catch_unwind(|| deinit(&Context::new(ctx))) {
        Ok(Status::Err) => raw::REDISMODULE_ERR as c_int, // unload refused
        _ => raw::REDISMODULE_OK as c_int,
    }
}

/// The version `MODULE LIST` shows: the crate's, as major × 10000 + minor × 100 + patch (the
/// convention of Valkey's modules; 0.1.0 is 100).
fn module_version() -> c_int {
    version_number(
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
    )
}

fn version_number(major: &str, minor: &str, patch: &str) -> c_int {
    let n = |t: &str| t.parse::<c_int>().unwrap_or(0);
    n(major) * 10_000 + n(minor) * 100 + n(patch)
}

/// Creates what the module keeps for its life: its words and its own context.
pub fn init_strings(ctx: &Context) -> Result<(), EmqError> {
    words::init()?;
    server::create_module_ctx(ctx);
    Ok(())
}

/// Frees the words, the cached key names and the module's context (unload, or a failed load).
pub fn free_strings() {
    words::free_all();
    free_names();
    server::free_module_ctx();
}

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9.0).
const OPTION_HANDLES_ATOMIC_MIGRATION: c_int = 1 << 5;

/// At load: keys are signalled as modified only when a write changed them (see `Key`), and,
/// on servers that migrate slots atomically, that EchoMQ handles such migrations.
pub fn set_options(ctx: &Context, handles_atomic_migration: bool) -> Result<(), EmqError> {
    // Without `SignalModifiedKey` (the crate has no wrapper) no key would ever be signalled.
    if unsafe { raw::RedisModule_SignalModifiedKey }.is_none() {
        return Err(EmqError::Internal);
    }
    let more = if handles_atomic_migration {
        OPTION_HANDLES_ATOMIC_MIGRATION
    } else {
        0
    };
    let options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int | more;
    ctx.set_module_options(ModuleOptions::from_bits_retain(options));
    Ok(())
}

unsafe extern "C" fn get_setting(
    _name: *const std::os::raw::c_char,
    privdata: *mut c_void,
) -> c_longlong {
    // SAFETY: `privdata` is the `&'static AtomicI64` given at registration.
    match unsafe { privdata.cast::<AtomicI64>().as_ref() } {
        Some(v) => v.load(Ordering::Relaxed),
        None => 0,
    }
}

unsafe extern "C" fn set_setting(
    _name: *const std::os::raw::c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as above; the server has already checked the bounds.
    if let Some(v) = unsafe { privdata.cast::<AtomicI64>().as_ref() } {
        v.store(value, Ordering::Relaxed);
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers every `emq.*` setting, then applies the config file's or LOADEX's values. The
/// values live in statics, so nothing is allocated and nothing leaks on unload (the crate's
/// `register_i64_configuration` boxes data it never frees, and ignores a refusal).
pub fn register_settings(ctx: &Context) -> Result<(), String> {
    let register =
        unsafe { raw::RedisModule_RegisterNumericConfig }.ok_or("no module configs API")?;
    for s in &SETTINGS {
        s.value.store(s.default, Ordering::Relaxed);
        // SAFETY: OnLoad context; `privdata` points to a static that outlives the module.
        let status = unsafe {
            register(
                ctx.ctx,
                s.name.as_ptr(),
                s.default,
                raw::REDISMODULE_CONFIG_DEFAULT,
                s.min,
                s.max,
                Some(get_setting),
                Some(set_setting),
                None,
                std::ptr::from_ref(s.value).cast_mut().cast::<c_void>(),
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "could not register emq.{}",
                s.name.to_string_lossy()
            ));
        }
    }
    register_bools(ctx)?;
    let load = unsafe { raw::RedisModule_LoadConfigs }.ok_or("no module configs API")?;
    // SAFETY: OnLoad context, after every setting is registered.
    if unsafe { load(ctx.ctx) } != raw::REDISMODULE_OK as c_int {
        return Err("a configured emq.* value was refused".into());
    }
    Ok(())
}

unsafe extern "C" fn get_bool(_name: *const std::os::raw::c_char, privdata: *mut c_void) -> c_int {
    // SAFETY: registered with a pointer to a static `AtomicBool`.
    let flag = unsafe { &*privdata.cast::<AtomicBool>() };
    c_int::from(flag.load(Ordering::Relaxed))
}

unsafe extern "C" fn set_bool(
    _name: *const std::os::raw::c_char,
    value: c_int,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: registered with a pointer to a static `AtomicBool`.
    let flag = unsafe { &*privdata.cast::<AtomicBool>() };
    flag.store(value != 0, Ordering::Relaxed);
    raw::REDISMODULE_OK as c_int
}

/// The yes/no settings: `emq.learn-foreign-writes`, set at load only (it decides the keyspace
/// events EchoMQ subscribes to, which cannot be taken back while the module is loaded), and
/// `emq.metrics`, settable at run time.
fn register_bools(ctx: &Context) -> Result<(), String> {
    // The crate's `register_bool_configuration` boxes data it never frees (as above).
    let register = unsafe { raw::RedisModule_RegisterBoolConfig }.ok_or("no module configs API")?;
    let bools: [(&std::ffi::CStr, &'static AtomicBool, bool, u32); 2] = [
        (
            c"learn-foreign-writes",
            &LEARN_FOREIGN_WRITES,
            false,
            raw::REDISMODULE_CONFIG_IMMUTABLE,
        ),
        (c"metrics", &METRICS, true, raw::REDISMODULE_CONFIG_DEFAULT),
    ];
    for (name, flag, default, flags) in bools {
        flag.store(default, Ordering::Relaxed);
        // SAFETY: OnLoad context; the callbacks read and write the static `flag` points to.
        let status = unsafe {
            register(
                ctx.ctx,
                name.as_ptr(),
                c_int::from(default),
                flags as _,
                Some(get_bool),
                Some(set_bool),
                None,
                std::ptr::from_ref(flag).cast_mut().cast::<c_void>(),
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not register emq.{}", name.to_string_lossy()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_version_packs_major_minor_and_patch() {
        assert_eq!(version_number("0", "1", "0"), 100);
        assert_eq!(version_number("1", "2", "3"), 10_203);
        assert_eq!(version_number("12", "34", "56"), 123_456);
    }
}
