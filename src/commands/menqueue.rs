//! `EMQ.MENQUEUE <queue> <id> <payload> [<id> <payload> ...]`: many jobs in one atomic step.
//! All or nothing: every id, payload, permission and type is checked before the first write,
//! and one refusal refuses the batch. Replies one `1`/`0` per job (the minted id for `*`); a
//! duplicate, already present or earlier in the batch, is `0`. The effects replicate as one
//! `HSET` per new row and one variadic `ZADD`.

use std::collections::HashSet;

use valkey_module::Context;

use super::enqueue::{check_payload, mint};
use super::{parse_id, parse_queue};
use crate::error::EmqError;
use crate::grammar::{job_key, queue_key, BrandedId, KeyType};
use crate::lifecycle::State;
use crate::metrics;
use crate::server::{Args, CommandResult, Reply};
use crate::store::{self, Holds, Key, OwnedString};

/// Most jobs one call takes.
pub const MAX_JOBS: usize = 10_000;

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    if args.len() < 4 || args.len() % 2 != 0 {
        return Err(EmqError::Arity("emq.menqueue"));
    }
    let queue = parse_queue(args.bytes(1))?;
    let n = (args.len() - 2) / 2;
    if n > MAX_JOBS {
        return Err(EmqError::Syntax(format!("at most {MAX_JOBS} jobs per call").into()));
    }
    // Every id, kind and payload first.
    let mut requested = Vec::with_capacity(n);
    for j in 0..n {
        let id = match args.bytes(2 + 2 * j) {
            b"*" => None,
            id => Some(parse_id(id)?),
        };
        if id.is_some_and(|id| !id.is_job()) {
            return Err(EmqError::Kind);
        }
        check_payload(args.bytes(3 + 2 * j))?;
        requested.push(id);
    }
    let pending_name = OwnedString::new(ctx, &queue_key(queue, KeyType::Pending))?;
    let mut rows = Vec::with_capacity(n);
    for id in &requested {
        let id = id.unwrap_or_else(mint);
        rows.push((id, OwnedString::new(ctx, &job_key(queue, &id))?));
    }
    let mut names: Vec<&OwnedString> = rows.iter().map(|(_, row)| row).collect();
    names.push(&pending_name);
    store::check_access(ctx, &names)?;

    // Duplicates, already present or earlier in the batch: still nothing written. A minted
    // id that collides is minted again (its new row checked on its own).
    let mut seen: HashSet<BrandedId> = HashSet::with_capacity(n);
    let mut plan: Vec<Option<(BrandedId, OwnedString)>> = Vec::with_capacity(n);
    for (requested, (mut id, mut row)) in requested.iter().zip(rows) {
        loop {
            let exists = Key::open_read(ctx, &row)?.holds() != Holds::Nothing;
            if !exists && seen.insert(id) {
                plan.push(Some((id, row)));
                break;
            }
            if requested.is_some() {
                plan.push(None);
                break;
            }
            id = mint();
            row = OwnedString::new(ctx, &job_key(queue, &id))?;
            store::check_access(ctx, &[&row])?;
        }
    }
    let pending = Key::open(ctx, &pending_name)?;
    pending.expect_zset()?;

    // Write.
    let words = store::words()?;
    let mut members = Vec::new();
    let mut replies = Vec::with_capacity(n);
    for (j, entry) in plan.iter().enumerate() {
        let Some((id, row_name)) = entry else {
            replies.push(Reply::Integer(0));
            continue;
        };
        let payload = args.string(3 + 2 * j).ok_or(EmqError::Internal)?;
        let fields = [
            (words.state, State::Pending.word(words)),
            (words.attempts, words.zero),
            (words.payload, payload),
        ];
        let row = Key::open(ctx, row_name)?;
        row.hash_set3(fields)?;
        store::notify(ctx, store::NOTIFY_HASH, c"hset", row_name);
        store::replicate_hset3(ctx, row_name, fields);
        members.push(OwnedString::new(ctx, &id.encode())?);
        replies.push(match args.bytes(2 + 2 * j) {
            b"*" => Reply::Bulk(id.encode().to_vec()),
            _ => Reply::Integer(1),
        });
    }
    if !members.is_empty() {
        let mut zadd_args = Vec::with_capacity(1 + members.len() * 2);
        zadd_args.push(pending_name.as_str());
        for m in &members {
            pending.zadd(0.0, m.as_str())?;
            zadd_args.push(words.zero);
            zadd_args.push(m.as_str());
        }
        store::notify(ctx, store::NOTIFY_ZSET, c"zadd", &pending_name);
        store::replicate(ctx, c"ZADD", &zadd_args);
    }
    metrics::count(&metrics::ENQUEUED, members.len() as u64);
    metrics::count(&metrics::DUPLICATES, (n - members.len()) as u64);
    Ok(Reply::Array(replies))
}
