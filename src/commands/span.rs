//! `EMQ.SPAN <queue> <n> [OF <queue> INDEX <i>]`: makes `queue` a partitioned queue of `n`
//! partitions (its own name then takes no job), or, with `OF`, partition `i` of that queue's
//! `n` (docs/cluster.md); 1, or 0 when it was that already. The clients mark every partition,
//! on its own primary, before the queue's own name.

use valkey_module::Context;

use super::cursor::{check_arity, syntax};
use super::{is_token, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::partition::{self, MAX_NAME_LEN, MAX_PARTITIONS};
use crate::protocol::EmqError;
use crate::queue::span::{self, Span};
use crate::runtime::{cluster, queues};

pub const COMMAND: Command = Command {
    name: c"emq.span",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -3,
    routes_by_queue: true,
    summary: c"Make a queue a partitioned queue of n partitions (its own name then takes no job), or, with OF, partition i of one",
    complexity: c"O(1), or O(n) with OF (the partition's name is checked)",
    args: &[
        QUEUE,
        Arg::required(c"partitions", Int),
        Arg::optional(
            c"partition",
            Block(&[
                Arg::keyword(c"of", c"OF", Str),
                Arg::keyword(c"index", c"INDEX", Int),
            ]),
        ),
    ],
};

fn parse<'a>(args: &Args<'a>) -> Result<Span<'a>, EmqError> {
    check_arity(args, &COMMAND)?;
    let queue = args.bytes(1);
    let width = parse_int(args.bytes(2), 1, i64::from(MAX_PARTITIONS), "partitions")? as u16;
    match args.len() {
        3 if queue.len() > MAX_NAME_LEN => Err(syntax(
            "a partitioned queue's name is at most 112 bytes (its partitions' names add 12)",
        )),
        3 => Ok(Span::Spanned { width }),
        7 if is_token(args.bytes(3), "OF") && is_token(args.bytes(5), "INDEX") => {
            let of = parse_queue(args.bytes(4))?.as_bytes();
            let index = parse_int(args.bytes(6), 0, i64::from(width) - 1, "INDEX")? as u16;
            if partition::name(of, index, width).as_deref() != Some(queue) {
                return Err(syntax(
                    "the queue is not that partition's name (see docs/cluster.md)",
                ));
            }
            Ok(Span::Partition { of, index, width })
        }
        _ => Err(syntax("syntax error: expected OF <queue> INDEX <i>")),
    }
}

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    let queue = parse_queue(args.bytes(1))?;
    let to = parse(args)?;
    cluster::check_stable(queue)?;
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| {
        span::span(store, &to)
    })?;
    // A partitioned queue's own name may hold nothing but its `meta` hash, which no
    // subscribed event reports: it is listed from now on.
    queues::learn(ctx, queue);
    Ok(Reply::Integer(i64::from(changed)))
}
