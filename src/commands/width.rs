//! `EMQ.WIDTH <queue>`: the queue's place in a partitioned queue (docs/cluster.md): `width`
//! (its partitions, 0 for an ordinary queue), and for a partition `of` (the partitioned
//! queue) and `index`.

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::{KeyRef, Store};
use crate::queue::span::{self, Role};

pub const COMMAND: Command = Command {
    name: c"emq.width",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: 2,
    routes_by_queue: true,
    summary: c"How many partitions a partitioned queue has (0: an ordinary queue), and for a partition which queue it belongs to and its index",
    complexity: c"O(1)",
    args: &[QUEUE],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    let role = with_queue(ctx, queue, Access::Read, |store| {
        store.check_access(&[KeyRef::ReadMeta])?;
        span::role(store)
    })?;
    let int = |n: u16| Reply::Integer(i64::from(n));
    Ok(Reply::Map(match role {
        Role::Plain => vec![
            ("width", int(0)),
            ("of", Reply::Null),
            ("index", Reply::Null),
        ],
        Role::Spanned { width } => {
            vec![
                ("width", int(width)),
                ("of", Reply::Null),
                ("index", Reply::Null),
            ]
        }
        Role::Retired { of } => {
            vec![
                ("width", int(0)),
                ("of", Reply::Bulk(of)),
                ("index", Reply::Null),
            ]
        }
        Role::Partition { of, index, width } => vec![
            ("width", int(width)),
            ("of", Reply::Bulk(of)),
            ("index", int(index)),
        ],
    }))
}
