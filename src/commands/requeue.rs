//! `EMQ.REQUEUE <queue> <id>`: moves a dead job back to pending with its attempts reset
//! (`1`); a job that is not dead is left alone (`0`). `EMQ.REQUEUE <queue> DEAD [COUNT <n>]`:
//! the same for up to n of the oldest dead jobs (default 1,000, at most 10,000); replies how many
//! moved, so a client loops until 0.

use valkey_module::Context;

use super::cursor::check_arity;
use super::purge::parse_count;
use super::{is_token, parse_queue, with_job, ID, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::PureToken as Pure,
    Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::EmqError;
use crate::queue::{job, operate};
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.requeue",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -3,
    routes_by_queue: true,
    summary: c"Move a dead job, or up to COUNT of the oldest (DEAD), back to pending with attempts reset; its lease tokens carry on past the old ones",
    complexity: c"O(M*log(N)) with M jobs moved (one for an id)",
    args: &[
        QUEUE,
        Arg::required(
            c"which",
            OneOf(&[
                ID,
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
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    if is_token(args.bytes(2), "DEAD") {
        let queue = parse_queue(args.bytes(1))?;
        let count = parse_count(args, 3)?;
        cluster::check_stable(queue)?;
        let moved = with_queue(ctx, queue, Access::ReadWrite, |store| {
            operate::requeue_dead(store, count)
        })?;
        return Ok(Reply::Integer(moved as i64));
    }
    if args.len() != 3 {
        return Err(EmqError::Arity("emq.requeue"));
    }
    with_job(ctx, args, |store, target| {
        Ok(Reply::Integer(i64::from(job::requeue(store, target)?)))
    })
}
