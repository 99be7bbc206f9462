//! `EMQ.EVENTS <queue> ON [MAXLEN <n>] | OFF`: while on, every transition of the queue appends an
//! entry to `emq:{queue}:events`, capped near `n` entries (default 10,000); 1 when the setting
//! changed, 0 when it was so already.

use valkey_module::Context;

use super::cursor::{check_arity, syntax};
use super::{is_token, parse_int, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::PureToken as Pure,
    Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::operate;
use crate::runtime::cluster;

/// The stream's default cap, and the largest.
pub const DEFAULT_MAXLEN: i64 = 10_000;
pub const MAX_MAXLEN: i64 = 10_000_000;

pub const COMMAND: Command = Command {
    name: c"emq.events",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -3,
    routes_by_queue: true,
    summary: c"Turn the queue's event stream emq:{queue}:events on (capped near MAXLEN) or off",
    complexity: c"O(1)",
    args: &[
        QUEUE,
        Arg::required(
            c"state",
            OneOf(&[
                Arg::required(
                    c"on",
                    Block(&[
                        Arg::keyword(c"on", c"ON", Pure),
                        Arg::token(c"maxlen", c"MAXLEN", Int),
                    ]),
                ),
                Arg::keyword(c"off", c"OFF", Pure),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let cap = match args.len() {
        3 if is_token(args.bytes(2), "OFF") => None,
        3 if is_token(args.bytes(2), "ON") => Some(DEFAULT_MAXLEN),
        5 if is_token(args.bytes(2), "ON") && is_token(args.bytes(3), "MAXLEN") => {
            Some(parse_int(args.bytes(4), 1, MAX_MAXLEN, "MAXLEN")?)
        }
        _ => return Err(syntax("syntax error: expected ON [MAXLEN <n>] or OFF")),
    };
    cluster::check_stable(queue)?;
    let cap = cap.map(|c| c as u64);
    let changed = with_queue(ctx, queue, Access::ReadWrite, |store| {
        operate::set_events(store, cap)
    })?;
    Ok(Reply::Integer(i64::from(changed)))
}
