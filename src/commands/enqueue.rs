//! `EMQ.ENQUEUE <queue> <id|*> <payload>` (SPEC §4): the reference `@enqueue` script as one
//! in-process step. Every check runs before the first write, in SPEC order:
//! queue -> id -> kind -> payload size -> ACL -> row exists -> types -> write.

use std::sync::Mutex;

use valkey_module::Context;

use super::{parse_id, parse_queue};
use crate::config;
use crate::error::EmqError;
use crate::grammar::{job_key, queue_key, BrandedId, KeyType, Minter, Queue};
use crate::metrics;
use crate::server::{self, Args, CommandResult, Reply};
use crate::store::{self, Holds, Key, OwnedString, Str};

static MINTER: Mutex<Minter> = Mutex::new(Minter::new());
/// A minted id that collides with an existing row (a clock far behind the data) is minted
/// again, at most this many times.
const MINT_TRIES: usize = 8;

fn mint() -> BrandedId {
    let mut minter = MINTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    minter.mint(server::now_ms(), config::node_id())
}

enum Outcome {
    Enqueued,
    Duplicate,
}

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 4 {
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
    let limit = config::max_payload_bytes();
    if i64::try_from(args.bytes(3).len()).map_or(true, |n| n > limit) {
        return Err(EmqError::Payload { limit });
    }
    let payload = args.string(3).ok_or(EmqError::Internal)?;
    let pending = OwnedString::new(ctx, &queue_key(queue, KeyType::Pending))?;

    let reply = match requested {
        Some(id) => match enqueue_one(ctx, queue, &id, &pending, payload)? {
            Outcome::Enqueued => Reply::Integer(1),
            Outcome::Duplicate => Reply::Integer(0),
        },
        None => {
            let mut reply = Reply::Integer(0);
            for _ in 0..MINT_TRIES {
                let id = mint();
                if let Outcome::Enqueued = enqueue_one(ctx, queue, &id, &pending, payload)? {
                    reply = Reply::Bulk(id.encode().to_vec());
                    break;
                }
            }
            reply
        }
    };
    match reply {
        Reply::Integer(0) => metrics::count(&metrics::DUPLICATES, 1),
        _ => metrics::count(&metrics::ENQUEUED, 1),
    }
    Ok(reply)
}

/// ACL -> row exists -> pending type -> write row, ZADD pending, notify, replicate.
fn enqueue_one(
    ctx: &Context,
    queue: Queue<'_>,
    id: &BrandedId,
    pending_name: &OwnedString,
    payload: Str<'_>,
) -> Result<Outcome, EmqError> {
    let row_name = OwnedString::new(ctx, &job_key(queue, id))?;
    store::check_access(ctx, &[&row_name, pending_name])?;
    let row = Key::open(ctx, &row_name)?;
    if row.holds() != Holds::Nothing {
        return Ok(Outcome::Duplicate);
    }
    let pending = Key::open(ctx, pending_name)?;
    if !matches!(pending.holds(), Holds::Nothing | Holds::Zset) {
        return Err(EmqError::WrongType);
    }

    let member = OwnedString::new(ctx, &id.encode())?;
    let state = OwnedString::new(ctx, b"pending")?;
    let attempts = OwnedString::new(ctx, b"0")?;
    let fields = [
        (c"state", state.as_str()),
        (c"attempts", attempts.as_str()),
        (c"payload", payload),
    ];
    // Each write is followed by its event, in the order the native HSET and ZADD fire them.
    row.hash_set3(fields)?;
    store::notify(ctx, store::NOTIFY_HASH, c"hset", &row_name);
    pending.zadd(0.0, member.as_str())?;
    store::notify(ctx, store::NOTIFY_ZSET, c"zadd", pending_name);
    store::replicate_hset3(ctx, &row_name, fields);
    store::replicate_zadd(ctx, pending_name, c"0", member.as_str());
    Ok(Outcome::Enqueued)
}
