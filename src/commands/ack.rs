//! `EMQ.ACK <queue> <id> <token> [RESULT <bytes>]`: active -> done; the row, with the result
//! when one is given, stays `emq.done-ttl-ms`.

use valkey_module::Context;

use super::{parse_blob_option, parse_token, with_job};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::EmqError;
use crate::queue::lease;

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 {
        return Err(EmqError::Arity("emq.ack"));
    }
    let result = parse_blob_option(args, 4, "RESULT")?;
    with_job(ctx, args, |store, target| {
        let token = parse_token(args.bytes(3))?;
        lease::ack(store, target, token, result)?;
        Ok(Reply::Integer(1))
    })
}
