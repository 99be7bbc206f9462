//! `EMQ.UNSPAN <queue>`: a partitioned queue's own name, or a retired partition, is an
//! ordinary queue again, and a partition is retired (docs/cluster.md); 1, or 0 for an
//! ordinary queue. A partition that holds jobs is refused (`EMQSPAN`).

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::span;
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.unspan",
    callback: crate::callback!(run),
    flags: c"write fast",
    arity: 2,
    routes_by_queue: true,
    summary: c"Make a partitioned queue's own name an ordinary queue again, retire an empty partition (it then refuses jobs with width 0), or make a retired one ordinary",
    complexity: c"O(1)",
    args: &[QUEUE],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    cluster::check_stable(queue)?;
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| span::unspan(store))?;
    Ok(Reply::Integer(i64::from(changed)))
}
