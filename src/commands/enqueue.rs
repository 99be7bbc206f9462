//! `EMQ.ENQUEUE <queue> <id|*> <payload> [DELAY <ms> | AT <unix-ms>]` (SPEC §4, §6): the
//! reference `@enqueue` script as one in-process step. Every check runs before the first
//! write, in SPEC order: queue -> id -> kind -> payload size -> ACL -> row exists -> types.
//! A due time in the future parks the job in `schedule` with `state scheduled`.

use std::sync::Mutex;

use valkey_module::Context;

use super::{is_token, parse_id, parse_int, parse_queue};
use crate::cluster;
use crate::config;
use crate::error::EmqError;
use crate::grammar::{BrandedId, KeyBuf, KeyType, Minter, Queue, RowPrefix};
use crate::lifecycle::{self, State};
use crate::metrics;
use crate::server::{self, Args, CommandResult, Reply};
use crate::store::{self, Holds, Key, OwnedString, Str};

static MINTER: Mutex<Minter> = Mutex::new(Minter::new());
/// A minted id that collides with an existing row (a clock far behind the data) is minted
/// again, at most this many times.
pub const MINT_TRIES: usize = 8;

/// A fresh `JOB` id for this node.
pub fn mint() -> BrandedId {
    let mut minter = MINTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    minter.mint(server::now_ms(), config::node_id())
}

/// Where a new job goes: the ready set now, or the delayed set at its due time.
#[derive(Clone, Copy)]
pub enum Placement {
    Ready,
    Due(i64),
}

enum Outcome {
    Enqueued,
    Duplicate,
}

/// `<payload>`'s size against `emq.max-payload-bytes`.
pub fn check_payload(payload: &[u8]) -> Result<(), EmqError> {
    let limit = config::max_payload_bytes();
    if i64::try_from(payload.len()).map_or(true, |n| n > limit) {
        return Err(EmqError::Payload { limit });
    }
    Ok(())
}

/// `[DELAY <ms> | AT <unix-ms>]` at `args[at..]`, resolved against the clock (read only
/// when there is a due time to compare).
fn parse_placement(args: &Args, at: usize) -> Result<Placement, EmqError> {
    if args.len() == at {
        return Ok(Placement::Ready);
    }
    let now = server::now_ms() as i64;
    let due = match args.len() - at {
        2 if is_token(args.bytes(at), "DELAY") => {
            now + parse_int(args.bytes(at + 1), 0, config::MAX_DURATION_MS, "DELAY")?
        }
        2 if is_token(args.bytes(at), "AT") => {
            parse_int(args.bytes(at + 1), 0, config::MAX_UNIX_MS, "AT")?
        }
        _ => {
            return Err(EmqError::Syntax(
                "syntax error: expected DELAY <ms> or AT <unix-ms>".into(),
            ))
        }
    };
    Ok(if due > now {
        Placement::Due(due)
    } else {
        Placement::Ready
    })
}

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 4 && args.len() != 6 {
        return Err(EmqError::Arity("emq.enqueue"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let requested = match args.bytes(2) {
        b"*" => None,
        id => Some(parse_id(id)?),
    };
    if requested.is_some_and(|id| !id.is_job()) {
        return Err(EmqError::Kind);
    }
    check_payload(args.bytes(3))?;
    let placement = parse_placement(args, 4)?;
    cluster::check_stable(queue)?;
    let payload = args.string(3).ok_or(EmqError::Internal)?;
    let set = OwnedString::cached(ctx, KeyBuf::queue(queue, set_type(placement)).as_bytes())?;

    let reply = match requested {
        Some(id) => match enqueue_one(ctx, queue, &id, args.string(2), &set, payload, placement)? {
            Outcome::Enqueued => Reply::Integer(1),
            Outcome::Duplicate => Reply::Integer(0),
        },
        None => {
            let mut reply = Reply::Integer(0);
            for _ in 0..MINT_TRIES {
                let id = mint();
                if let Outcome::Enqueued =
                    enqueue_one(ctx, queue, &id, None, &set, payload, placement)?
                {
                    reply = Reply::Bulk(id.encode().to_vec());
                    break;
                }
            }
            reply
        }
    };
    match (&reply, placement) {
        (Reply::Integer(0), _) => metrics::count(&metrics::DUPLICATES, 1),
        (_, Placement::Ready) => metrics::count(&metrics::ENQUEUED, 1),
        (_, Placement::Due(_)) => metrics::count(&metrics::SCHEDULED, 1),
    }
    Ok(reply)
}

fn set_type(placement: Placement) -> KeyType {
    match placement {
        Placement::Ready => KeyType::Pending,
        Placement::Due(_) => KeyType::Schedule,
    }
}

/// ACL -> row exists -> set type -> write the row, ZADD, events, effects. `set_name` is the
/// pending set (or the schedule set for a delayed job); `id_arg` the client's id argument,
/// when it gave one.
fn enqueue_one(
    ctx: &Context,
    queue: Queue<'_>,
    id: &BrandedId,
    id_arg: Option<Str<'_>>,
    set_name: &OwnedString,
    payload: Str<'_>,
    placement: Placement,
) -> Result<Outcome, EmqError> {
    let row_key = match id_arg {
        Some(arg) => RowPrefix::new(queue).row_arg(id, arg.bytes()),
        None => KeyBuf::job(queue, id),
    };
    let row_name = OwnedString::new(ctx, row_key.as_bytes())?;
    store::check_access(ctx, &[&row_name, set_name])?;
    let row = Key::open(ctx, &row_name)?;
    if row.holds() != Holds::Nothing {
        return Ok(Outcome::Duplicate);
    }
    let set = Key::open(ctx, set_name)?;
    set.expect_zset()?;

    let (state, score) = match placement {
        Placement::Ready => (State::Pending, 0),
        Placement::Due(at) => (State::Scheduled, at),
    };
    // A well-formed id is canonical (parse and encode are inverse), so the client's own
    // argument string is the member: no copy. A minted id needs a string of its own.
    let minted;
    let member = match id_arg {
        Some(arg) => arg,
        None => {
            minted = OwnedString::new(ctx, &id.encode())?;
            minted.as_str()
        }
    };
    // The row, then the set, each with its event and effect, in the order the reference
    // script's HSET and ZADD run. The zadd event also wakes claimers blocked on the pending
    // set (see `scheduler`).
    lifecycle::write_row(ctx, &row, state, payload)?;
    lifecycle::zadd(ctx, &set, score, member)?;
    Ok(Outcome::Enqueued)
}
