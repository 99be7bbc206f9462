//! `EMQ.VERSION`: the protocol version the module speaks.

use valkey_module::Context;

use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::EmqError;
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
    if args.len() != 1 {
        return Err(EmqError::Arity("emq.version"));
    }
    Ok(Reply::Bulk(PROTOCOL_VERSION.as_bytes().to_vec()))
}
