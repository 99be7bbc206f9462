//! `EMQ.MENQUEUE <queue> <id> <payload> [<id> <payload> ...]`: many jobs in one atomic step.
//! All or nothing: every id, payload, permission and type is checked before the first write,
//! and one refusal refuses the batch. Replies one `1`/`0` per job (the minted id for `*`); a
//! duplicate, already present or earlier in the batch, is `0`.

use valkey_module::Context;

use super::{parse_id, parse_queue};
use crate::host::acl::Access;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::host::string::Text;
use crate::protocol::EmqError;
use crate::queue::enqueue::{check_new, enqueue_many, Added, BatchJob, MAX_BATCH};
use crate::queue::Job;
use crate::runtime::cluster;

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(EmqError::Arity("emq.menqueue"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let n = (args.len() - 2) / 2;
    if n > MAX_BATCH {
        return Err(EmqError::Syntax(
            format!("at most {MAX_BATCH} jobs per call").into(),
        ));
    }
    // Every id, kind and payload first. Each job's id: `None` for `*`.
    let mut requested = Vec::with_capacity(n);
    for j in 0..n {
        let id = match args.bytes(2 + 2 * j) {
            b"*" => None,
            id => Some(parse_id(id)?),
        };
        check_new(id.as_ref(), args.bytes(3 + 2 * j))?;
        requested.push(id);
    }
    cluster::check_stable(queue)?;
    // The client's strings: each given id is canonical, so its argument is its set member.
    let mut texts = Vec::with_capacity(n);
    for j in 0..n {
        let (Some(id), Some(payload)) = (args.string(2 + 2 * j), args.string(3 + 2 * j)) else {
            return Err(EmqError::Internal);
        };
        texts.push((Text::Borrowed(id), Text::Borrowed(payload)));
    }
    let added = with_queue(ctx, queue, Access::ReadWrite, |store| {
        let jobs: Vec<BatchJob<'_, _>> = requested
            .iter()
            .zip(&texts)
            .map(|(id, (member, payload))| BatchJob {
                job: id.map(|id| Job { id, member }),
                payload,
            })
            .collect();
        enqueue_many(store, &jobs)
    })?;
    Ok(Reply::Array(
        added
            .into_iter()
            .map(|a| match a {
                Added::New => Reply::Integer(1),
                Added::Duplicate => Reply::Integer(0),
                Added::Minted(id) => Reply::Bulk(id.encode().to_vec()),
            })
            .collect(),
    ))
}
