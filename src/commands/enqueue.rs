//! `EMQ.ENQUEUE <queue> <id|*> <payload> [DELAY <ms> | AT <unix-ms>]` (SPEC §4, §6): replies
//! 1 for a new job, 0 for a duplicate, or the minted id for `*`. The refusals come in SPEC
//! order: queue -> id -> kind -> payload size -> due time -> (the queue layer) ACL -> row
//! exists -> set type.

use valkey_module::Context;

use super::{is_token, parse_id, parse_int, parse_queue};
use crate::host::acl::Access;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::server::now_ms;
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::{settings, EmqError};
use crate::queue::enqueue::{check_new, enqueue, Added, Placement};
use crate::queue::Job;
use crate::runtime::cluster;

/// `[DELAY <ms> | AT <unix-ms>]` at `args[at..]`, resolved against the clock (read only
/// when there is a due time to compare).
fn parse_placement(args: &Args, at: usize) -> Result<Placement, EmqError> {
    if args.len() == at {
        return Ok(Placement::Ready);
    }
    let now = now_ms() as i64;
    let due = match args.len() - at {
        2 if is_token(args.bytes(at), "DELAY") => {
            now + parse_int(args.bytes(at + 1), 0, settings::MAX_DURATION_MS, "DELAY")?
        }
        2 if is_token(args.bytes(at), "AT") => {
            parse_int(args.bytes(at + 1), 0, settings::MAX_UNIX_MS, "AT")?
        }
        _ => {
            return Err(EmqError::Syntax(
                "syntax error: expected DELAY <ms> or AT <unix-ms>".into(),
            ))
        }
    };
    Ok(Placement::at(due, now))
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
    check_new(requested.as_ref(), args.bytes(3))?;
    let placement = parse_placement(args, 4)?;
    cluster::check_stable(queue)?;
    let (Some(id_text), Some(payload)) = (args.string(2), args.string(3)) else {
        return Err(EmqError::Internal);
    };
    with_queue(ctx, queue, Access::ReadWrite, |store| {
        // A well-formed id is canonical (parse and encode are inverse), so the client's own
        // argument string is the set member: no copy.
        let member = Text::Borrowed(id_text);
        let job = requested.map(|id| Job {
            id,
            member: &member,
        });
        Ok(
            match enqueue(store, job, &Text::Borrowed(payload), placement)? {
                Added::New => Reply::Integer(1),
                Added::Duplicate => Reply::Integer(0),
                Added::Minted(id) => Reply::Bulk(id.encode().to_vec()),
            },
        )
    })
}
