//! `EMQ.CANCEL <queue> <id>`: removes a pending or scheduled job and its row (`1`); any
//! other job, or none, is left alone (`0`).

use valkey_module::Context;

use super::cursor::check_arity;
use super::{with_job, ID, QUEUE};
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::queue::job;

pub const COMMAND: Command = Command {
    name: c"emq.cancel",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: 3,
    routes_by_queue: true,
    summary: c"Remove a pending or scheduled job and its row",
    complexity: c"O(log(N))",
    args: &[QUEUE, ID],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    with_job(ctx, args, |store, target| {
        Ok(Reply::Integer(i64::from(job::cancel(store, target)?)))
    })
}
