//! `EMQ.STATS <queue>`: how many jobs each set holds, whether the queue is paused, and its claim
//! limits and their use.

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::queue::stats;

pub const COMMAND: Command = Command {
    name: c"emq.stats",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: 2,
    routes_by_queue: true,
    summary: c"Counts of pending, active, scheduled and dead jobs of a queue, of its groups with ready jobs, whether it is paused, and its claim limits and their use",
    complexity: c"O(1), or O(log(N)+E) under a rate limit, with N claims in the window and E past it",
    args: &[QUEUE],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let stats = with_queue(ctx, queue, Access::Read, |store| stats::stats(store))?;
    let [pending, active, scheduled, dead] = stats.sets;
    let n = |c: u64| Reply::Integer(c as i64);
    let mut fields = vec![
        ("pending", n(pending)),
        ("active", n(active)),
        ("scheduled", n(scheduled)),
        ("dead", n(dead)),
        ("waiting", n(stats.waiting)),
        ("groups", n(stats.groups)),
        ("paused", Reply::Integer(i64::from(stats.paused))),
    ];
    fields.extend(super::limit::usage_fields(&stats.usage));
    Ok(Reply::Map(fields))
}
