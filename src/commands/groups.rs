//! `EMQ.GROUPS <queue> [CURSOR <c>] [COUNT <n>]`: one page of the queue's named groups, the
//! largest backlog first: `[next-cursor, [group ...]]`, each group a map of its name, ready and
//! active jobs, concurrency limit, pause and hold. The cursor is a place in that order: a group
//! whose backlog changes between pages may move past it.

use valkey_module::Context;

use super::cursor::{syntax, ArgCursor};
use super::{is_token, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::Integer as Int, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::{EmqError, Store};
use crate::queue::listing;

/// Groups a page returns when `COUNT` is not given.
pub const DEFAULT_COUNT: i64 = 100;
/// Most groups a page returns.
pub const MAX_COUNT: i64 = 1000;

pub const COMMAND: Command = Command {
    name: c"emq.groups",
    callback: crate::callback!(run),
    flags: c"readonly",
    arity: -2,
    routes_by_queue: true,
    summary: c"Page through a queue's named groups, the largest backlog first, with their ready and active jobs, limits and pauses",
    complexity: c"O(log(G)+C) with G the groups and C the groups returned",
    args: &[
        QUEUE,
        Arg::token(c"cursor", c"CURSOR", Str),
        Arg::token(c"count", c"COUNT", Int),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(EmqError::Arity("emq.groups"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let (mut start, mut count) = (0, DEFAULT_COUNT as usize);
    let mut options = ArgCursor::new(args, 2);
    while let Some(name) = options.next_option()? {
        if is_token(name, "CURSOR") {
            start = parse_int(options.value()?, 0, i64::MAX, "CURSOR")? as u64;
        } else if is_token(name, "COUNT") {
            count = options.next_int(1, MAX_COUNT, "COUNT")? as usize;
        } else {
            return Err(syntax("syntax error: expected CURSOR or COUNT"));
        }
    }
    with_queue(ctx, queue, Access::Read, |store| {
        let (next, groups) = listing::page(store, start, count)?;
        let opt = |v: Option<i64>| v.map_or(Reply::Null, Reply::Integer);
        let groups = groups
            .into_iter()
            .map(|g| {
                Reply::Map(vec![
                    ("group", Reply::Bulk(store.bytes(&g.name).to_vec())),
                    ("ready", Reply::Integer(g.ready as i64)),
                    ("active", Reply::Integer(g.active as i64)),
                    ("concurrency", opt(g.limits.concurrency)),
                    ("rate", opt(g.limits.rate.map(|r| r.n))),
                    ("rate-per", opt(g.limits.rate.map(|r| r.per_ms))),
                    ("rate-used", Reply::Integer(g.in_window as i64)),
                    ("paused", Reply::Integer(i64::from(g.paused.is_some()))),
                    ("paused-until", opt(g.paused.flatten())),
                    ("held", Reply::Integer(i64::from(g.held))),
                ])
            })
            .collect();
        let cursor = next.unwrap_or(0).to_string().into_bytes();
        Ok(Reply::Array(vec![
            Reply::Bulk(cursor),
            Reply::Array(groups),
        ]))
    })
}
