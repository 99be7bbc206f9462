//! `EMQ.JOBS <queue> <pending|active|scheduled|dead> [CURSOR c] [COUNT n] [WITHPAYLOADS |
//! PREVIEW <bytes>]`: one page of a set's jobs in its order, and the cursor of the next (`0` at
//! the end); `PREVIEW` cuts each payload and error to its first bytes and gives their lengths.

use valkey_module::Context;

use super::cursor::{check_arity, syntax, ArgCursor};
use super::job::score_reply;
use super::{is_token, parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::{
    Arg, ArgKind::Integer as Int, ArgKind::OneOf, ArgKind::PureToken as Pure,
    ArgKind::String as Str, Command,
};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::{EmqError, Queue, Set};
use crate::queue::inspect::{self, Cursor, Entry, DEFAULT_COUNT, MAX_COUNT, MAX_PREVIEW};

/// What a page shows of each job's row beyond its attempts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Show {
    Ids,
    /// `WITHPAYLOADS`: the payload and the error, whole.
    Payloads,
    /// `PREVIEW <bytes>`: their first bytes, and their lengths.
    Preview(usize),
}

struct Request<'a> {
    queue: Queue<'a>,
    set: Set,
    cursor: Cursor,
    count: usize,
    show: Show,
}

fn parse<'a>(args: &Args<'a>) -> Result<Request<'a>, EmqError> {
    check_arity(args, &COMMAND)?;
    let mut req = Request {
        queue: parse_queue(args.bytes(1))?,
        set: inspect::set_named(args.bytes(2))?,
        cursor: Cursor::Start,
        count: DEFAULT_COUNT,
        show: Show::Ids,
    };
    let mut options = ArgCursor::new(args, 3);
    while let Some(name) = options.next_word() {
        if is_token(name, "WITHPAYLOADS") {
            req.show = Show::Payloads;
        } else if is_token(name, "PREVIEW") {
            req.show = Show::Preview(options.next_int(1, MAX_PREVIEW, "PREVIEW")? as usize);
        } else if is_token(name, "CURSOR") {
            req.cursor = Cursor::parse(options.value()?)?;
        } else if is_token(name, "COUNT") {
            req.count = options.next_int(1, MAX_COUNT, "COUNT")? as usize;
        } else {
            return Err(syntax(
                "syntax error: expected CURSOR, COUNT, WITHPAYLOADS or PREVIEW",
            ));
        }
    }
    Ok(req)
}

fn job_reply(entry: Entry<Text<'_>>, show: Show) -> Reply {
    let cut = |t: &Option<Text<'_>>, at: usize| {
        t.as_ref().map_or(Reply::Null, |t| {
            let bytes = t.bytes();
            Reply::Bulk(bytes[..bytes.len().min(at)].to_vec())
        })
    };
    let len = |t: &Option<Text<'_>>| {
        t.as_ref()
            .map_or(Reply::Null, |t| Reply::Integer(t.bytes().len() as i64))
    };
    let mut job = vec![
        Reply::Bulk(entry.member.bytes().to_vec()),
        score_reply(entry.score),
        entry.attempts.map_or(Reply::Null, Reply::Integer),
    ];
    match show {
        Show::Ids => {}
        Show::Payloads => {
            job.push(cut(&entry.payload, usize::MAX));
            job.push(cut(&entry.error, usize::MAX));
        }
        Show::Preview(at) => {
            job.push(cut(&entry.payload, at));
            job.push(cut(&entry.error, at));
            job.push(len(&entry.payload));
            job.push(len(&entry.error));
        }
    }
    Reply::Array(job)
}

pub const COMMAND: Command = Command {
    name: c"emq.jobs",
    callback: crate::callback!(run),
    flags: c"readonly",
    arity: -3,
    routes_by_queue: true,
    summary: c"One page of a set's jobs in the set's order, resuming after a cursor",
    complexity: c"O(log(N)^2 + C*log(N)) with N the jobs in the set and C the COUNT",
    args: &[
        QUEUE,
        Arg::required(
            c"set",
            OneOf(&[
                Arg::keyword(c"pending", c"pending", Pure),
                Arg::keyword(c"active", c"active", Pure),
                Arg::keyword(c"scheduled", c"scheduled", Pure),
                Arg::keyword(c"dead", c"dead", Pure),
            ]),
        ),
        Arg::token(c"cursor", c"CURSOR", Str),
        Arg::token(c"count", c"COUNT", Int),
        Arg::optional(
            c"show",
            OneOf(&[
                Arg::keyword(c"withpayloads", c"WITHPAYLOADS", Pure),
                Arg::keyword(c"preview", c"PREVIEW", Int),
            ]),
        ),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    let req = parse(args)?;
    with_queue(ctx, req.queue, Access::Read, |store| {
        let page = inspect::page(
            store,
            req.set,
            &req.cursor,
            req.count,
            req.show != Show::Ids,
        )?;
        let next = page.next.unwrap_or_else(|| inspect::START.to_vec());
        let jobs = page
            .jobs
            .into_iter()
            .map(|entry| job_reply(entry, req.show))
            .collect();
        Ok(Reply::Array(vec![Reply::Bulk(next), Reply::Array(jobs)]))
    })
}
