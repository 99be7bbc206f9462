//! EchoMQ: a job queue whose rules run inside Valkey. This file is the list of commands (each
//! `commands/<name>.rs` declares its own: name, flags, arity, key spec, docs) and the load
//! order; the layers below it import only downward:
//!
//! `protocol` (pure: the grammar, ids, the job row, errors, the store trait) <- `host` (the
//! only unsafe code: the server's API) <- `queue` (every protocol.md §6 transition, over the store
//! trait) <- `runtime` (the timer, events, the command filter, slot migration, `INFO`) <-
//! `commands` (parse -> one transition -> reply) <- this file. See docs/architecture.md.

#![deny(unsafe_code)]

pub mod commands;
#[allow(unsafe_code)] // the one layer that calls the server's raw API
pub mod host;
pub mod protocol;
pub mod queue;
pub mod runtime;

use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{Context, Status};

use host::register::Command;
use host::server::log;

const ACL_CATEGORY: &std::ffi::CStr = c"emq";

/// Every command, in the order it is registered.
const COMMANDS: &[Command] = &[
    commands::enqueue::COMMAND,
    commands::menqueue::COMMAND,
    commands::claim::COMMAND,
    commands::renew::COMMAND,
    commands::ack::COMMAND,
    commands::mack::COMMAND,
    commands::fail::COMMAND,
    commands::cancel::COMMAND,
    commands::requeue::COMMAND,
    commands::purge::COMMAND,
    commands::pause::COMMAND,
    commands::resume::COMMAND,
    commands::events::COMMAND,
    commands::limit::COMMAND,
    commands::cron::COMMAND,
    commands::cron::UNCRON,
    commands::cron::CRONS,
    commands::stats::COMMAND,
    commands::metrics::COMMAND,
    commands::groups::COMMAND,
    commands::job::COMMAND,
    commands::jobs::COMMAND,
    commands::key::COMMAND,
    commands::slot::COMMAND,
    commands::decode::COMMAND,
    commands::version::COMMAND,
    commands::queues::COMMAND,
    commands::span::COMMAND,
    commands::unspan::COMMAND,
    commands::width::COMMAND,
    commands::adopt::COMMAND,
    commands::handover::COMMAND,
    commands::delivered::COMMAND,
    commands::outbox::COMMAND,
    commands::children::COMMAND,
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
            log(ctx, c"warning", &format!("EchoMQ: refusing to load: {e}"));
            // Undo what was set up; the server discards the rest of a failed load.
            runtime::stop(ctx);
            host::load::free_strings();
            Status::Err
        }
    }
}

/// The load order: settings, the module's strings, what the runtime must know before the
/// commands exist (the effects gate, cluster mode, the server's version), the module options,
/// the commands, then the events, the timer and `INFO`.
fn load(ctx: &Context) -> Result<(), String> {
    host::load::register_settings(ctx)?;
    host::load::init_strings(ctx).map_err(|_| "could not create its strings".to_string())?;
    runtime::init(ctx);
    host::load::set_options(ctx, runtime::cluster::handles_atomic_migration())
        .map_err(|_| "the server cannot signal modified keys explicitly".to_string())?;
    host::register::acl_category(ctx, ACL_CATEGORY);
    host::register::commands(ctx, COMMANDS, ACL_CATEGORY)?;
    runtime::start(ctx)
}

fn deinit(ctx: &Context) -> Status {
    // Valkey 8.0 crashes when it unloads a module whose commands an ACL rule names (`+emq.ack`,
    // `-emq.claim`): refuse, with everything still running, and say why in the log.
    let rules = host::register::acl_rules_naming_commands(ctx);
    if !rules.is_empty() {
        log(
            ctx,
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
    runtime::stop(ctx);
    host::load::free_strings();
    Status::Ok
}

/// Every allocation of the module goes through the server's allocator (and its accounting).
#[global_allocator]
static ALLOCATOR: ValkeyAlloc = ValkeyAlloc;

export_module!(init, deinit);
