//! `EMQ.PURGE <queue> <pending|scheduled|dead> [COUNT <n>]`: deletes up to n jobs of the set
//! (default 1,000, at most 10,000), oldest first, rows and all; replies how many. A client loops
//! until 0. Active jobs are leased to workers and cannot be purged (`EMQSET`).

use valkey_module::Context;

use super::cursor::{syntax, ArgCursor};
use super::{parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::Integer as Int, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::EmqError;
use crate::queue::inspect::set_named;
use crate::queue::operate::{self, BULK_DEFAULT, BULK_MAX};
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.purge",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -3,
    routes_by_queue: true,
    summary: c"Delete up to COUNT jobs of a set (pending, scheduled or dead), rows included; replies how many",
    complexity: c"O(M*log(N)) with M jobs deleted, at most 10000",
    args: &[
        QUEUE,
        Arg::required(c"set", Str),
        Arg::token(c"count", c"COUNT", Int),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 3 && args.len() != 5 {
        return Err(EmqError::Arity("emq.purge"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let set = set_named(args.bytes(2))?;
    let count = parse_count(args, 3)?;
    cluster::check_stable(queue)?;
    let purged = with_queue(ctx, queue, Access::ReadWrite, |store| {
        operate::purge(store, set, count)
    })?;
    Ok(Reply::Integer(purged as i64))
}

/// `[COUNT <n>]` at `args[at..]` for the bulk commands: 1 to 10,000, default 1,000.
pub fn parse_count(args: &Args, at: usize) -> Result<usize, EmqError> {
    match ArgCursor::new(args, at).last_option("COUNT") {
        Some(None) => Ok(BULK_DEFAULT as usize),
        Some(Some(n)) => Ok(parse_int(n, 1, BULK_MAX, "COUNT")? as usize),
        None => Err(syntax("syntax error: expected COUNT <n>")),
    }
}
