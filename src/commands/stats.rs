//! `EMQ.STATS <queue>`: how many jobs each set holds.

use valkey_module::Context;

use super::parse_queue;
use crate::error::EmqError;
use crate::lifecycle::QueueKeys;
use crate::server::{Args, CommandResult, Reply};
use crate::store::{self, Access, Key};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(EmqError::Arity("emq.stats"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let keys = QueueKeys::new(ctx, queue)?;
    store::check_permission(ctx, &keys.all(), Access::Read)?;
    let mut counts = Vec::with_capacity(4);
    for (name, key) in [
        ("pending", &keys.pending),
        ("active", &keys.active),
        ("scheduled", &keys.schedule),
        ("dead", &keys.dead),
    ] {
        let set = Key::open_read(ctx, key)?;
        set.expect_zset()?;
        counts.push((name, Reply::Integer(set.len() as i64)));
    }
    Ok(Reply::Map(counts))
}
