//! `EMQ.VERSION`: the protocol version the module speaks.

use valkey_module::Context;

use super::cursor::check_arity;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::PROTOCOL_VERSION;

pub const COMMAND: Command = Command {
    name: c"emq.version",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: 1,
    routes_by_queue: false,
    summary: c"The EchoMQ protocol version this module speaks",
    complexity: c"O(1)",
    args: &[],
};

pub fn run(_ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    Ok(Reply::Bulk(PROTOCOL_VERSION.as_bytes().to_vec()))
}
