//! `EMQ.REQUEUE <queue> <id>`: moves a dead job back to pending with its attempts reset
//! (`1`); a job that is not dead is left alone (`0`).

use valkey_module::Context;

use super::parse_job;
use crate::host::acl::Access;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::EmqError;
use crate::queue::job::{self, Target};
use crate::queue::Job;

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(EmqError::Arity("emq.requeue"));
    }
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
        Ok(Reply::Integer(i64::from(job::requeue(store, &target)?)))
    })
}
