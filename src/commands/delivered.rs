//! `EMQ.DELIVERED <child-queue> <child-id> <parent-queue> <parent-id> [ORPHAN]`: removes a
//! hand-over from the child queue's outbox once its parent answered (docs/flows.md); with
//! `ORPHAN`, the child's row notes that the parent refused it. `1` removed, `0` not there.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_id, parse_queue};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::PureToken as Pure, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::flow::{Delivery, Outcome, ParentRef, Policy};
use crate::queue::flow;
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.delivered",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -5,
    routes_by_queue: true,
    summary: c"Remove a hand-over its parent answered from the child queue's outbox",
    complexity: c"O(1)",
    args: &[
        Arg::required(c"child-queue", Str),
        Arg::required(c"child-id", Str),
        Arg::required(c"parent-queue", Str),
        Arg::required(c"parent-id", Str),
        Arg {
            name: c"orphan",
            kind: Pure,
            token: Some(c"ORPHAN"),
            optional: true,
            multiple: false,
        },
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let child = parse_id(args.bytes(2))?;
    let parent_queue = parse_queue(args.bytes(3))?;
    let parent = parse_id(args.bytes(4))?;
    let mut rest = ArgCursor::new(args, 5);
    let orphan = match rest.next_word() {
        None => false,
        Some(word) if is_token(word, "ORPHAN") && rest.done() => true,
        Some(_) => return Err(syntax("syntax error: expected ORPHAN")),
    };
    cluster::check_stable(queue)?;
    // The entry's field names it; its outcome, policy and data are not needed to remove it.
    let delivery = Delivery {
        child_queue: queue.as_bytes().to_vec(),
        child,
        parent: ParentRef {
            queue: parent_queue.as_bytes().to_vec(),
            id: parent,
            policy: Policy::Fail,
        },
        outcome: Outcome::Acked,
        data: Vec::new(),
    };
    let there = with_queue(ctx, queue, Access::ReadWrite, |store| {
        flow::delivered(store, &delivery, orphan)
    })?;
    Ok(Reply::Integer(i64::from(there)))
}
