//! `EMQ.JOBS <queue> <pending|active|scheduled|dead> [CURSOR c] [COUNT n] [WITHPAYLOADS]`:
//! one page of a set's jobs in its order, and the cursor of the next (`0` at the end).

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
use crate::queue::inspect::{self, Cursor, Entry, DEFAULT_COUNT, MAX_COUNT};

struct Request<'a> {
    queue: Queue<'a>,
    set: Set,
    cursor: Cursor,
    count: usize,
    with_payloads: bool,
}

fn parse<'a>(args: &Args<'a>) -> Result<Request<'a>, EmqError> {
    check_arity(args, &COMMAND)?;
    let mut req = Request {
        queue: parse_queue(args.bytes(1))?,
        set: inspect::set_named(args.bytes(2))?,
        cursor: Cursor::Start,
        count: DEFAULT_COUNT,
        with_payloads: false,
    };
    let mut options = ArgCursor::new(args, 3);
    while let Some(name) = options.next_word() {
        if is_token(name, "WITHPAYLOADS") {
            req.with_payloads = true;
        } else if is_token(name, "CURSOR") {
            req.cursor = Cursor::parse(options.value()?)?;
        } else if is_token(name, "COUNT") {
            req.count = options.next_int(1, MAX_COUNT, "COUNT")? as usize;
        } else {
            return Err(syntax(
                "syntax error: expected CURSOR, COUNT or WITHPAYLOADS",
            ));
        }
    }
    Ok(req)
}

fn job_reply(entry: Entry<Text<'_>>, with_payloads: bool) -> Reply {
    let text = |t: Option<Text<'_>>| t.map_or(Reply::Null, |t| Reply::Bulk(t.bytes().to_vec()));
    let mut job = vec![
        Reply::Bulk(entry.member.bytes().to_vec()),
        score_reply(entry.score),
        entry.attempts.map_or(Reply::Null, Reply::Integer),
    ];
    if with_payloads {
        job.push(text(entry.payload));
        job.push(text(entry.error));
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
        Arg::token(c"withpayloads", c"WITHPAYLOADS", Pure),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    let req = parse(args)?;
    with_queue(ctx, req.queue, Access::Read, |store| {
        let page = inspect::page(store, req.set, &req.cursor, req.count, req.with_payloads)?;
        let next = page.next.unwrap_or_else(|| inspect::START.to_vec());
        let jobs = page
            .jobs
            .into_iter()
            .map(|entry| job_reply(entry, req.with_payloads))
            .collect();
        Ok(Reply::Array(vec![Reply::Bulk(next), Reply::Array(jobs)]))
    })
}
