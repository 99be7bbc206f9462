//! `EMQ.CLAIM <queue> [COUNT n] [LEASE ms] [BLOCK ms]`: promotes what is due, then moves up
//! to n of the lowest pending ids to `active`. With BLOCK it waits in the server, served in
//! arrival order, until a job is ready or the time runs out.

use std::os::raw::c_int;

use valkey_module::{raw, Context};

use super::{is_token, parse_int, parse_queue};
use crate::cluster;
use crate::config;
use crate::error::EmqError;
use crate::grammar::{KeyBuf, KeyType, Queue};
use crate::lifecycle::{
    self, check_head_types, check_row_types, pending_head, Claimed, Due, QueueKeys, Sets,
};
use crate::metrics;
use crate::scheduler;
use crate::server::{self, Args, CommandResult, Reply};
use crate::store::{self, OwnedString};

pub const MAX_COUNT: i64 = 1000;

struct Request<'a> {
    queue: Queue<'a>,
    count: usize,
    lease_ms: i64,
    block_ms: Option<i64>,
}

fn parse<'a>(args: &Args<'a>) -> Result<Request<'a>, EmqError> {
    if args.len() < 2 {
        return Err(EmqError::Arity("emq.claim"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let mut req = Request {
        queue,
        count: 1,
        lease_ms: config::lease_ms(),
        block_ms: None,
    };
    let mut i = 2;
    while i < args.len() {
        let (name, value) = (args.bytes(i), args.bytes(i + 1));
        if i + 1 >= args.len() {
            return Err(EmqError::Syntax(
                "syntax error: an option lacks its value".into(),
            ));
        }
        if is_token(name, "COUNT") {
            req.count = parse_int(value, 1, MAX_COUNT, "COUNT")? as usize;
        } else if is_token(name, "LEASE") {
            req.lease_ms = parse_int(value, 1, config::MAX_DURATION_MS, "LEASE")?;
        } else if is_token(name, "BLOCK") {
            req.block_ms = Some(parse_int(value, 0, config::MAX_DURATION_MS, "BLOCK")?);
        } else {
            return Err(EmqError::Syntax(
                "syntax error: expected COUNT, LEASE or BLOCK".into(),
            ));
        }
        i += 2;
    }
    Ok(req)
}

/// What a claim did: the jobs it took, and whether it met only members without a row, as many
/// as one claim passes over, with more members waiting behind them.
struct Outcome {
    claimed: Vec<Claimed>,
    more_behind: bool,
}

/// Promote what is due, then claim: every check first, then the writes.
fn claim_now(ctx: &Context, req: &Request<'_>) -> Result<Outcome, EmqError> {
    cluster::check_stable(req.queue)?;
    let keys = QueueKeys::new(ctx, req.queue)?;
    store::check_access(ctx, &keys.all())?;
    let sets = Sets::open(ctx, &keys)?;
    let now = server::now_ms() as i64;
    let due = Due::find(ctx, req.queue, &sets, now, lifecycle::PROMOTE_BUDGET)?;
    let head = pending_head(ctx, req.queue, &sets, req.count)?;
    let rows: Vec<&OwnedString> = due
        .rows()
        .chain(head.iter().filter_map(|h| h.row.as_ref()))
        .collect();
    store::check_access(ctx, &rows)?;
    check_row_types(ctx, &due.rows().collect::<Vec<_>>())?;
    check_head_types(&head)?;
    let moved = due.promote(ctx, &sets, now)?;
    metrics::count(&metrics::DEAD, moved.buried as u64);
    // Promoted jobs may now come first: read the head again. Its rows are among those checked
    // (the first head's and the promoted jobs').
    let head = match moved.to_pending {
        0 => head,
        _ => pending_head(ctx, req.queue, &sets, req.count)?,
    };
    let claimed = lifecycle::claim(ctx, &sets, head, now + req.lease_ms)?;
    metrics::count(&metrics::CLAIMED, claimed.len() as u64);
    // A head with no job in it, and members still pending: the head was all rowless members
    // (now dropped) up to the budget.
    let more_behind = claimed.is_empty() && !sets.pending.is_empty();
    Ok(Outcome {
        claimed,
        more_behind,
    })
}

/// Wakes the claimers blocked on the queue (one that just blocked among them), so that they
/// go on past the rowless members a claim dropped.
fn go_on(ctx: &Context, req: &Request<'_>) {
    if let Ok(pending) = pending_name(ctx, req) {
        store::signal_ready(ctx, pending.as_str());
    }
}

/// The queue's pending set, which blocked claimers wait on.
fn pending_name(ctx: &Context, req: &Request<'_>) -> Result<OwnedString, EmqError> {
    OwnedString::cached(ctx, KeyBuf::queue(req.queue, KeyType::Pending).as_bytes())
}

fn reply(claimed: Vec<Claimed>) -> Reply {
    Reply::Array(
        claimed
            .into_iter()
            .map(|c| {
                Reply::Array(vec![
                    Reply::Bulk(c.id),
                    Reply::Bulk(c.payload),
                    Reply::Integer(c.attempts),
                ])
            })
            .collect(),
    )
}

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    let req = parse(args)?;
    let Outcome {
        claimed,
        more_behind,
    } = claim_now(ctx, &req)?;
    let Some(timeout) = req.block_ms else {
        return Ok(reply(claimed));
    };
    if !claimed.is_empty() {
        return Ok(reply(claimed));
    }
    let no_blocking = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED;
    if store::context_flags(ctx) & no_blocking != 0 {
        // Inside MULTI or a script nothing can arrive while we wait, and a claim sent down a
        // replication link would stop the stream behind it: answer as a timeout.
        return Ok(Reply::Null);
    }
    let pending = pending_name(ctx, &req)?;
    store::block_on_key(
        ctx,
        pending.as_str(),
        timeout,
        on_ready,
        server::reply_timeout,
    )?;
    if more_behind {
        go_on(ctx, &req);
    }
    Ok(Reply::Blocked)
}

/// The pending set was signalled: claim for this waiter, or keep it waiting.
fn ready(ctx: &Context, args: &Args) -> Option<CommandResult> {
    let req = match parse(args) {
        Ok(req) => req,
        Err(e) => return Some(Err(e)),
    };
    // What the server checks before a command runs, but not before it serves a blocked
    // module command: the user's right to the command, and maxmemory.
    if let Err(e) = store::check_command(ctx, args.raw()) {
        return Some(Err(e));
    }
    if store::context_flags(ctx) & raw::REDISMODULE_CTX_FLAGS_OOM != 0 {
        // Refused as a new claim is (and a woken native command).
        return Some(Err(EmqError::Oom));
    }
    if scheduler::writes_paused() {
        // Woken after a transaction that paused client writes: a claim now would propagate
        // inside the pause. Wait on, as the server would postpone a native command.
        if let Ok(pending) = pending_name(ctx, &req) {
            scheduler::wake_after_pause(ctx, pending.bytes());
        }
        return None;
    }
    match claim_now(ctx, &req) {
        Ok(Outcome {
            claimed,
            more_behind,
        }) if claimed.is_empty() => {
            if more_behind {
                go_on(ctx, &req);
            }
            None
        }
        Ok(Outcome { claimed, .. }) => Some(Ok(reply(claimed))),
        Err(e) => Some(Err(e)),
    }
}

unsafe extern "C" fn on_ready(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    server::dispatch_ready(ctx, argv, argc, ready)
}
