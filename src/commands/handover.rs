//! `EMQ.HANDOVER <parent-queue> <parent-id> <child-queue> <child-id> <outcome> <policy>
//! <data>`: a worker delivers a finished child from its queue's outbox to its parent
//! (docs/flows.md). Replies `counted`, `duplicate` (counted before) or `orphan` (the parent
//! refused it); the child counts once, however often it is delivered.

use valkey_module::Context;

use super::cursor::{check_arity, syntax};
use super::{parse_id, parse_queue};
use crate::host::acl::Access;
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::flow::{Delivery, Outcome, ParentRef, Policy};
use crate::protocol::job::check_payload;
use crate::queue::flow;
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.handover",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: 8,
    routes_by_queue: true,
    summary: c"Deliver a finished child to its parent, once: counted, duplicate or orphan",
    complexity: c"O(1)",
    args: &[
        Arg::required(c"parent-queue", Str),
        Arg::required(c"parent-id", Str),
        Arg::required(c"child-queue", Str),
        Arg::required(c"child-id", Str),
        Arg::required(c"outcome", Str),
        Arg::required(c"policy", Str),
        Arg::required(c"data", Str),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let parent = parse_id(args.bytes(2))?;
    let child_queue = parse_queue(args.bytes(3))?;
    let child = parse_id(args.bytes(4))?;
    let outcome = Outcome::parse_finished(args.bytes(5))
        .ok_or_else(|| syntax("syntax error: outcome is acked, dead or cancelled"))?;
    let policy = Policy::parse(args.bytes(6))
        .ok_or_else(|| syntax("syntax error: policy is fail or ignore"))?;
    check_payload(args.bytes(7))?;
    cluster::check_stable(queue)?;
    let delivery = Delivery {
        child_queue: child_queue.as_bytes().to_vec(),
        child,
        parent: ParentRef {
            queue: queue.as_bytes().to_vec(),
            id: parent,
            policy,
        },
        outcome,
        data: args.bytes(7).to_vec(),
    };
    let received = with_queue(ctx, queue, Access::ReadWrite, |store| {
        flow::receive(store, &delivery)
    })?;
    Ok(Reply::Bulk(received.as_str().as_bytes().to_vec()))
}
