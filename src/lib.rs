//! EchoMQ: a job queue whose rules run inside Valkey. This file is the command table and the
//! load order; the layers below it import only downward:
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

use host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::PureToken as Pure,
    ArgKind::String as Str, Command,
};
use host::server::log;

const ACL_CATEGORY: &std::ffi::CStr = c"emq";

const COMMANDS: &[Command] = &[
    Command {
        name: c"emq.enqueue",
        callback: callback!(commands::enqueue::run),
        flags: c"write deny-oom",
        arity: -4,
        routes_by_queue: true,
        summary: c"Enqueue a job: write its row and add it to the queue's pending set, once; with UNIQUE, only while no job holds the key (the holder's id is the reply)",
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
            Arg::token(c"priority", c"PRIORITY", Int),
            Arg::optional(
                c"unique",
                Block(&[
                    Arg::keyword(c"key", c"UNIQUE", Str),
                    Arg::token(c"window", c"FOR", Int),
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
                Block(&[
                    Arg::token(c"priority", c"PRIORITY", Int),
                    Arg::required(c"id", Str),
                    Arg::required(c"payload", Str),
                ]),
            ),
        ],
    },
    Command {
        name: c"emq.claim",
        callback: callback!(commands::claim::run),
        flags: c"write deny-oom blocking",
        arity: -2,
        routes_by_queue: true,
        summary: c"Claim up to COUNT ready jobs under a lease, waiting up to BLOCK ms for one; each [id, payload, token]",
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
        callback: callback!(commands::renew::run),
        flags: c"write deny-oom fast",
        arity: -5,
        routes_by_queue: true,
        summary: c"Extend a live lease to now + ms, keeping PROGRESS in the row; replies the new deadline",
        complexity: c"O(log(N))",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"token", Int),
            Arg::required(c"ms", Int),
            Arg::token(c"progress", c"PROGRESS", Str),
        ],
    },
    Command {
        name: c"emq.ack",
        callback: callback!(commands::ack::run),
        flags: c"write deny-oom fast",
        arity: -4,
        routes_by_queue: true,
        summary: c"Acknowledge a claimed job: active -> done, the row (and RESULT) kept emq.done-ttl-ms",
        complexity: c"O(log(N))",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"id", Str),
            Arg::required(c"token", Int),
            Arg::token(c"result", c"RESULT", Str),
        ],
    },
    Command {
        name: c"emq.mack",
        callback: callback!(commands::mack::run),
        flags: c"write deny-oom",
        arity: -4,
        routes_by_queue: true,
        summary: c"Acknowledge many claimed jobs of a queue, each on its own (1, or EMQLEASE in its place); with CLAIM, replies [outcomes, next jobs]",
        complexity: c"O((M+C)*log(N)) with M jobs acknowledged and C claimed",
        args: &[
            Arg::required(c"queue", Str),
            Arg::multiple(
                c"job",
                Block(&[
                    Arg::required(c"id", Str),
                    Arg::required(c"token", Int),
                    Arg::token(c"result", c"RESULT", Str),
                ]),
            ),
            Arg::optional(
                c"claim",
                Block(&[
                    Arg::keyword(c"count", c"CLAIM", Int),
                    Arg::token(c"lease", c"LEASE", Int),
                ]),
            ),
        ],
    },
    Command {
        name: c"emq.fail",
        callback: callback!(commands::fail::run),
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
        flags: c"write deny-oom",
        arity: -3,
        routes_by_queue: true,
        summary: c"Move a dead job, or up to COUNT of the oldest (DEAD), back to pending with attempts reset; its lease tokens carry on past the old ones",
        complexity: c"O(M*log(N)) with M jobs moved (one for an id)",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(
                c"which",
                OneOf(&[
                    Arg::required(c"id", Str),
                    Arg::required(
                        c"dead",
                        Block(&[
                            Arg::keyword(c"dead", c"DEAD", Pure),
                            Arg::token(c"count", c"COUNT", Int),
                        ]),
                    ),
                ]),
            ),
        ],
    },
    Command {
        name: c"emq.purge",
        callback: callback!(commands::purge::run),
        flags: c"write deny-oom",
        arity: -3,
        routes_by_queue: true,
        summary: c"Delete up to COUNT jobs of a set (pending, scheduled or dead), rows included; replies how many",
        complexity: c"O(M*log(N)) with M jobs deleted, at most 10000",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"set", Str),
            Arg::token(c"count", c"COUNT", Int),
        ],
    },
    Command {
        name: c"emq.pause",
        callback: callback!(commands::pause::run),
        flags: c"write deny-oom fast",
        arity: 2,
        routes_by_queue: true,
        summary: c"Pause a queue: claims take no job until EMQ.RESUME; enqueues and the timer go on",
        complexity: c"O(1)",
        args: &[Arg::required(c"queue", Str)],
    },
    Command {
        name: c"emq.resume",
        callback: callback!(commands::resume::run),
        flags: c"write deny-oom fast",
        arity: 2,
        routes_by_queue: true,
        summary: c"Resume a paused queue, serving its waiting claimers in arrival order",
        complexity: c"O(1)",
        args: &[Arg::required(c"queue", Str)],
    },
    Command {
        name: c"emq.events",
        callback: callback!(commands::events::run),
        flags: c"write deny-oom fast",
        arity: -3,
        routes_by_queue: true,
        summary: c"Turn the queue's event stream emq:{queue}:events on (capped near MAXLEN) or off",
        complexity: c"O(1)",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(
                c"state",
                OneOf(&[
                    Arg::required(
                        c"on",
                        Block(&[
                            Arg::keyword(c"on", c"ON", Pure),
                            Arg::token(c"maxlen", c"MAXLEN", Int),
                        ]),
                    ),
                    Arg::keyword(c"off", c"OFF", Pure),
                ]),
            ),
        ],
    },
    Command {
        name: c"emq.limit",
        callback: callback!(commands::limit::run),
        flags: c"write deny-oom fast",
        arity: -2,
        routes_by_queue: true,
        summary: c"Set (or with no option, report) the queue's concurrency and sliding-window rate limits; replies the limits and their use",
        complexity: c"O(1), or O(log(N)+E) under a rate limit, with N claims in the window and E past it",
        args: &[
            Arg::required(c"queue", Str),
            Arg::optional(
                c"limits",
                OneOf(&[
                    Arg::keyword(c"off", c"OFF", Pure),
                    Arg::required(
                        c"set",
                        Block(&[
                            Arg::token(
                                c"concurrency",
                                c"CONCURRENCY",
                                OneOf(&[
                                    Arg::required(c"n", Int),
                                    Arg::keyword(c"off", c"OFF", Pure),
                                ]),
                            ),
                            Arg::token(
                                c"rate",
                                c"RATE",
                                OneOf(&[
                                    Arg::required(
                                        c"window",
                                        Block(&[
                                            Arg::required(c"n", Int),
                                            Arg::keyword(c"per", c"PER", Int),
                                        ]),
                                    ),
                                    Arg::keyword(c"off", c"OFF", Pure),
                                ]),
                            ),
                        ]),
                    ),
                ]),
            ),
        ],
    },
    Command {
        name: c"emq.cron",
        callback: callback!(commands::cron::run),
        flags: c"write deny-oom",
        arity: -5,
        routes_by_queue: true,
        summary: c"Set (or replace) a repeating schedule: the timer enqueues its payload at each firing of a cron spec (UTC, optional seconds) or EVERY ms; replies the next firing",
        complexity: c"O(1)",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(c"name", Str),
            Arg::required(
                c"when",
                OneOf(&[
                    Arg::required(c"spec", Str),
                    Arg::keyword(c"every", c"EVERY", Int),
                ]),
            ),
            Arg::required(c"payload", Str),
            Arg::token(c"priority", c"PRIORITY", Int),
        ],
    },
    Command {
        name: c"emq.uncron",
        callback: callback!(commands::cron::run_uncron),
        flags: c"write fast",
        arity: 3,
        routes_by_queue: true,
        summary: c"Remove a repeating schedule; 1, or 0 when there was none",
        complexity: c"O(1)",
        args: &[Arg::required(c"queue", Str), Arg::required(c"name", Str)],
    },
    Command {
        name: c"emq.crons",
        callback: callback!(commands::cron::run_crons),
        flags: c"readonly",
        arity: 2,
        routes_by_queue: true,
        summary: c"Every repeating schedule of a queue, by name: its spec or period, priority, next and last firing, and payload",
        complexity: c"O(N) with N the queue's schedules, at most 1000",
        args: &[Arg::required(c"queue", Str)],
    },
    Command {
        name: c"emq.stats",
        callback: callback!(commands::stats::run),
        flags: c"readonly fast",
        arity: 2,
        routes_by_queue: true,
        summary: c"Counts of pending, active, scheduled and dead jobs of a queue, whether it is paused, and its claim limits and their use",
        complexity: c"O(1), or O(log(N)+E) under a rate limit, with N claims in the window and E past it",
        args: &[Arg::required(c"queue", Str)],
    },
    Command {
        name: c"emq.job",
        callback: callback!(commands::job::run),
        flags: c"readonly",
        arity: 3,
        routes_by_queue: true,
        summary: c"One job: its row's fields, the set that holds it and its score there",
        complexity: c"O(log(N)) with N the jobs in the queue's sets",
        args: &[Arg::required(c"queue", Str), Arg::required(c"id", Str)],
    },
    Command {
        name: c"emq.jobs",
        callback: callback!(commands::jobs::run),
        flags: c"readonly",
        arity: -3,
        routes_by_queue: true,
        summary: c"One page of a set's jobs in the set's order, resuming after a cursor",
        complexity: c"O(log(N)^2 + C*log(N)) with N the jobs in the set and C the COUNT",
        args: &[
            Arg::required(c"queue", Str),
            Arg::required(
                c"set",
                OneOf(&[
                    Arg::keyword(c"pending", c"pending", host::register::ArgKind::PureToken),
                    Arg::keyword(c"active", c"active", host::register::ArgKind::PureToken),
                    Arg::keyword(
                        c"scheduled",
                        c"scheduled",
                        host::register::ArgKind::PureToken,
                    ),
                    Arg::keyword(c"dead", c"dead", host::register::ArgKind::PureToken),
                ]),
            ),
            Arg::token(c"cursor", c"CURSOR", Str),
            Arg::token(c"count", c"COUNT", Int),
            Arg::token(
                c"withpayloads",
                c"WITHPAYLOADS",
                host::register::ArgKind::PureToken,
            ),
        ],
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
    Command {
        name: c"emq.queues",
        callback: callback!(commands::queues::run),
        flags: c"readonly",
        arity: -1,
        routes_by_queue: false,
        summary: c"Page through the queues this node holds in the client's database, in name order",
        complexity: c"O(log(Q)+C) with Q queues known and C the names read (COUNT, more for a key-restricted user)",
        args: &[
            Arg::token(c"cursor", c"CURSOR", Str),
            Arg::token(c"count", c"COUNT", Int),
        ],
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
