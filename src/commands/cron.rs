//! `EMQ.CRON <queue> <name> <spec> <payload> [PRIORITY <p>]` and `EMQ.CRON <queue> <name> EVERY
//! <ms> <payload> [PRIORITY <p>]`: sets (or replaces) a repeating schedule of the queue;
//! replies its next firing (unix ms). `EMQ.UNCRON <queue> <name>`: removes one (1, or 0 when
//! there was none). `EMQ.CRONS <queue>`: every schedule of the queue, by name.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::cron::{Spec, MAX_NAME_LEN, MIN_EVERY_MS};
use crate::protocol::job::{check_payload, PRIORITY_MAX, PRIORITY_MIN};
use crate::protocol::{settings, EmqError, Queue};
use crate::queue::cron;
use crate::runtime::{cluster, timer};

fn parse_name<'a>(args: &Args<'a>) -> Result<&'a [u8], EmqError> {
    let name = args.bytes(2);
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(EmqError::Syntax(
            format!("a schedule's name must be 1 to {MAX_NAME_LEN} bytes").into(),
        ));
    }
    Ok(name)
}

/// A schedule as `EMQ.CRON` gives it: its spec, payload and priority.
fn parse_schedule<'a>(args: &Args<'a>) -> Result<(Spec, &'a [u8], i64), EmqError> {
    let (spec, at) = if is_token(args.bytes(3), "EVERY") {
        let ms = parse_int(
            args.bytes(4),
            MIN_EVERY_MS,
            settings::MAX_DURATION_MS,
            "EVERY",
        )?;
        (Spec::Every(ms), 5)
    } else {
        (
            Spec::cron(args.bytes(3)).map_err(|why| EmqError::Cron(why.into()))?,
            4,
        )
    };
    if args.len() <= at {
        return Err(EmqError::Arity("emq.cron"));
    }
    let payload = args.bytes(at);
    check_payload(payload)?;
    let priority = match ArgCursor::new(args, at + 1).last_option("PRIORITY") {
        Some(None) => 0,
        Some(Some(p)) => parse_int(p, PRIORITY_MIN, PRIORITY_MAX, "PRIORITY")?,
        None => {
            return Err(syntax(
                "syntax error: expected PRIORITY <p> after the payload",
            ))
        }
    };
    Ok((spec, payload, priority))
}

/// The queue, once the call has `command`'s arity.
fn queue_of<'a>(args: &Args<'a>, command: &Command) -> Result<Queue<'a>, EmqError> {
    check_arity(args, command)?;
    parse_queue(args.bytes(1))
}

pub const COMMAND: Command = Command {
    name: c"emq.cron",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -5,
    routes_by_queue: true,
    summary: c"Set (or replace) a repeating schedule: the timer enqueues its payload at each firing of a cron spec (UTC, optional seconds) or EVERY ms; replies the next firing",
    complexity: c"O(1)",
    args: &[
        QUEUE,
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
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    let queue = queue_of(args, &COMMAND)?;
    let name = parse_name(args)?;
    let (spec, payload, priority) = parse_schedule(args)?;
    cluster::check_stable(queue)?;
    let next = with_queue(ctx, queue, Access::ReadWrite, |store| {
        cron::set(store, name, spec, payload, priority)
    })?;
    timer::watch_cron(ctx, queue, next);
    Ok(Reply::Integer(next))
}

pub const UNCRON: Command = Command {
    name: c"emq.uncron",
    callback: crate::callback!(run_uncron),
    flags: c"write fast",
    arity: 3,
    routes_by_queue: true,
    summary: c"Remove a repeating schedule; 1, or 0 when there was none",
    complexity: c"O(1)",
    args: &[QUEUE, Arg::required(c"name", Str)],
};

pub fn run_uncron(ctx: &Context, args: &Args) -> CommandResult {
    let queue = queue_of(args, &UNCRON)?;
    let name = parse_name(args)?;
    cluster::check_stable(queue)?;
    let removed = with_queue(ctx, queue, Access::ReadWrite, |store| {
        cron::remove(store, name)
    })?;
    // The queue's next firing is read again at its next visit (the next tick).
    timer::watch_cron(ctx, queue, 0);
    Ok(Reply::Integer(i64::from(removed)))
}

pub const CRONS: Command = Command {
    name: c"emq.crons",
    callback: crate::callback!(run_crons),
    flags: c"readonly",
    arity: 2,
    routes_by_queue: true,
    summary: c"Every repeating schedule of a queue, by name: its spec or period, priority, next and last firing, and payload",
    complexity: c"O(N) with N the queue's schedules, at most 1000",
    args: &[QUEUE],
};

pub fn run_crons(ctx: &Context, args: &Args) -> CommandResult {
    let queue = queue_of(args, &CRONS)?;
    let all = with_queue(ctx, queue, Access::Read, |store| cron::list(store))?;
    let opt = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
    Ok(Reply::Array(
        all.into_iter()
            .map(|(name, s)| {
                let (spec, every) = match s.spec {
                    Spec::Cron(text) => (Reply::Bulk(text.into_bytes()), Reply::Null),
                    Spec::Every(ms) => (Reply::Null, Reply::Integer(ms)),
                };
                Reply::Map(vec![
                    ("name", Reply::Bulk(name)),
                    ("spec", spec),
                    ("every", every),
                    ("priority", Reply::Integer(s.priority)),
                    ("next", opt(s.next)),
                    ("last", opt(s.last)),
                    ("payload", Reply::Bulk(s.payload)),
                ])
            })
            .collect(),
    ))
}
