//! `EMQ.DECODE <key>`: the workshop decoder. A key outside the grammar is `EMQKEY`.

use valkey_module::Context;

use super::cursor::check_arity;
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::EmqError;
use crate::protocol::{decode, slot, Decoded};

pub const COMMAND: Command = Command {
    name: c"emq.decode",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: 2,
    routes_by_queue: false,
    summary: c"Read a key through the grammar: queue, type, id, kind and slot",
    complexity: c"O(N) with N the length of the key",
    args: &[Arg::required(c"key", Str)],
};

pub fn run(_ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let key = args.bytes(1);
    let decoded = decode(key).ok_or(EmqError::Key)?;
    let (queue, ty, id, group) = match decoded {
        Decoded::Queue {
            queue,
            ty,
            id,
            group,
        } => (Reply::Bulk(queue.as_bytes().to_vec()), ty.name(), id, group),
        Decoded::Deployment { name } => (Reply::Null, name, None, None),
    };
    let bulk_or_null = |b: Option<Vec<u8>>| b.map_or(Reply::Null, Reply::Bulk);
    Ok(Reply::Map(vec![
        ("queue", queue),
        ("type", Reply::Bulk(ty.as_bytes().to_vec())),
        ("id", bulk_or_null(id.map(|i| i.encode().to_vec()))),
        ("kind", bulk_or_null(id.map(|i| i.kind().to_vec()))),
        ("slot", Reply::Integer(i64::from(slot(key)))),
        ("group", bulk_or_null(group.map(|g| g.as_bytes().to_vec()))),
    ]))
}
