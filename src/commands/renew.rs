//! `EMQ.RENEW <queue> <id> <token> <ms> [PROGRESS <bytes>]`: the lease runs until now + ms, and
//! the row keeps the progress when one is given; replies the new deadline (unix ms).

use valkey_module::Context;

use super::cursor::{check_arity, ArgCursor};
use super::{parse_int, parse_token, with_job, ID, QUEUE, TOKEN};
use crate::host::register::{Arg, ArgKind::Integer as Int, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::settings;
use crate::queue::lease;

pub const COMMAND: Command = Command {
    name: c"emq.renew",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -5,
    routes_by_queue: true,
    summary:
        c"Extend a live lease to now + ms, keeping PROGRESS in the row; replies the new deadline",
    complexity: c"O(log(N))",
    args: &[
        QUEUE,
        ID,
        TOKEN,
        Arg::required(c"ms", Int),
        Arg::token(c"progress", c"PROGRESS", Str),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let progress = ArgCursor::new(args, 5).last_bytes("PROGRESS")?;
    with_job(ctx, args, |store, target| {
        let token = parse_token(args.bytes(3))?;
        let ms = parse_int(args.bytes(4), 1, settings::MAX_DURATION_MS, "lease ms")?;
        Ok(Reply::Integer(lease::renew(
            store, target, token, ms, progress,
        )?))
    })
}
