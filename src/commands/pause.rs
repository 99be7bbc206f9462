//! `EMQ.PAUSE <queue> [GROUP <group> [FOR <ms>]]`: no claim takes a job of the queue (or of the
//! group) until `EMQ.RESUME` (enqueues and the timer go on), or, with `FOR`, until the timer
//! resumes the group; 1, or 0 when it was paused already.

use valkey_module::Context;

use super::cursor::{check_arity, syntax};
use super::{is_token, parse_group, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::server::now_ms;
use crate::host::store::with_queue;
use crate::protocol::{settings, EmqError};
use crate::queue::{operate, pauses};
use crate::runtime::{cluster, queues};

pub const COMMAND: Command = Command {
    name: c"emq.pause",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -2,
    routes_by_queue: true,
    summary: c"Pause a queue, or one group of it (FOR ms: until the timer resumes it): claims take none of its jobs until EMQ.RESUME; enqueues and the timer go on",
    complexity: c"O(log(G)) with G the paused groups",
    args: &[
        QUEUE,
        Arg::optional(
            c"one-group",
            Block(&[
                Arg::keyword(c"group", c"GROUP", Str),
                Arg::token(c"for", c"FOR", Int),
            ]),
        ),
    ],
};

/// A group named after `GROUP`, and when its pause ends (unix ms; `None`: when resumed).
type OneGroup<'a> = (&'a [u8], Option<i64>);

/// `GROUP <group> [FOR <ms>]` after the queue: the group, and when its pause ends.
fn parse_one_group<'a>(args: &Args<'a>) -> Result<Option<OneGroup<'a>>, EmqError> {
    let wrong = || syntax("syntax error: expected GROUP <group> [FOR <ms>]");
    match args.len() {
        2 => Ok(None),
        4 | 6 if is_token(args.bytes(2), "GROUP") => {
            let group = parse_group(args.bytes(3))?.as_bytes();
            let until = match args.len() {
                6 if is_token(args.bytes(4), "FOR") => {
                    let ms = parse_int(args.bytes(5), 1, settings::MAX_DURATION_MS, "FOR")?;
                    Some(now_ms() as i64 + ms)
                }
                6 => return Err(wrong()),
                _ => None,
            };
            Ok(Some((group, until)))
        }
        _ => Err(wrong()),
    }
}

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let group = parse_one_group(args)?;
    cluster::check_stable(queue)?;
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| match group {
        None => operate::pause(store),
        Some((group, until)) => pauses::pause(store, group, until),
    })?;
    // A paused queue may hold nothing but its `meta` hash, which no subscribed event reports.
    queues::learn(ctx, queue);
    Ok(Reply::Integer(i64::from(changed)))
}
