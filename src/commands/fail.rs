//! `EMQ.FAIL <queue> <id> <token> [ERROR <text>] [RETRY-IN <ms>]`: `scheduled` for a retry
//! after RETRY-IN or the exponential backoff, or `dead` after the last attempt.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_token, with_job, ID, QUEUE, TOKEN};
use crate::host::register::{Arg, ArgKind::Integer as Int, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::settings;
use crate::queue::lease::{self, Failed};

pub const COMMAND: Command = Command {
    name: c"emq.fail",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -4,
    routes_by_queue: true,
    summary: c"Fail a claimed job: retry after RETRY-IN or backoff, or dead after the last attempt",
    complexity: c"O(log(N))",
    args: &[
        QUEUE,
        ID,
        TOKEN,
        Arg::token(c"error", c"ERROR", Str),
        Arg::token(c"retry-in", c"RETRY-IN", Int),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let mut error = None;
    let mut retry_in = None;
    let mut options = ArgCursor::new(args, 4);
    while let Some(name) = options.next_option()? {
        if is_token(name, "ERROR") {
            error = Some(options.next_bytes()?);
        } else if is_token(name, "RETRY-IN") {
            retry_in = Some(options.next_int(0, settings::MAX_DURATION_MS, "RETRY-IN")?);
        } else {
            return Err(syntax("syntax error: expected ERROR or RETRY-IN"));
        }
    }
    with_job(ctx, args, |store, target| {
        let token = parse_token(args.bytes(3))?;
        Ok(match lease::fail(store, target, token, error, retry_in)? {
            Failed::Scheduled => Reply::Bulk(b"scheduled".to_vec()),
            Failed::Dead => Reply::Bulk(b"dead".to_vec()),
        })
    })
}
