//! `EMQ.PAUSE <queue>`: no claim takes a job of the queue until `EMQ.RESUME` (enqueues and the timer go on); 1, or 0 when it was paused already.

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
    name: c"emq.pause",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: 2,
    routes_by_queue: true,
    summary: c"Pause a queue: claims take no job until EMQ.RESUME; enqueues and the timer go on",
    complexity: c"O(1)",
    args: &[QUEUE],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    cluster::check_stable(queue)?;
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| operate::pause(store))?;
    Ok(Reply::Integer(i64::from(changed)))
}
