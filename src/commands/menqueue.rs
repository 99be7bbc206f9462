//! `EMQ.MENQUEUE <queue> <id> <payload> [<id> <payload> ...]`: many jobs in one atomic step.
//! All or nothing: every id, payload, permission and type is checked before the first write,
//! and one refusal refuses the batch. Replies one `1`/`0` per job (the minted id for `*`); a
//! duplicate, already present or earlier in the batch, is `0`. The effects replicate as one
//! `HSET` per new row and one variadic `ZADD`.

use valkey_module::Context;

use super::enqueue::{check_payload, mint, MINT_TRIES};
use super::{parse_id, parse_queue};
use crate::cluster;
use crate::effects;
use crate::error::EmqError;
use crate::grammar::{KeyBuf, KeyType, RowPrefix};
use crate::lifecycle::{self, State};
use crate::metrics;
use crate::server::{Args, CommandResult, Reply};
use crate::store::{self, Holds, Key, OwnedString};

/// Most jobs one call takes.
pub const MAX_JOBS: usize = 10_000;

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(EmqError::Arity("emq.menqueue"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let n = (args.len() - 2) / 2;
    if n > MAX_JOBS {
        return Err(EmqError::Syntax(
            format!("at most {MAX_JOBS} jobs per call").into(),
        ));
    }
    // Every id, kind and payload first. Each job's id: `None` for `*`, with the argument.
    let mut requested = Vec::with_capacity(n);
    for j in 0..n {
        let text = args.bytes(2 + 2 * j);
        let id = match text {
            b"*" => None,
            id => Some(parse_id(id)?),
        };
        if id.is_some_and(|id| !id.is_job()) {
            return Err(EmqError::Kind);
        }
        check_payload(args.bytes(3 + 2 * j))?;
        requested.push((id, text));
    }
    cluster::check_stable(queue)?;
    let pending_name = OwnedString::cached(ctx, KeyBuf::queue(queue, KeyType::Pending).as_bytes())?;
    let prefix = RowPrefix::new(queue);
    let mut rows = Vec::with_capacity(n);
    for (id, text) in &requested {
        let (id, key) = match id {
            Some(id) => (*id, prefix.row_arg(id, text)),
            None => {
                let id = mint();
                (id, prefix.row(&id))
            }
        };
        rows.push((id, OwnedString::new(ctx, key.as_bytes())?));
    }
    let mut names: Vec<&OwnedString> = rows.iter().map(|(_, row)| row).collect();
    names.push(&pending_name);
    store::check_access(ctx, &names)?;

    // A minted id that collides with an existing row is minted again (the new row checked on
    // its own). Still nothing written.
    for ((requested, _), (id, row)) in requested.iter().zip(rows.iter_mut()) {
        if requested.is_some() {
            continue;
        }
        for _ in 0..MINT_TRIES {
            if Key::probe(ctx, row)?.holds() == Holds::Nothing {
                break;
            }
            *id = mint();
            *row = OwnedString::new(ctx, prefix.row(id).as_bytes())?;
            store::check_access(ctx, &[row])?;
        }
    }
    let pending = Key::open(ctx, &pending_name)?;
    pending.expect_zset()?;

    // Write. Each row is opened once: one that exists already, because it was there before or
    // an earlier job of this batch wrote it, is a duplicate and stays as it is.
    let words = store::words()?;
    let mut members = Vec::with_capacity(n);
    let mut minted = Vec::new();
    let mut replies = Vec::with_capacity(n);
    for (j, (id, row_name)) in rows.iter().enumerate() {
        let row = Key::open(ctx, row_name)?;
        if row.holds() != Holds::Nothing {
            replies.push(Reply::Integer(0));
            continue;
        }
        let payload = args.string(3 + 2 * j).ok_or(EmqError::Internal)?;
        lifecycle::write_row(ctx, &row, State::Pending, payload)?;
        // A given id is canonical, so its argument string is the member (no copy).
        if requested[j].0.is_none() {
            let member = id.encode();
            minted.push(OwnedString::new(ctx, &member)?);
            replies.push(Reply::Bulk(member.to_vec()));
        } else {
            replies.push(Reply::Integer(1));
        }
        members.push(j);
    }
    if !members.is_empty() {
        let mut zadd_args = Vec::with_capacity(1 + members.len() * 2);
        zadd_args.push(pending_name.as_str());
        let mut minted = minted.iter();
        for &j in &members {
            let member = match requested[j].0 {
                None => minted.next().map(OwnedString::as_str),
                Some(_) => args.string(2 + 2 * j),
            }
            .ok_or(EmqError::Internal)?;
            pending.zadd(0.0, member)?;
            zadd_args.push(words.zero);
            zadd_args.push(member);
        }
        store::notify(ctx, store::NOTIFY_ZSET, c"zadd", &pending_name);
        effects::emit(ctx, c"ZADD", &zadd_args);
    }
    metrics::count(&metrics::ENQUEUED, members.len() as u64);
    metrics::count(&metrics::DUPLICATES, (n - members.len()) as u64);
    Ok(Reply::Array(replies))
}
