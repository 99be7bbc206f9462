//! `EMQ.ADOPT <parent-queue> <parent-id> <child-queue> <child-id>`: registers a child with its
//! waiting parent before the child is enqueued, where the parent's slot is out of the child's
//! reach (docs/flows.md): `1` registered now, `0` registered before; `EMQPARENT` when the
//! parent does not exist, is not waiting, or has all its children.

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_id, parse_queue};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::flow;
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.adopt",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: 5,
    routes_by_queue: true,
    summary: c"Register a child with its waiting parent (before the child is enqueued, where the parent's slot is another's)",
    complexity: c"O(1)",
    args: &[
        Arg::required(c"parent-queue", Str),
        Arg::required(c"parent-id", Str),
        Arg::required(c"child-queue", Str),
        Arg::required(c"child-id", Str),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let parent = parse_id(args.bytes(2))?;
    let child_queue = parse_queue(args.bytes(3))?;
    let child = parse_id(args.bytes(4))?;
    cluster::check_stable(queue)?;
    let new = with_queue(ctx, queue, Access::ReadWrite, |store| {
        flow::adopt(store, &parent, child_queue.as_bytes(), &child)
    })?;
    Ok(Reply::Integer(i64::from(new)))
}
