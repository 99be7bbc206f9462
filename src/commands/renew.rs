//! `EMQ.RENEW <queue> <id> <token> <ms> [PROGRESS <bytes>]`: the lease runs until now + ms, and
//! the row keeps the progress when one is given; replies the new deadline (unix ms).

use valkey_module::Context;

use super::{parse_blob_option, parse_int, parse_job, parse_token};
use crate::host::acl::Access;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::{settings, EmqError};
use crate::queue::job::Target;
use crate::queue::{lease, Job};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 5 {
        return Err(EmqError::Arity("emq.renew"));
    }
    let progress = parse_blob_option(args, 5, "PROGRESS")?;
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
        let ms = parse_int(args.bytes(4), 1, settings::MAX_DURATION_MS, "lease ms")?;
        Ok(Reply::Integer(lease::renew(
            store, &target, token, ms, progress,
        )?))
    })
}
