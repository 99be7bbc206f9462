//! `EMQ.CANCEL <queue> <id>`: removes a pending or scheduled job and its row (`1`); any
//! other job, or none, is left alone (`0`).

use valkey_module::Context;

use super::JobTarget;
use crate::error::EmqError;
use crate::lifecycle;
use crate::metrics;
use crate::server::{Args, CommandResult, Reply};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(EmqError::Arity("emq.cancel"));
    }
    let target = JobTarget::parse(ctx, args)?;
    let (sets, row) = target.open(ctx)?;
    let member = target.member.as_str();
    let from = if sets.pending.zscore(member).is_some() {
        &sets.pending
    } else if sets.schedule.zscore(member).is_some() {
        &sets.schedule
    } else {
        return Ok(Reply::Integer(0));
    };
    lifecycle::zrem(ctx, from, member)?;
    if !row.is_empty() {
        lifecycle::delete(ctx, &row)?;
    }
    metrics::count(&metrics::CANCELLED, 1);
    Ok(Reply::Integer(1))
}
