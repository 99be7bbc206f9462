//! `EMQ.RESUME <queue> [GROUP <group>]`: claims take jobs of the queue (or of the group)
//! again, the waiting claimers served in the order they came; 1, or 0 when it was not paused.

use valkey_module::Context;

use super::cursor::{check_arity, syntax};
use super::{is_token, parse_group, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::{operate, pauses};
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.resume",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -2,
    routes_by_queue: true,
    summary: c"Resume a paused queue, or one paused group of it, serving its waiting claimers in arrival order",
    complexity: c"O(log(G)) with G the paused groups",
    args: &[QUEUE, Arg::token(c"group", c"GROUP", Str)],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let group = match args.len() {
        2 => None,
        4 if is_token(args.bytes(2), "GROUP") => Some(parse_group(args.bytes(3))?.as_bytes()),
        _ => return Err(syntax("syntax error: expected GROUP <group>")),
    };
    cluster::check_stable(queue)?;
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| match group {
        None => operate::resume(store),
        Some(group) => pauses::resume(store, group),
    })?;
    Ok(Reply::Integer(i64::from(changed)))
}
