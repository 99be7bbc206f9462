//! `EMQ.SLOT <key>`: the cluster slot of any byte string (protocol.md §3).

use valkey_module::Context;

use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::slot;
use crate::protocol::EmqError;

pub fn run(_ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(EmqError::Arity("emq.slot"));
    }
    Ok(Reply::Integer(i64::from(slot(args.bytes(1)))))
}
