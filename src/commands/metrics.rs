//! `EMQ.METRICS <queue>`: the queue's metrics this server keeps in memory (docs/observability.md):
//! a count of each event, the wait, run and end-to-end histograms, and the age of the default
//! group's first pending job.

use valkey_module::Context;

use super::cursor::check_arity;
use super::{parse_queue, QUEUE};
use crate::host::acl::Access;
use crate::host::metrics;
use crate::host::register::Command;
use crate::host::reply::{Args, CommandResult, Reply};
use crate::host::store::with_queue;
use crate::protocol::metrics::{Ended, Histogram, BUCKETS_MS, EVENTS};
use crate::protocol::{settings, BrandedId, Field, KeyRef, Ranked, Set, Store};

pub const COMMAND: Command = Command {
    name: c"emq.metrics",
    callback: crate::callback!(run),
    flags: c"readonly fast",
    arity: 2,
    routes_by_queue: true,
    summary: c"The queue's metrics this server keeps: each event's count, the wait, run and end-to-end latency histograms, and the age of the first pending job",
    complexity: c"O(1)",
    args: &[QUEUE],
};

pub fn run(ctx: &Context, args: &Args) -> CommandResult {
    check_arity(args, &COMMAND)?;
    let queue = parse_queue(args.bytes(1))?;
    // The caller must be able to read the queue; its first pending job gives the oldest wait:
    // since it became ready again (its row's `ready`), or since its id's minting.
    let oldest = with_queue(ctx, queue, Access::Read, |store| {
        store.check_access(&[KeyRef::Set(Set::Pending)])?;
        store.open_sets(&[Set::Pending])?;
        let first = store.range(Set::Pending, f64::NEG_INFINITY, f64::INFINITY, 1)?;
        let Some((member, _)) = first.first() else {
            return Ok(None);
        };
        let Some(id) = BrandedId::parse(store.bytes(member)) else {
            return Ok(None);
        };
        let name = store.row_name(&id, member)?;
        store.check_access(&[KeyRef::Row(&name)])?;
        let row = store.read_row(&name)?;
        let ready = store.field(&row, Field::Ready).and_then(|t| {
            std::str::from_utf8(store.bytes(&t))
                .ok()?
                .parse::<i64>()
                .ok()
        });
        let since = ready.unwrap_or(id.minted_at_ms() as i64);
        Ok(Some((store.now_ms() - since).max(0)))
    })?;
    let m = metrics::of(queue.as_bytes());
    let events = EVENTS
        .iter()
        .zip(m.events)
        .map(|(e, n)| (event_name(e.as_bytes()), Reply::Integer(n as i64)))
        .collect();
    let run = Ended::TIMED
        .iter()
        .zip(&m.run)
        .map(|(e, h)| (e.name(), histogram(h)))
        .collect();
    Ok(Reply::Map(vec![
        ("enabled", Reply::Integer(i64::from(settings::metrics()))),
        ("events", Reply::Map(events)),
        ("wait", histogram(&m.wait)),
        ("run", Reply::Map(run)),
        ("end-to-end", histogram(&m.end_to_end)),
        (
            "oldest-pending-ms",
            oldest.map_or(Reply::Null, Reply::Integer),
        ),
    ]))
}

/// An event's name as a map key (the event stream's names are static).
fn event_name(bytes: &'static [u8]) -> &'static str {
    std::str::from_utf8(bytes).unwrap_or("event")
}

/// `count`, `sum-ms` and `buckets`: `[le-ms, count at most le]` pairs, cumulative, the last
/// `["+inf", count]`.
fn histogram(h: &Histogram) -> Reply {
    let cumulative = h.cumulative();
    let mut buckets: Vec<Reply> = BUCKETS_MS
        .iter()
        .zip(cumulative)
        .map(|(le, n)| Reply::Array(vec![Reply::Integer(*le as i64), Reply::Integer(n as i64)]))
        .collect();
    buckets.push(Reply::Array(vec![
        Reply::Bulk(b"+inf".to_vec()),
        Reply::Integer(cumulative[BUCKETS_MS.len()] as i64),
    ]));
    Reply::Map(vec![
        ("count", Reply::Integer(h.count() as i64)),
        ("sum-ms", Reply::Integer(h.sum_ms as i64)),
        ("buckets", Reply::Array(buckets)),
    ])
}
