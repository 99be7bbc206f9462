//! `EMQ.CHILDREN <queue> <id> [CURSOR <c>] [COUNT <n>]`: a page of a parent's children and
//! how each finished (docs/flows.md): `[<next-cursor>, [[<queue>, <id>, <status>, <data>],
//! ...]]`, status `waiting`, `acked` (data: its result), `dead` or `cancelled` (its error).

use valkey_module::Context;

use super::cursor::check_arity;
use super::outbox::{parse_page, MAX_COUNT};
use super::{parse_id, parse_queue, ID, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::Integer as Int, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::flow;

pub const COMMAND: Command = Command {
    name: c"emq.children",
    callback: crate::callback!(run),
    flags: c"readonly",
    arity: -3,
    routes_by_queue: true,
    summary: c"A page of a parent's children, each with how it finished and its result or error",
    complexity: c"O(COUNT)",
    args: &[
        QUEUE,
        ID,
        Arg::token(c"cursor", c"CURSOR", Int),
        Arg::token(c"count", c"COUNT", Int),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let id = parse_id(args.bytes(2))?;
    let (cursor, count) = parse_page(args, 3, MAX_COUNT)?;
    let (next, children) = with_queue(ctx, queue, Access::Read, |store| {
        flow::children_page(store, &id, cursor, count)
    })?;
    let bulk = |b: &[u8]| Reply::Bulk(b.to_vec());
    let children = children
        .into_iter()
        .map(|c| {
            Reply::Array(vec![
                bulk(&c.queue),
                bulk(&c.id.encode()),
                bulk(c.outcome.as_bytes()),
                Reply::Bulk(c.data),
            ])
        })
        .collect();
    Ok(Reply::Array(vec![
        bulk(next.to_string().as_bytes()),
        Reply::Array(children),
    ]))
}
