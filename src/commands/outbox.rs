//! `EMQ.OUTBOX <queue> [CURSOR <c>] [COUNT <n>]`: a page of the queue's hand-overs waiting for a
//! worker to deliver them to parents out of reach (docs/flows.md): `[<next-cursor>, [[<child-id>,
//! <parent-queue>, <parent-id>, <outcome>, <policy>, <data>], ...]]`, cursor `0` at the end.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::Integer as Int, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::EmqError;
use crate::queue::flow;

/// Entries a page asks for when `COUNT` is not given, and the most it may ask for.
pub const DEFAULT_COUNT: i64 = 100;
pub const MAX_COUNT: i64 = 1000;

pub const COMMAND: Command = Command {
    name: c"emq.outbox",
    callback: crate::callback!(run),
    flags: c"readonly",
    arity: -2,
    routes_by_queue: true,
    summary: c"A page of the queue's hand-overs to parents out of reach, for a worker to deliver",
    complexity: c"O(COUNT)",
    args: &[
        QUEUE,
        Arg::token(c"cursor", c"CURSOR", Int),
        Arg::token(c"count", c"COUNT", Int),
    ],
};

/// `[CURSOR <c>] [COUNT <n>]` from `args[at..]`: the page's start and size (shared with
/// `EMQ.CHILDREN`).
pub fn parse_page(args: &Args<'_>, at: usize, max: i64) -> Result<(u64, usize), EmqError> {
    let (mut cursor, mut count) = (0u64, DEFAULT_COUNT as usize);
    let mut options = ArgCursor::new(args, at);
    while let Some(name) = options.next_option()? {
        if is_token(name, "CURSOR") {
            cursor = options.next_int(0, i64::MAX, "CURSOR")? as u64;
        } else if is_token(name, "COUNT") {
            count = options.next_int(1, max, "COUNT")? as usize;
        } else {
            return Err(syntax("syntax error: expected CURSOR <c> and COUNT <n>"));
        }
    }
    Ok((cursor, count))
}

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let (cursor, count) = parse_page(args, 2, MAX_COUNT)?;
    let (next, entries) = with_queue(ctx, queue, Access::Read, |store| {
        flow::outbox_page(store, cursor, count)
    })?;
    let bulk = |b: &[u8]| Reply::Bulk(b.to_vec());
    let entries = entries
        .into_iter()
        .map(|d| {
            Reply::Array(vec![
                bulk(&d.child.encode()),
                bulk(&d.parent.queue),
                bulk(&d.parent.id.encode()),
                bulk(d.outcome.as_bytes()),
                bulk(d.parent.policy.as_bytes()),
                Reply::Bulk(d.data),
            ])
        })
        .collect();
    Ok(Reply::Array(vec![
        bulk(next.to_string().as_bytes()),
        Reply::Array(entries),
    ]))
}
