//! EchoMQ: a job queue whose rules run inside Valkey. This file is the one registration
//! block: commands, flags, key specs, configs, `INFO emq` and the `emq` ACL category.

pub mod client_db;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod effects;
pub mod error;
pub mod eviction;
pub mod grammar;
pub mod lifecycle;
pub mod metrics;
pub mod register;
pub mod scheduler;
pub mod server;
pub mod store;
pub mod watchlist;

use std::os::raw::c_int;
use std::panic::catch_unwind;
use valkey_module::alloc::ValkeyAlloc;

use valkey_module::{raw, Context, Status};

use register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::String as Str, Command,
};

const ACL_CATEGORY: &std::ffi::CStr = c"emq";

const COMMANDS: &[Command] = &[
    Command {
        name: c"emq.enqueue",
        callback: callback!(commands::enqueue::run),
        flags: c"write deny-oom",
        arity: -4,
        routes_by_queue: true,
        summary: c"Enqueue a job: write its row and add it to the queue's pending set, once",
        complexity: c"O(log(N)) with N the number of pending jobs",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"payload", Str),
            Arg::optional(
                c"due",
                OneOf(&[
                    Arg::keyword(c"delay", c"DELAY", Int),
                    Arg::keyword(c"at", c"AT", Int),
                ]),
            ),
        ],
    },
    Command {
        name: c"emq.menqueue",
        callback: callback!(commands::menqueue::run),
        flags: c"write deny-oom",
        arity: -4,
        routes_by_queue: true,
        summary: c"Enqueue many jobs in one atomic step; one 1/0 (or minted id) per job",
        complexity: c"O(M*log(N)) with M jobs and N pending jobs",
        args: &[
            Arg::required(c"queue", Str),
            Arg::multiple(
                c"job",
                Block(&[Arg::required(c"id", Str), Arg::required(c"payload", Str)]),
            ),
        ],
    },
    Command {
        name: c"emq.claim",
        callback: callback!(commands::claim::run),
        flags: c"write deny-oom blocking",
        arity: -2,
        routes_by_queue: true,
        summary: c"Claim up to COUNT ready jobs under a lease, waiting up to BLOCK ms for one",
        complexity: c"O((P+C)*log(N)) with P jobs promoted and C claimed",
        args: &[
            Arg::required(c"queue", Str),
            Arg::token(c"count", c"COUNT", Int),
            Arg::token(c"lease", c"LEASE", Int),
            Arg::token(c"block", c"BLOCK", Int),
        ],
    },
    Command {
        name: c"emq.renew",
        callback: callback!(commands::lease::renew),
        flags: c"write deny-oom fast",
        arity: 5,
        routes_by_queue: true,
        summary: c"Extend a live lease to now + ms; replies the new deadline",
        complexity: c"O(log(N))",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"token", Int),
            Arg::required(c"ms", Int),
        ],
    },
    Command {
        name: c"emq.ack",
        callback: callback!(commands::lease::ack),
        flags: c"write deny-oom fast",
        arity: 4,
        routes_by_queue: true,
        summary: c"Acknowledge a claimed job: active -> done, the row kept emq.done-ttl-ms",
        complexity: c"O(log(N))",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"token", Int),
        ],
    },
    Command {
        name: c"emq.fail",
        callback: callback!(commands::lease::fail),
        flags: c"write deny-oom fast",
        arity: -4,
        routes_by_queue: true,
        summary:
            c"Fail a claimed job: retry after RETRY-IN or backoff, or dead after the last attempt",
        complexity: c"O(log(N))",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"token", Int),
            Arg::token(c"error", c"ERROR", Str),
            Arg::token(c"retry-in", c"RETRY-IN", Int),
        ],
    },
    Command {
        name: c"emq.cancel",
        callback: callback!(commands::cancel::run),
        flags: c"write deny-oom fast",
        arity: 3,
        routes_by_queue: true,
        summary: c"Remove a pending or scheduled job and its row",
        complexity: c"O(log(N))",
        args: &[Arg::required(c"queue", Str), Arg::required(c"id", Str)],
    },
    Command {
        name: c"emq.requeue",
        callback: callback!(commands::requeue::run),
        flags: c"write deny-oom fast",
        arity: 3,
        routes_by_queue: true,
        summary: c"Move a dead job back to pending with its attempts reset",
        complexity: c"O(log(N))",
        args: &[Arg::required(c"queue", Str), Arg::required(c"id", Str)],
    },
    Command {
        name: c"emq.stats",
        callback: callback!(commands::stats::run),
        flags: c"readonly fast",
        arity: 2,
        routes_by_queue: true,
        summary: c"Counts of pending, active, scheduled and dead jobs of a queue",
        complexity: c"O(1)",
        args: &[Arg::required(c"queue", Str)],
    },
    Command {
        name: c"emq.key",
        callback: callback!(commands::key::run),
        flags: c"readonly fast",
        arity: -3,
        routes_by_queue: false,
        summary: c"Compose a key of the emq:{queue}:<type> grammar",
        complexity: c"O(1)",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"type", Str),
            Arg::optional(c"id", Str),
        ],
    },
    Command {
        name: c"emq.slot",
        callback: callback!(commands::slot::run),
        flags: c"readonly fast",
        arity: 2,
        routes_by_queue: false,
        summary: c"The cluster slot of a key: CRC16-XMODEM of its hashtag mod 16384",
        complexity: c"O(N) with N the length of the key",
        args: &[Arg::required(c"key", Str)],
    },
    Command {
        name: c"emq.decode",
        callback: callback!(commands::decode::run),
        flags: c"readonly fast",
        arity: 2,
        routes_by_queue: false,
        summary: c"Read a key through the grammar: queue, type, id, kind and slot",
        complexity: c"O(N) with N the length of the key",
        args: &[Arg::required(c"key", Str)],
    },
    Command {
        name: c"emq.version",
        callback: callback!(commands::version::run),
        flags: c"readonly fast",
        arity: 1,
        routes_by_queue: false,
        summary: c"The EchoMQ protocol version this module speaks",
        complexity: c"O(1)",
        args: &[],
    },
];

/// EchoMQ takes its settings as `emq.*` configs, never as load arguments: an argument is a
/// setting written the wrong way (`loadmodule libechomq.so emq.node-id 5`), and ignoring it
/// would leave, say, every primary minting with node id 0.
fn check_no_arguments(args: &[&[u8]]) -> Result<(), String> {
    if args.is_empty() {
        return Ok(());
    }
    let given: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Err(format!(
        "it takes no load arguments (got: {}); give its settings as emq.* lines after the \
         loadmodule line (emq.node-id 5), as --emq.node-id 5 on the command line, or with \
         MODULE LOADEX <path> CONFIG emq.node-id 5",
        given.join(" ")
    ))
}

fn init(ctx: &Context, args: &[&[u8]]) -> Status {
    match check_no_arguments(args).and_then(|()| load(ctx)) {
        Ok(()) => Status::Ok,
        Err(e) => {
            server::log(
                ctx.ctx,
                c"warning",
                &format!("EchoMQ: refusing to load: {e}"),
            );
            // Undo what was set up; the server discards the rest of a failed load.
            scheduler::stop(ctx);
            store::free_words();
            Status::Err
        }
    }
}

fn load(ctx: &Context) -> Result<(), String> {
    config::register(ctx)?;
    store::init_words().map_err(|_| "could not create its strings".to_string())?;
    effects::reset();
    cluster::init(ctx);
    store::set_options(ctx, cluster::module_options())
        .map_err(|_| "the server cannot signal modified keys explicitly".to_string())?;
    client_db::init();
    register::acl_category(ctx, ACL_CATEGORY);
    register::commands(ctx, COMMANDS, ACL_CATEGORY)?;
    scheduler::start(ctx)?;
    eviction::check(ctx);
    if let Some(register_info) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        // SAFETY: OnLoad context; the callback lives as long as the module.
        unsafe { register_info(ctx.ctx, Some(metrics::info)) };
    }
    Ok(())
}

fn deinit(ctx: &Context) -> Status {
    // Valkey 8.0 crashes when it unloads a module whose commands an ACL rule names (`+emq.ack`,
    // `-emq.claim`): refuse, with everything still running, and say why in the log.
    let rules = register::acl_rules_naming_commands(ctx);
    if !rules.is_empty() {
        server::log(
            ctx.ctx,
            c"warning",
            &format!(
                "EchoMQ: not unloading: ACL rules name its commands ({}), and the server \
                 cannot unload a module then. Grant EchoMQ through the @emq category instead \
                 (ACL SETUSER <user> -@all +@emq ..., and clearselectors where a selector \
                 names one) and try again.",
                rules.join(", ")
            ),
        );
        return Status::Err;
    }
    scheduler::stop(ctx);
    store::free_words();
    Status::Ok
}

/// Every allocation of the module goes through the server's allocator (and its accounting).
#[global_allocator]
static ALLOCATOR: ValkeyAlloc = ValkeyAlloc;

/// The version `MODULE LIST` shows: the crate's, as major × 10000 + minor × 100 + patch (the
/// convention of Valkey's modules; 0.1.0 is 100).
const MODULE_VERSION: c_int = version_number(
    env!("CARGO_PKG_VERSION_MAJOR"),
    env!("CARGO_PKG_VERSION_MINOR"),
    env!("CARGO_PKG_VERSION_PATCH"),
);

const fn version_number(major: &str, minor: &str, patch: &str) -> c_int {
    decimal(major) * 10_000 + decimal(minor) * 100 + decimal(patch)
}

/// A version part's decimal digits, read at compile time (Cargo allows only digits there).
const fn decimal(text: &str) -> c_int {
    let bytes = text.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < bytes.len() {
        n = n * 10 + (bytes[i] - b'0') as c_int;
        i += 1;
    }
    n
}

/// The server's entry point at load. Only `RedisModule_Init` runs before the module's API
/// (allocator included) is usable; everything after it is behind the panic guard.
///
/// # Safety
/// Called by the server with a live load context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the server's load context; the name is a static NUL-terminated string.
    let status = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"emq".as_ptr(),
            MODULE_VERSION,
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
                .map(|&a| server::string_bytes(a))
                .collect(),
            _ => Vec::new(),
        };
        init(&Context::new(ctx), &args)
    }) {
        Ok(Status::Ok) => raw::REDISMODULE_OK as c_int,
        _ => raw::REDISMODULE_ERR as c_int,
    }
}

/// The server's entry point at `MODULE UNLOAD emq`; an error refuses the unload.
///
/// # Safety
/// Called by the server with a live context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnUnload(ctx: *mut raw::RedisModuleCtx) -> c_int {
    match catch_unwind(|| deinit(&Context::new(ctx))) {
        Ok(Status::Err) => raw::REDISMODULE_ERR as c_int, // unload refused
        _ => raw::REDISMODULE_OK as c_int,
    }
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
