//! `EMQ.CANCEL <queue> <id> [UNSTARTED]`: removes a pending, scheduled or waiting job and its
//! row, or ends an active job's attempt, the job to `dead` with the error `cancelled` (`1`); a
//! dead or done job, or none, is left alone (`0`), and with `UNSTARTED` an active one too. A
//! waiting parent's children in reach that have not started are cancelled with it
//! (docs/flows.md).

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_queue, with_job, ID, QUEUE};
use crate::host::register::{Arg, ArgKind, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::queue::job;
use crate::runtime::flows;

pub const COMMAND: Command = Command {
    name: c"emq.cancel",
    callback: crate::callback!(run),
    flags: c"write deny-oom fast",
    arity: -3,
    routes_by_queue: true,
    summary: c"Remove a pending, scheduled or waiting job and its row (a waiting parent with its children that have not started), or end an active job's attempt (not with UNSTARTED): the job goes to dead with the error cancelled, and its worker's next renewal or settle is refused with EMQCANCELLED",
    complexity: c"O(log(N))",
    args: &[
        QUEUE,
        ID,
        Arg {
            name: c"unstarted",
            kind: ArgKind::PureToken,
            token: Some(c"UNSTARTED"),
            optional: true,
            multiple: false,
        },
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    // The job's own hand-overs and its children's walk count against one budget.
    let _budget = flows::Budgeted::enter();
    let mut rest = ArgCursor::new(args, 3);
    let running = match rest.next_word() {
        None => true,
        Some(word) if is_token(word, "UNSTARTED") && rest.done() => false,
        Some(_) => return Err(syntax("syntax error: expected UNSTARTED")),
    };
    let cancelled = with_job(ctx, args, |store, target| {
        job::cancel_job(store, target, running)
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
