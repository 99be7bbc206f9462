//! `EMQ.RESUME <queue>`: claims take jobs again, the waiting claimers served in the order they came; 1, or 0 when it was not paused.

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::operate;
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.resume",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: 2,
    routes_by_queue: true,
    summary: c"Resume a paused queue, serving its waiting claimers in arrival order",
    complexity: c"O(1)",
    args: &[QUEUE],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    cluster::check_stable(queue)?;
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| {
        operate::resume(store)
    })?;
    Ok(Reply::Integer(i64::from(changed)))
}
