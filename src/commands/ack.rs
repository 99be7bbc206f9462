//! `EMQ.ACK <queue> <id> <token> [RESULT <bytes>]`: active -> done; the row, with the result
//! when one is given, stays `emq.done-ttl-ms`.

use valkey_module::Context;

use super::{parse_blob_option, parse_job, parse_token};
use crate::host::acl::Access;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::EmqError;
use crate::queue::job::Target;
use crate::queue::{lease, Job};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 {
        return Err(EmqError::Arity("emq.ack"));
    }
    let result = parse_blob_option(args, 4, "RESULT")?;
    let (queue, id, member) = parse_job(args)?;
    with_queue(ctx, queue, Access::ReadWrite, |store| {
        let member = Text::Borrowed(member);
        let target = Target::check(
            store,
            Job {
                id,
                member: &member,
            },
        )?;
        let token = parse_token(args.bytes(3))?;
        lease::ack(store, &target, token, result)?;
        Ok(Reply::Integer(1))
    })
}
