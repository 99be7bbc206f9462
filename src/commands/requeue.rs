//! `EMQ.REQUEUE <queue> <id>`: moves a dead job back to pending with its attempts reset
//! (`1`); a job that is not dead is left alone (`0`).

use valkey_module::Context;

use super::JobTarget;
use crate::error::EmqError;
use crate::lifecycle;
use crate::metrics;
use crate::server::{Args, CommandResult, Reply};
use crate::store::{self, Holds};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(EmqError::Arity("emq.requeue"));
    }
    let target = JobTarget::parse(ctx, args)?;
    let (sets, row) = target.open(ctx)?;
    let member = target.member.as_str();
    if sets.dead.zscore(member).is_none() || row.holds() != Holds::Hash {
        return Ok(Reply::Integer(0));
    }
    lifecycle::zrem(ctx, &sets.dead, member)?;
    let words = store::words()?;
    lifecycle::hset(
        ctx,
        &row,
        &[(words.state, words.pending), (words.attempts, words.zero)],
    )?;
    lifecycle::zadd(ctx, &sets.pending, 0, member)?;
    metrics::count(&metrics::REQUEUED, 1);
    Ok(Reply::Integer(1))
}
