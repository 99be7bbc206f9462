//! `EMQ.QUEUES [CURSOR <c>] [COUNT <n>]`: one page of the queues this node holds in the
//! client's database, in name order, those whose `pending` set the caller may read (and a step
//! of the walk that finds queues only others wrote, `runtime::queues::discover`).

use valkey_module::Context;

use super::cursor::{syntax, ArgCursor};
use super::is_token;
use crate::host::acl::with_key_reads;
use crate::host::register::{Arg, ArgKind::Integer as Int, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::EmqError;
use crate::runtime::queues::{self, Cursor};

/// Names a page returns when `COUNT` is not given.
pub const DEFAULT_COUNT: i64 = 100;
/// Most names a page returns.
pub const MAX_COUNT: i64 = 1000;

struct Request<'a> {
    cursor: Cursor<'a>,
    count: usize,
}

fn parse<'a>(args: &Args<'a>) -> Result<Request<'a>, EmqError> {
    let mut req = Request {
        cursor: Cursor::Start,
        count: DEFAULT_COUNT as usize,
    };
    let mut options = ArgCursor::new(args, 1);
    while let Some(name) = options.next_option()? {
        if is_token(name, "CURSOR") {
            req.cursor = Cursor::parse(options.value()?)?;
        } else if is_token(name, "COUNT") {
            req.count = options.next_int(1, MAX_COUNT, "COUNT")? as usize;
        } else {
            return Err(syntax("syntax error: expected CURSOR or COUNT"));
        }
    }
    Ok(req)
}

pub const COMMAND: Command = Command {
    name: c"emq.queues",
    callback: crate::callback!(run),
    flags: c"readonly",
    arity: -1,
    routes_by_queue: false,
    summary: c"Page through the queues this node holds in the client's database, in name order",
    complexity: c"O(log(Q)+C+K) with Q queues known, C the names read (COUNT, more for a key-restricted user) and K the keys walked past for queues only others wrote (at most 10000; none with emq.learn-foreign-writes yes)",
    args: &[
        Arg::token(c"cursor", c"CURSOR", Str),
        Arg::token(c"count", c"COUNT", Int),
    ],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    let req = parse(args)?;
    let (cursor, names) = with_key_reads(ctx, |may_read| {
        queues::list(ctx, req.cursor, req.count, may_read)
    })??;
    Ok(Reply::Array(vec![
        Reply::Bulk(cursor),
        Reply::Array(names.into_iter().map(Reply::Bulk).collect()),
    ]))
}
