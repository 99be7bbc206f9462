//! `EMQ.MACK <queue> <id> <token> [RESULT <bytes>] [<id> <token> [RESULT <bytes>] ...]
//! [CLAIM <count> [LEASE <ms>]]`: acknowledges many claimed jobs of one queue in one call, and
//! with `CLAIM` takes the next jobs in the same call.
//!
//! Each job's outcome is its own: `1`, or `EMQLEASE` in its place when its token is stale,
//! wrong or not a token (`EMQCANCELLED` for an attempt a cancel ended), which leaves that job
//! as it was. The batch is refused as a whole
//! only for what refuses every job alike (the queue's name, an id, the syntax, a permission,
//! a key of another type), before any write. Without `CLAIM` it replies the outcomes; with it,
//! `[outcomes, jobs]`, the jobs as `EMQ.CLAIM` replies them (empty when none is ready; the
//! claim's own refusal, such as `EMQLIMIT`'s kin, in their place after the acks went through).

use valkey_module::Context;

use super::claim::{reply as claimed_reply, wake_past_orphans};
use super::cursor::{check_arity, syntax, ArgCursor};
use super::{check_batch, parse_id, parse_queue, parse_token, ID, QUEUE, TOKEN};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::{settings, BrandedId, EmqError};
use crate::queue::claim::{claim, Outcome, MAX_COUNT};
use crate::queue::lease::{ack_many, Settle, MAX_SETTLE};
use crate::queue::Job;
use crate::runtime::{cluster, queues};

/// A job of the call: its id, where its id stands in the arguments, its token and result.
struct Named<'a> {
    id: BrandedId,
    at: usize,
    token: Option<i64>,
    result: Option<&'a [u8]>,
}

/// `<count> [LEASE <ms>]` after `CLAIM`, the end of the call.
fn parse_claim(rest: &mut ArgCursor<'_, '_>) -> Result<(usize, i64), EmqError> {
    if rest.remaining() != 1 && rest.remaining() != 3 {
        return Err(syntax(
            "syntax error: CLAIM <count> [LEASE <ms>] ends the call",
        ));
    }
    let count = rest.next_int(1, MAX_COUNT, "COUNT")? as usize;
    let mut lease_ms = settings::lease_ms();
    if !rest.done() {
        if !rest.next_is("LEASE") {
            return Err(syntax("syntax error: expected LEASE after CLAIM <count>"));
        }
        lease_ms = rest.next_int(1, settings::MAX_DURATION_MS, "LEASE")?;
    }
    Ok((count, lease_ms))
}

/// The jobs and the `CLAIM` part, every argument checked.
#[allow(clippy::type_complexity)]
fn parse<'a>(args: &Args<'a>) -> Result<(Vec<Named<'a>>, Option<(usize, i64)>), EmqError> {
    let mut jobs = Vec::new();
    let mut next = None;
    let mut rest = ArgCursor::new(args, 2);
    while !rest.done() {
        if rest.next_is("CLAIM") {
            next = Some(parse_claim(&mut rest)?);
            break;
        }
        if rest.remaining() < 2 {
            return Err(syntax(
                "syntax error: each job is <id> <token> [RESULT <bytes>]",
            ));
        }
        check_batch(jobs.len(), MAX_SETTLE)?;
        let at = rest.position();
        let id = parse_id(rest.value()?)?;
        // A token that cannot be one refuses its job alone, as a stale one does.
        let token = parse_token(rest.value()?).ok();
        let mut result = None;
        if rest.next_is("RESULT") {
            if rest.done() {
                return Err(syntax("syntax error: expected RESULT <bytes>"));
            }
            result = Some(rest.next_bytes()?);
        }
        jobs.push(Named {
            id,
            at,
            token,
            result,
        });
    }
    if jobs.is_empty() {
        return Err(EmqError::Arity("emq.mack"));
    }
    Ok((jobs, next))
}

pub const COMMAND: Command = Command {
    name: c"emq.mack",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -4,
    routes_by_queue: true,
    summary: c"Acknowledge many claimed jobs of a queue, each on its own (1, or EMQLEASE or EMQCANCELLED in its place); with CLAIM, replies [outcomes, next jobs]",
    complexity: c"O((M+C)*log(N)) with M jobs acknowledged and C claimed",
    args: &[
        QUEUE,
        Arg::multiple(
            c"job",
            Block(&[
                ID,
                TOKEN,
                Arg::token(c"result", c"RESULT", Str),
            ]),
        ),
        Arg::optional(
            c"claim",
            Block(&[
                Arg::keyword(c"count", c"CLAIM", Int),
                Arg::token(c"lease", c"LEASE", Int),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let (named, next) = parse(args)?;
    cluster::check_stable(queue)?;
    // The client's strings: each id is canonical, so its argument is its set member.
    let members = named
        .iter()
        .map(|n| args.string(n.at).map(Text::Borrowed))
        .collect::<Option<Vec<_>>>()
        .ok_or(EmqError::Internal)?;
    let (settled, claimed) = with_queue(ctx, queue, Access::ReadWrite, |store| {
        let jobs: Vec<Settle<'_, _>> = named
            .iter()
            .zip(&members)
            .map(|(n, member)| Settle {
                job: Job { id: n.id, member },
                token: n.token,
                result: n.result,
            })
            .collect();
        let settled = {
            let _noted = queues::acknowledging(ctx, queue);
            ack_many(store, &jobs)?
        };
        let claimed = next.map(|(count, lease_ms)| claim(store, count, lease_ms));
        Ok::<_, EmqError>((settled, claimed))
    })?;
    let outcomes = Reply::Array(
        settled
            .into_iter()
            .map(|s| s.map_or_else(Reply::Error, |()| Reply::Integer(1)))
            .collect(),
    );
    let Some(claimed) = claimed else {
        return Ok(outcomes);
    };
    let jobs = match claimed {
        Ok(Outcome {
            claimed,
            more_behind,
        }) => {
            if claimed.is_empty() && more_behind {
                wake_past_orphans(ctx, queue);
            }
            claimed_reply(claimed)
        }
        Err(refused) => Reply::Error(refused),
    };
    Ok(Reply::Array(vec![outcomes, jobs]))
}
