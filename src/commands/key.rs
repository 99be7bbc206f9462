//! `EMQ.KEY <queue> <type> [<id>]`: composes a key through the grammar (protocol.md §1); the
//! `<id>` of a `group` key is the group's name.

use valkey_module::Context;

use super::{parse_group, parse_id, parse_queue, QUEUE};
use crate::host::register::{Arg, ArgKind::String as Str, Command};
use crate::host::reply::{Args, CommandResult, Reply};
use crate::protocol::EmqError;
use crate::protocol::{group_key, job_key, queue_key, KeyType};

pub const COMMAND: Command = Command {
    name: c"emq.key",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: -3,
    routes_by_queue: false,
    summary: c"Compose a key of the emq:{queue}:<type> grammar",
    complexity: c"O(1)",
    args: &[
        QUEUE,
        Arg::required(c"type", Str),
        Arg::optional(c"id", Str),
    ],
};

pub fn run(_ctx: &Context, args: &Args) -> CommandResult {
    if !(3..=4).contains(&args.len()) {
        return Err(EmqError::Arity("emq.key"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let ty = KeyType::parse(args.bytes(2)).ok_or(EmqError::Type)?;
    let key = match (ty, args.len()) {
        (KeyType::Job, 4) => job_key(queue, &parse_id(args.bytes(3))?),
        (KeyType::Job, _) => {
            return Err(EmqError::Syntax("a job key needs a branded id".into()));
        }
        (KeyType::Group, 4) => group_key(queue, parse_group(args.bytes(3))?),
        (KeyType::Group, _) => {
            return Err(EmqError::Syntax("a group key needs a group's name".into()));
        }
        (_, 3) => queue_key(queue, ty),
        (_, _) => {
            return Err(EmqError::Syntax(
                format!("a {} key takes no id", ty.name()).into(),
            ));
        }
    };
    Ok(Reply::Bulk(key))
}
