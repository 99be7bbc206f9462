//! `EMQ.ENQUEUE <queue> <id|*> <payload> [DELAY <ms> | AT <unix-ms>] [PRIORITY <p>]
//! [UNIQUE <key> [FOR <ms>]] [TIMEOUT <ms>] [GROUP <group>] [HEADERS <n> <key> <value> ...]`
//! (protocol.md §4, §6, §9): replies 1 for a new job, 0 for a duplicate,
//! the minted id for `*`, or, when another job holds the unique key, that job's id. The
//! refusals come in protocol.md §4 order: queue -> id -> kind -> payload size -> due time -> (the queue
//! layer) ACL -> row exists -> set type -> unique table type.

use valkey_module::Context;

use super::cursor::{syntax, ArgCursor};
use super::{is_token, parse_group, parse_headers, parse_id, parse_queue, HEADERS, ID, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::server::now_ms;
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::counters;
use crate::protocol::flow::{write_parents, ParentRef, Policy, MAX_CHILDREN, MAX_PARENTS};
use crate::protocol::job::{PRIORITY_MAX, PRIORITY_MIN};
use crate::protocol::limits::MAX_TIMEOUT_MS;
use crate::protocol::{settings, BrandedId, EmqError, Holds, KeyRef, Queue, Store};
use crate::queue::enqueue::{check_new, enqueue_extras, Added, Extras, Placement};
use crate::queue::unique::{Unique, MAX_KEY_LEN, SWEEP_ROUND_MS};
use crate::queue::Job;
use crate::runtime::{cluster, flows, timer};

/// The options after the payload.
struct Options<'a> {
    placement: Placement,
    priority: i64,
    unique: Option<Unique<'a>>,
    /// `CHILDREN <n>`: a parent that waits for `n` children.
    children: Option<i64>,
    /// Each `PARENT <queue> <id> [ON-FAIL FAIL|IGNORE]`, in order.
    parents: Vec<ParentRef>,
    /// `TIMEOUT <ms>`: the job's limit on one attempt.
    timeout: Option<i64>,
    /// `GROUP <group>`: the named group the job is in.
    group: Option<&'a [u8]>,
    /// `HEADERS <n> <key> <value> ...`, as the row's `headers` field.
    headers: Option<Vec<u8>>,
}

/// `PARENT <queue> <id> [ON-FAIL FAIL|IGNORE]`, its name read: a parent the job may name once.
fn parse_parent(
    options: &mut ArgCursor<'_, '_>,
    parents: &[ParentRef],
) -> Result<ParentRef, EmqError> {
    options.expect_values(2)?;
    let queue = parse_queue(options.value()?)?;
    let id = parse_id(options.value()?)?;
    let policy = if options.next_is("ON-FAIL") {
        Policy::parse(options.value()?)
            .ok_or_else(|| syntax("syntax error: ON-FAIL is FAIL or IGNORE"))?
    } else {
        Policy::Fail
    };
    if parents.len() == MAX_PARENTS {
        return Err(EmqError::Syntax(
            format!("a job names at most {MAX_PARENTS} parents").into(),
        ));
    }
    if parents
        .iter()
        .any(|p| p.id == id && p.queue == queue.as_bytes())
    {
        return Err(syntax("syntax error: a parent is named twice"));
    }
    Ok(ParentRef {
        queue: queue.as_bytes().to_vec(),
        id,
        policy,
    })
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
    let mut children = None;
    let mut timeout = None;
    let mut group = None;
    let mut headers = None;
    let mut parents = Vec::new();
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
        } else if timeout.is_none() && is_token(name, "TIMEOUT") {
            timeout = Some(options.next_int(1, MAX_TIMEOUT_MS, "TIMEOUT")?);
        } else if group.is_none() && is_token(name, "GROUP") {
            group = Some(parse_group(options.value()?)?.as_bytes());
        } else if headers.is_none() && is_token(name, "HEADERS") {
            headers = Some(parse_headers(&mut options)?);
        } else if children.is_none() && is_token(name, "CHILDREN") {
            children = Some(options.next_int(1, MAX_CHILDREN, "CHILDREN")?);
        } else if is_token(name, "PARENT") {
            let parent = parse_parent(&mut options, &parents)?;
            parents.push(parent);
        } else {
            return Err(syntax(
                "syntax error: expected DELAY <ms> or AT <unix-ms>, PRIORITY <p>, UNIQUE <key> [FOR <ms>], TIMEOUT <ms>, GROUP <group>, HEADERS <n> <key> <value> ... and CHILDREN <n>, once each, and PARENT <queue> <id> [ON-FAIL FAIL|IGNORE]",
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
        children,
        parents,
        timeout,
        group,
        headers,
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
        Arg::token(c"timeout", c"TIMEOUT", Int),
        Arg::token(c"group", c"GROUP", Str),
        HEADERS,
        Arg::token(c"children", c"CHILDREN", Int),
        Arg::optional_multiple(
            c"parent",
            Block(&[
                Arg::keyword(c"parent-queue", c"PARENT", Str),
                Arg::required(c"parent-id", Str),
                Arg::token(
                    c"on-fail",
                    c"ON-FAIL",
                    OneOf(&[Arg::pure(c"fail", c"FAIL"), Arg::pure(c"ignore", c"IGNORE")]),
                ),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 {
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
    // The parents in reach are checked before anything is written, and take the child after.
    let parents: Vec<(Queue<'_>, BrandedId)> = options
        .parents
        .iter()
        .filter_map(|p| Some((Queue::parse(&p.queue)?, p.id)))
        .collect();
    let extras = Extras {
        children: options.children,
        parents: (!options.parents.is_empty()).then(|| write_parents(&options.parents)),
        timeout: options.timeout,
        group: options.group.map(<[u8]>::to_vec),
        headers: options.headers,
    };
    // The child's own enqueue, run inside the stores of its parents in reach, which check it
    // before and register it after (`refusal`: the first of theirs).
    let mut enqueue = |refusal: Option<EmqError>| {
        with_queue(ctx, queue, Access::ReadWrite, |store| {
            // A well-formed id is canonical (parse and encode are inverse), so the client's own
            // argument string is the set member: no copy.
            let member = Text::Borrowed(id_text);
            if let Some(refusal) = refusal {
                // A child that exists already is a duplicate, whatever became of its parents
                // since (a retried flow): that answers before their refusal. (With no refusal,
                // the enqueue itself finds it.)
                if let Some(id) = requested.as_ref() {
                    let name = store.row_name(id, &member)?;
                    store.check_access(&[KeyRef::Row(&name)])?;
                    if store.probe(&name)? != Holds::Nothing {
                        counters::count(&counters::DUPLICATES, 1);
                        return Ok((Added::Duplicate, None));
                    }
                }
                return Err(refusal);
            }
            let job = requested.map(|id| Job {
                id,
                member: &member,
            });
            let added = enqueue_extras(
                store,
                job,
                &Text::Borrowed(payload),
                options.placement,
                options.priority,
                options.unique.as_ref(),
                &extras,
            )?;
            if options.unique.is_some() && matches!(added, Added::New | Added::Minted(_)) {
                // The unique table's sweep is the timer's: its next round, unless one is nearer.
                timer::watch_unique(ctx, queue, now_ms() as i64 + SWEEP_ROUND_MS);
            }
            let child = match added {
                Added::New => requested,
                Added::Minted(id) => Some(id),
                Added::Duplicate | Added::Held(_) => None,
            };
            Ok((added, child))
        })
    };
    let (added, _) = flows::adopting(ctx, queue, requested.as_ref(), &parents, None, &mut enqueue)?;
    Ok(match added {
        Added::New => Reply::Integer(1),
        Added::Duplicate => Reply::Integer(0),
        Added::Minted(id) | Added::Held(id) => Reply::Bulk(id.encode().to_vec()),
    })
}
