//! `EMQ.CANCEL <queue> <id>`: removes a pending, scheduled or waiting job and its row, or ends
//! an active job's attempt, the job to `dead` with the error `cancelled` (`1`); a dead or done
//! job, or none, is left alone (`0`). A waiting parent's children in reach that have not
//! started are cancelled with it (docs/flows.md).

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_queue, with_job, ID, QUEUE};
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::queue::job;
use crate::runtime::flows;

pub const COMMAND: Command = Command {
    name: c"emq.cancel",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: 3,
    routes_by_queue: true,
    summary: c"Remove a pending, scheduled or waiting job and its row (a waiting parent with its children that have not started), or end an active job's attempt: the job goes to dead with the error cancelled, and its worker's next renewal or settle is refused with EMQCANCELLED",
    complexity: c"O(log(N))",
    args: &[QUEUE, ID],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let cancelled = with_job(ctx, args, |store, target| {
        job::cancel_job(store, target, true)
    })?;
    let Some(children) = cancelled else {
        return Ok(Reply::Integer(0));
    };
    if !children.is_empty() {
        let queue = parse_queue(args.bytes(1))?;
        flows::cancel_children(ctx, queue, children);
    }
    Ok(Reply::Integer(1))
}
