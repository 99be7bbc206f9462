//! `EMQ.ENQUEUE <queue> <id|*> <payload> [DELAY <ms> | AT <unix-ms>] [PRIORITY <p>]
//! [UNIQUE <key> [FOR <ms>]]` (protocol.md §4, §6, §9): replies 1 for a new job, 0 for a duplicate,
//! the minted id for `*`, or, when another job holds the unique key, that job's id. The
//! refusals come in protocol.md §4 order: queue -> id -> kind -> payload size -> due time -> (the queue
//! layer) ACL -> row exists -> set type -> unique table type.

use valkey_module::Context;

use super::cursor::{syntax, ArgCursor};
use super::{is_token, parse_id, parse_queue, ID, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::server::now_ms;
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::job::{PRIORITY_MAX, PRIORITY_MIN};
use crate::protocol::{settings, EmqError};
use crate::queue::enqueue::{check_new, enqueue_with, Added, Placement};
use crate::queue::unique::{Unique, MAX_KEY_LEN, SWEEP_ROUND_MS};
use crate::queue::Job;
use crate::runtime::{cluster, timer};

/// The options after the payload.
struct Options<'a> {
    placement: Placement,
    priority: i64,
    unique: Option<Unique<'a>>,
}

/// The options after the payload, at `args[at..]`, in any order, each at most once:
/// `[DELAY <ms> | AT <unix-ms>]` (resolved against the clock, read only when there is a due
/// time to compare), `[PRIORITY <p>]` and `[UNIQUE <key>]` with its `[FOR <ms>]`.
fn parse_options<'a>(args: &Args<'a>, at: usize) -> Result<Options<'a>, EmqError> {
    let mut due = None;
    let mut priority = None;
    let mut unique: Option<&'a [u8]> = None;
    let mut for_ms = None;
    let mut now = None;
    let mut options = ArgCursor::new(args, at);
    while let Some(name) = options.next_option()? {
        if due.is_none() && is_token(name, "DELAY") {
            let t = *now.get_or_insert_with(|| now_ms() as i64);
            due = Some(t + options.next_int(0, settings::MAX_DURATION_MS, "DELAY")?);
        } else if due.is_none() && is_token(name, "AT") {
            due = Some(options.next_int(0, settings::MAX_UNIX_MS, "AT")?);
        } else if priority.is_none() && is_token(name, "PRIORITY") {
            priority = Some(options.next_int(PRIORITY_MIN, PRIORITY_MAX, "PRIORITY")?);
        } else if unique.is_none() && is_token(name, "UNIQUE") {
            let value = options.value()?;
            if value.is_empty() || value.len() > MAX_KEY_LEN {
                return Err(EmqError::Syntax(
                    format!("UNIQUE key must be 1 to {MAX_KEY_LEN} bytes").into(),
                ));
            }
            unique = Some(value);
        } else if for_ms.is_none() && is_token(name, "FOR") {
            for_ms = Some(options.next_int(1, settings::MAX_DURATION_MS, "FOR")?);
        } else {
            return Err(syntax(
                "syntax error: expected DELAY <ms> or AT <unix-ms>, PRIORITY <p> and UNIQUE <key> [FOR <ms>], once each",
            ));
        }
    }
    if for_ms.is_some() && unique.is_none() {
        return Err(syntax(
            "syntax error: FOR <ms> is the window of a UNIQUE key",
        ));
    }
    let placement = match due {
        None => Placement::Ready,
        Some(due) => Placement::at(due, now.unwrap_or_else(|| now_ms() as i64)),
    };
    Ok(Options {
        placement,
        priority: priority.unwrap_or(0),
        unique: unique.map(|key| Unique { key, for_ms }),
    })
}

pub const COMMAND: Command = Command {
    name: c"emq.enqueue",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -4,
    routes_by_queue: true,
    summary: c"Enqueue a job: write its row and add it to the queue's pending set, once; with UNIQUE, only while no job holds the key (the holder's id is the reply)",
    complexity: c"O(log(N)) with N the number of pending jobs",
    args: &[
        QUEUE,
        ID,
        Arg::required(c"payload", Str),
        Arg::optional(
            c"due",
            OneOf(&[
                Arg::keyword(c"delay", c"DELAY", Int),
                Arg::keyword(c"at", c"AT", Int),
            ]),
        ),
        Arg::token(c"priority", c"PRIORITY", Int),
        Arg::optional(
            c"unique",
            Block(&[
                Arg::keyword(c"key", c"UNIQUE", Str),
                Arg::token(c"window", c"FOR", Int),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(EmqError::Arity("emq.enqueue"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let requested = match args.bytes(2) {
        b"*" => None,
        id => Some(parse_id(id)?),
    };
    check_new(requested.as_ref(), args.bytes(3))?;
    let options = parse_options(args, 4)?;
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
        let added = enqueue_with(
            store,
            job,
            &Text::Borrowed(payload),
            options.placement,
            options.priority,
            options.unique.as_ref(),
        )?;
        if options.unique.is_some() && matches!(added, Added::New | Added::Minted(_)) {
            // The unique table's sweep is the timer's: its next round, unless one is nearer.
            timer::watch_unique(ctx, queue, now_ms() as i64 + SWEEP_ROUND_MS);
        }
        Ok(match added {
            Added::New => Reply::Integer(1),
            Added::Duplicate => Reply::Integer(0),
            Added::Minted(id) | Added::Held(id) => Reply::Bulk(id.encode().to_vec()),
        })
    })
}
