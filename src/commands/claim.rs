//! `EMQ.CLAIM <queue> [COUNT n] [LEASE ms] [BLOCK ms] [WAKE k <queue>...]`: promotes what is
//! due, then moves up to n of the lowest pending ids to `active`. With BLOCK it waits in the
//! server, served in arrival order, until a job is ready or the time runs out; with WAKE it
//! also wakes, replying no job, when one is ready in another of the queues named (on this
//! primary: a worker of a partitioned queue blocks once a primary, docs/cluster.md).

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::{is_token, parse_queue, QUEUE};
use crate::host::acl::{check_command, Access};
use crate::host::block::{block_on_keys, ready_key, Waiter};
use crate::host::client::{selected_db, writes_paused, Flags};
use crate::host::propagate::signal_ready;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::OwnedString;
use crate::protocol::job::Claimed;
use crate::protocol::{settings, slot, EmqError, KeyBuf, KeyType, Queue};
use crate::queue::claim::{claim, plainly_ready, Outcome, MAX_COUNT};
use crate::runtime::waiters::{self, Waiting};
use crate::runtime::{cluster, owners, timer};

struct Request<'a> {
    queue: Queue<'a>,
    count: usize,
    lease_ms: i64,
    block_ms: Option<i64>,
    /// The other queues whose ready jobs wake a blocked claim.
    wake: Vec<Queue<'a>>,
}

/// Most queues one claim's `WAKE` names (a partitioned queue's most partitions).
const MAX_WAKE: i64 = crate::protocol::partition::MAX_PARTITIONS as i64;

fn parse<'a>(args: &Args<'a>) -> Result<Request<'a>, EmqError> {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let mut req = Request {
        queue,
        count: 1,
        lease_ms: settings::lease_ms(),
        block_ms: None,
        wake: Vec::new(),
    };
    let mut options = ArgCursor::new(args, 2);
    while let Some(name) = options.next_option()? {
        if is_token(name, "COUNT") {
            req.count = options.next_int(1, MAX_COUNT, "COUNT")? as usize;
        } else if is_token(name, "LEASE") {
            req.lease_ms = options.next_int(1, settings::MAX_DURATION_MS, "LEASE")?;
        } else if is_token(name, "BLOCK") {
            req.block_ms = Some(options.next_int(0, settings::MAX_DURATION_MS, "BLOCK")?);
        } else if is_token(name, "WAKE") {
            let k = options.next_int(1, MAX_WAKE, "WAKE")? as usize;
            options.expect_values(k)?;
            req.wake = (0..k)
                .map(|_| parse_queue(options.value()?))
                .collect::<Result<_, _>>()?;
        } else {
            return Err(syntax("syntax error: expected COUNT, LEASE, BLOCK or WAKE"));
        }
    }
    if !req.wake.is_empty() && req.block_ms.is_none() {
        return Err(syntax("syntax error: WAKE needs BLOCK"));
    }
    Ok(req)
}

fn claim_now(ctx: &Context, req: &Request<'_>) -> Result<Outcome, EmqError> {
    cluster::check_stable(req.queue)?;
    with_queue(ctx, req.queue, Access::ReadWrite, |store| {
        claim(store, req.count, req.lease_ms)
    })
}

/// The keys blocked claimers wait on: the queue's pending set, and its `turns`, which a
/// grouped queue's named groups with ready jobs keep (a missing key is never signalled ready).
fn waited_on(ctx: &Context, queue: Queue<'_>) -> Result<[OwnedString; 2], EmqError> {
    let name = |ty| OwnedString::cached(ctx, KeyBuf::queue(queue, ty).as_bytes());
    Ok([name(KeyType::Pending)?, name(KeyType::Turns)?])
}

/// The keys a blocked claim's `WAKE` queues wake it by: each one's pending set and `turns`.
fn wake_keys(ctx: &Context, wake: &[Queue<'_>]) -> Result<Vec<OwnedString>, EmqError> {
    let mut keys = Vec::with_capacity(2 * wake.len());
    for queue in wake {
        keys.extend(waited_on(ctx, *queue)?);
    }
    Ok(keys)
}

/// Whether the key that woke a blocked claim is another queue's (one of its `WAKE`).
fn woken_by_other(ctx: &Context, req: &Request<'_>) -> bool {
    if req.wake.is_empty() {
        return false;
    }
    let Some(key) = ready_key(ctx) else {
        return false;
    };
    let own = [KeyType::Pending, KeyType::Turns].map(|ty| KeyBuf::queue(req.queue, ty));
    !own.iter().any(|k| k.as_bytes() == key.as_slice())
}

fn go_on(ctx: &Context, req: &Request<'_>) {
    wake_past_orphans(ctx, req.queue);
}

/// Wakes the claimers blocked on `queue` (one that just blocked among them), so that they go
/// on past the rowless members a claim dropped.
pub fn wake_past_orphans(ctx: &Context, queue: Queue<'_>) {
    for key in waited_on(ctx, queue).iter().flatten() {
        signal_ready(ctx, key.as_str());
    }
}

/// The jobs a claim took, as `EMQ.CLAIM` replies them: `[id, payload, token]` each, and the
/// job's headers fourth where it has some.
pub fn reply(claimed: Claimed) -> Reply {
    Reply::Jobs(claimed)
}

pub const COMMAND: Command = Command {
    name: c"emq.claim",
    callback: crate::callback!(run),
    flags: c"write deny-oom blocking",
    arity: -2,
    routes_by_queue: true,
    summary: c"Claim up to COUNT ready jobs under a lease, waiting up to BLOCK ms for one; each [id, payload, token] and its headers where it has some",
    complexity: c"O((P+C)*log(N)) with P jobs promoted and C claimed",
    args: &[
        QUEUE,
        Arg::token(c"count", c"COUNT", Int),
        Arg::token(c"lease", c"LEASE", Int),
        Arg::token(c"block", c"BLOCK", Int),
        Arg::optional(
            c"wake",
            Block(&[
                Arg::keyword(c"numqueues", c"WAKE", Int),
                Arg::multiple(c"queue", Str),
            ]),
        ),
    ],
};

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
    if Flags::of(ctx).cannot_block() {
        // Inside MULTI or a script nothing can arrive while we wait, and a claim sent down a
        // replication link would stop the stream behind it: answer as a timeout.
        return Ok(Reply::Null);
    }
    // A queue another primary serves would never wake this one: the worker's map is stale.
    for queue in &req.wake {
        let slot = slot(queue.as_bytes());
        if let Some(addr) = owners::elsewhere(slot) {
            return Err(EmqError::Moved { slot, addr });
        }
    }
    // A job that came to another queue since the worker last claimed there signalled no one:
    // it is told now (a read of that queue, checked as one).
    for queue in &req.wake {
        if with_queue(ctx, *queue, Access::Read, |store| plainly_ready(store))? {
            return Ok(reply(Claimed::default()));
        }
    }
    let [pending, turns] = waited_on(ctx, req.queue)?;
    let mut keys = vec![pending, turns];
    keys.extend(wake_keys(ctx, &req.wake)?);
    let keys: Vec<_> = keys.iter().map(|k| k.as_str()).collect();
    let mut waited = vec![req.queue];
    waited.extend_from_slice(&req.wake);
    let held = waiters::blocked(selected_db(ctx), &waited);
    block_on_keys::<Blocked>(ctx, &keys, timeout, held)?;
    if let Some(at) = waiters::poll_at() {
        timer::soon(at);
    }
    if more_behind {
        go_on(ctx, &req);
    }
    Ok(Reply::Blocked)
}

/// A claim waiting for its queue's pending set.
struct Blocked;

impl Waiter for Blocked {
    /// The queues it waits on, whose `schedule` heads the timer polls meanwhile.
    type Held = Waiting;

    fn released(held: Waiting) {
        // Dropped, it counts the claim out of its queues.
        drop(held);
    }

    /// The pending set was signalled: claim for this waiter, or keep it waiting.
    fn ready(ctx: &Context, args: &Args) -> Option<CommandResult> {
        let req = match parse(args) {
            Ok(req) => req,
            Err(e) => return Some(Err(e)),
        };
        // What the server checks before a command runs, but not before it serves a blocked
        // module command: the user's right to the command, and maxmemory.
        if let Err(e) = check_command(ctx, args) {
            return Some(Err(e));
        }
        if Flags::of(ctx).oom() {
            // Refused as a new claim is (and a woken native command).
            return Some(Err(EmqError::Oom));
        }
        if writes_paused() {
            // Woken after a transaction that paused client writes: a claim now would propagate
            // inside the pause. Wait on, as the server would postpone a native command.
            for key in waited_on(ctx, req.queue).iter().flatten() {
                timer::wake_after_pause(ctx, key.bytes());
            }
            for key in wake_keys(ctx, &req.wake).iter().flatten() {
                timer::wake_after_pause(ctx, key.bytes());
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
                // Woken by another queue's ready job: no job, for the worker to claim there.
                woken_by_other(ctx, &req).then(|| Ok(reply(Claimed::default())))
            }
            Ok(Outcome { claimed, .. }) => Some(Ok(reply(claimed))),
            Err(e) => Some(Err(e)),
        }
    }
}
