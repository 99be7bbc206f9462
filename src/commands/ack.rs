//! `EMQ.ACK <queue> <id> <token> [RESULT <bytes>]`: active -> done; the row, with the result
//! when one is given, stays `emq.done-ttl-ms`.

use valkey_module::Context;

use super::cursor::{check_arity, ArgCursor};
use super::{parse_token, with_job, ID, QUEUE, TOKEN};
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::queue::lease;

pub const COMMAND: Command = Command {
    name: c"emq.ack",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -4,
    routes_by_queue: true,
    summary:
        c"Acknowledge a claimed job: active -> done, the row (and RESULT) kept emq.done-ttl-ms",
    complexity: c"O(log(N))",
    args: &[QUEUE, ID, TOKEN, Arg::token(c"result", c"RESULT", Str)],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let result = ArgCursor::new(args, 4).last_bytes("RESULT")?;
    with_job(ctx, args, |store, target| {
        let token = parse_token(args.bytes(3))?;
        lease::ack(store, target, token, result)?;
        Ok(Reply::Integer(1))
    })
}
