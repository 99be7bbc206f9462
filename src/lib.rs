//! EchoMQ: a job queue whose rules run inside Valkey. This file is the one registration
//! block: commands, flags, key specs, configs, `INFO emq` and the `emq` ACL category.

pub mod commands;
pub mod config;
pub mod error;
pub mod grammar;
pub mod metrics;
pub mod register;
pub mod server;
pub mod store;

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::configuration::ConfigurationFlags;
use valkey_module::{raw, valkey_module, Context, Status, ValkeyString};

use register::{Arg, ArgKind::String as Str, Command};

const ACL_CATEGORY: &std::ffi::CStr = c"emq";

const COMMANDS: &[Command] = &[
    Command {
        name: c"EMQ.ENQUEUE",
        callback: callback!(commands::enqueue::run),
        flags: c"write deny-oom",
        arity: 4,
        routes_by_queue: true,
        summary: c"Enqueue a job: write its row and add it to the queue's pending set, once",
        complexity: c"O(log(N)) with N the number of pending jobs",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"payload", Str),
        ],
    },
    Command {
        name: c"EMQ.KEY",
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
        name: c"EMQ.SLOT",
        callback: callback!(commands::slot::run),
        flags: c"readonly fast",
        arity: 2,
        routes_by_queue: false,
        summary: c"The cluster slot of a key: CRC16-XMODEM of its hashtag mod 16384",
        complexity: c"O(N) with N the length of the key",
        args: &[Arg::required(c"key", Str)],
    },
    Command {
        name: c"EMQ.DECODE",
        callback: callback!(commands::decode::run),
        flags: c"readonly fast",
        arity: 2,
        routes_by_queue: false,
        summary: c"Read a key through the grammar: queue, type, id, kind and slot",
        complexity: c"O(N) with N the length of the key",
        args: &[Arg::required(c"key", Str)],
    },
    Command {
        name: c"EMQ.VERSION",
        callback: callback!(commands::version::run),
        flags: c"readonly fast",
        arity: 1,
        routes_by_queue: false,
        summary: c"The EchoMQ protocol version this module speaks",
        complexity: c"O(1)",
        args: &[],
    },
];

fn init(ctx: &Context, _args: &[ValkeyString]) -> Status {
    register::acl_category(ctx, ACL_CATEGORY);
    if let Err(e) = register::commands(ctx, COMMANDS, ACL_CATEGORY) {
        ctx.log_warning(&format!("EchoMQ: refusing to load: {e}"));
        return Status::Err;
    }
    if let Some(register_info) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        // SAFETY: OnLoad context; the callback lives as long as the module.
        unsafe { register_info(ctx.ctx, Some(metrics::info)) };
    }
    Status::Ok
}

fn deinit(_ctx: &Context) -> Status {
    Status::Ok
}

valkey_module! {
    name: "emq",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    init: init,
    deinit: deinit,
    commands: [],
    configurations: [
        i64: [
            ["max-payload-bytes", &config::MAX_PAYLOAD_BYTES, config::MAX_PAYLOAD_DEFAULT, config::MAX_PAYLOAD_MIN, config::MAX_PAYLOAD_MAX, ConfigurationFlags::DEFAULT, None],
            ["node-id", &config::NODE_ID, 0, 0, config::NODE_ID_MAX, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}
