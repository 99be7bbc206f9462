//! `EMQ.VERSION`: the protocol version the module speaks.

use valkey_module::Context;

use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::EmqError;
use crate::protocol::PROTOCOL_VERSION;

pub fn run(_ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 1 {
        return Err(EmqError::Arity("emq.version"));
    }
    Ok(Reply::Bulk(PROTOCOL_VERSION.as_bytes().to_vec()))
}
