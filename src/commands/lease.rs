//! The lease holder's commands: `EMQ.RENEW`, `EMQ.ACK` and `EMQ.FAIL`. The token is the
//! `attempts` value `EMQ.CLAIM` returned; a wrong, stale or missing one gets `EMQLEASE` and
//! changes nothing.

use valkey_module::Context;

use super::{is_token, parse_int, JobTarget};
use crate::config;
use crate::error::EmqError;
use crate::lifecycle::{self, attempts_of, Sets, State};
use crate::metrics;
use crate::server::{self, Args, CommandResult, Reply};
use crate::store::{Holds, Key, OwnedString};

fn parse_token(bytes: &[u8]) -> Result<i64, EmqError> {
    parse_int(bytes, 1, i64::MAX, "token").map_err(|_| EmqError::Lease)
}

/// The job is active, in the active set, and its attempts equal `token`.
fn check_lease(
    sets: &Sets<'_>,
    row: &Key<'_>,
    member: &OwnedString,
    token: i64,
) -> Result<i64, EmqError> {
    let active = row.holds() == Holds::Hash
        && row
            .hash_get(c"state")
            .is_some_and(|s| s.bytes() == State::Active.as_bytes())
        && sets.active.zscore(member.as_str()).is_some();
    let attempts = attempts_of(row);
    if !active || attempts != token {
        return Err(EmqError::Lease);
    }
    Ok(attempts)
}

/// `EMQ.RENEW <queue> <id> <token> <ms>`: the new lease deadline (unix ms).
pub fn renew(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 5 {
        return Err(EmqError::Arity("emq.renew"));
    }
    let target = JobTarget::parse(ctx, args)?;
    let token = parse_token(args.bytes(3))?;
    let ms = parse_int(args.bytes(4), 1, config::MAX_DURATION_MS, "lease ms")?;
    let (sets, row) = target.open(ctx)?;
    check_lease(&sets, &row, &target.member, token)?;
    let deadline = server::now_ms() as i64 + ms;
    lifecycle::zadd(ctx, &sets.active, deadline, target.member.as_str())?;
    metrics::count(&metrics::RENEWED, 1);
    Ok(Reply::Integer(deadline))
}

/// `EMQ.ACK <queue> <id> <token>`: active -> done; the row stays `emq.done-ttl-ms`.
pub fn ack(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 4 {
        return Err(EmqError::Arity("emq.ack"));
    }
    let target = JobTarget::parse(ctx, args)?;
    let token = parse_token(args.bytes(3))?;
    let (sets, row) = target.open(ctx)?;
    check_lease(&sets, &row, &target.member, token)?;
    lifecycle::zrem(ctx, &sets.active, target.member.as_str())?;
    let ttl = config::done_ttl_ms();
    if ttl == 0 {
        lifecycle::delete(ctx, &row)?;
    } else {
        lifecycle::set_state(ctx, &row, State::Done, None)?;
        lifecycle::expire_at(ctx, &row, server::now_ms() as i64 + ttl)?;
    }
    metrics::count(&metrics::ACKED, 1);
    Ok(Reply::Integer(1))
}

/// `EMQ.FAIL <queue> <id> <token> [ERROR <text>] [RETRY-IN <ms>]`: `scheduled` for a retry
/// after RETRY-IN or the exponential backoff, or `dead` after the last attempt.
pub fn fail(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 {
        return Err(EmqError::Arity("emq.fail"));
    }
    let mut error = None;
    let mut retry_in = None;
    let mut i = 4;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(EmqError::Syntax(
                "syntax error: an option lacks its value".into(),
            ));
        }
        let (name, value) = (args.bytes(i), args.bytes(i + 1));
        if is_token(name, "ERROR") {
            let limit = config::max_payload_bytes();
            if i64::try_from(value.len()).map_or(true, |n| n > limit) {
                return Err(EmqError::Payload { limit });
            }
            error = Some(value);
        } else if is_token(name, "RETRY-IN") {
            retry_in = Some(parse_int(value, 0, config::MAX_DURATION_MS, "RETRY-IN")?);
        } else {
            return Err(EmqError::Syntax(
                "syntax error: expected ERROR or RETRY-IN".into(),
            ));
        }
        i += 2;
    }
    let target = JobTarget::parse(ctx, args)?;
    let token = parse_token(args.bytes(3))?;
    let (sets, row) = target.open(ctx)?;
    let attempts = check_lease(&sets, &row, &target.member, token)?;
    let now = server::now_ms() as i64;
    if attempts < config::max_attempts() {
        let due = now + retry_in.unwrap_or_else(|| config::backoff_ms(attempts));
        lifecycle::zrem(ctx, &sets.active, target.member.as_str())?;
        lifecycle::set_state(ctx, &row, State::Scheduled, error)?;
        lifecycle::zadd(ctx, &sets.schedule, due, target.member.as_str())?;
        metrics::count(&metrics::RETRIED, 1);
        Ok(Reply::Bulk(b"scheduled".to_vec()))
    } else {
        drop(row);
        lifecycle::bury(
            ctx,
            &sets,
            &sets.active,
            &target.member,
            &target.row,
            now,
            error,
        )?;
        metrics::count(&metrics::DEAD, 1);
        Ok(Reply::Bulk(b"dead".to_vec()))
    }
}
