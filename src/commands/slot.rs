//! `EMQ.SLOT <key>`: the cluster slot of any byte string (protocol.md §3).

use valkey_module::Context;

use super::cursor::check_arity;
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::slot;

pub const COMMAND: Command = Command {
    name: c"emq.slot",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: 2,
    routes_by_queue: false,
    summary: c"The cluster slot of a key: CRC16-XMODEM of its hashtag mod 16384",
    complexity: c"O(N) with N the length of the key",
    args: &[Arg::required(c"key", Str)],
};

pub fn run(_ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    Ok(Reply::Integer(i64::from(slot(args.bytes(1)))))
}
