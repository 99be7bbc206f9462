//! `EMQ.MENQUEUE <queue> [PRIORITY <p>] [HEADERS <n> <key> <value> ...] <id> <payload> ...`:
//! many jobs in one atomic step, each at its own priority (0 where none is given) and with its
//! own headers.
//! All or nothing: every id, payload, permission and type is checked before the first write,
//! and one refusal refuses the batch. Replies one `1`/`0` per job (the minted id for `*`); a
//! duplicate, already present or earlier in the batch, is `0`.

use valkey_module::Context;

use super::cursor::{syntax, ArgCursor};
use super::{check_batch, parse_headers, parse_id, parse_queue, HEADERS, ID, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Block, ArgKind::Integer as Int, ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::job::{PRIORITY_MAX, PRIORITY_MIN};
use crate::protocol::EmqError;
use crate::queue::enqueue::{check_new, enqueue_many, Added, BatchJob, MAX_BATCH};
use crate::queue::Job;
use crate::runtime::cluster;

pub const COMMAND: Command = Command {
    name: c"emq.menqueue",
    callback: crate::callback!(run),
    flags: c"write deny-oom",
    arity: -4,
    routes_by_queue: true,
    summary: c"Enqueue many jobs in one atomic step; one 1/0 (or minted id) per job",
    complexity: c"O(M*log(N)) with M jobs and N pending jobs",
    args: &[
        QUEUE,
        Arg::multiple(
            c"job",
            Block(&[
                Arg::token(c"priority", c"PRIORITY", Int),
                HEADERS,
                ID,
                Arg::required(c"payload", Str),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(EmqError::Arity("emq.menqueue"));
    }
    let queue = parse_queue(args.bytes(1))?;
    // Every id, kind, payload, priority and header first: each job is
    // `[PRIORITY <p>] [HEADERS ...] <id> <payload>`, its id `None` for `*`, with the places of
    // its id and payload.
    let mut requested = Vec::new();
    let mut rest = ArgCursor::new(args, 2);
    while !rest.done() {
        // A job's options, in either order, each once.
        let (mut priority, mut headers) = (None, None);
        loop {
            if rest.next_is("PRIORITY") {
                if priority.is_some() {
                    return Err(syntax("syntax error: PRIORITY given twice for one job"));
                }
                priority = Some(rest.next_int(PRIORITY_MIN, PRIORITY_MAX, "PRIORITY")?);
            } else if rest.next_is("HEADERS") {
                if headers.is_some() {
                    return Err(syntax("syntax error: HEADERS given twice for one job"));
                }
                headers = Some(parse_headers(&mut rest)?);
            } else {
                break;
            }
        }
        let priority = priority.unwrap_or(0);
        if rest.done() {
            return Err(syntax(
                "syntax error: PRIORITY <p> and HEADERS come before a job's <id> <payload>",
            ));
        }
        check_batch(requested.len(), MAX_BATCH)?;
        let at = rest.position();
        let id = match rest.value()? {
            b"*" => None,
            id => Some(parse_id(id)?),
        };
        check_new(id.as_ref(), rest.value()?)?;
        requested.push((id, at, priority, headers));
    }
    cluster::check_stable(queue)?;
    // The client's strings: each given id is canonical, so its argument is its set member.
    let mut texts = Vec::with_capacity(requested.len());
    for &(_, at, _, _) in &requested {
        let (Some(id), Some(payload)) = (args.string(at), args.string(at + 1)) else {
            return Err(EmqError::Internal);
        };
        texts.push((Text::Borrowed(id), Text::Borrowed(payload)));
    }
    let added = with_queue(ctx, queue, Access::ReadWrite, |store| {
        let jobs: Vec<BatchJob<'_, _>> = requested
            .iter()
            .zip(&texts)
            .map(|((id, _, priority, headers), (member, payload))| BatchJob {
                job: id.map(|id| Job { id, member }),
                payload,
                priority: *priority,
                headers: headers.as_deref(),
            })
            .collect();
        enqueue_many(store, &jobs)
    })?;
    Ok(Reply::Array(
        added
            .into_iter()
            .map(|a| match a {
                Added::New => Reply::Integer(1),
                // A batch takes no unique keys: nothing else holds its jobs back.
                Added::Duplicate | Added::Held(_) => Reply::Integer(0),
                Added::Minted(id) => Reply::Bulk(id.encode().to_vec()),
            })
            .collect(),
    ))
}
