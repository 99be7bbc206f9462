//! The queues a claim waits on (`EMQ.CLAIM ... BLOCK`), per database. Where EchoMQ learns no
//! foreign write as it happens (`emq.learn-foreign-writes no`, the default), the timer reads
//! the heads of their `schedule` and `active` sets every [`POLL_MS`] while a claim waits, at
//! most [`POLL_BUDGET`] queues a poll, so a job that another writer (a Lua speaker) scheduled
//! there, or a lease it cut short, comes due for the claim on time (a visit refused keeps its
//! retry, `Watchlist::hold_off`). The cost follows the waiting claims, not the server's writes,
//! and nothing is read while no claim waits.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard};

use valkey_module::Context;

use crate::host::client::select_db;
use crate::host::key::Key;
use crate::host::server::now_ms;
use crate::host::string::OwnedString;
use crate::protocol::counters::{self, POLLED};
use crate::protocol::settings::learn_foreign_writes;
use crate::protocol::{KeyBuf, KeyType, Queue};

/// How often the timer reads the waited-on queues' heads, in ms: a job another writer
/// schedules for T comes due for a waiting claim by T + this (while at most [`POLL_BUDGET`]
/// queues are waited on).
pub const POLL_MS: i64 = 50;
/// Most queues one poll reads (two key lookups each); the next poll goes on from there.
pub const POLL_BUDGET: usize = 256;

type Id = (i32, Vec<u8>);

/// Each waited-on queue, by (db, name), with how many claims wait on it.
static WAITING: Mutex<BTreeMap<Id, u32>> = Mutex::new(BTreeMap::new());
/// When the timer last polled (unix ms), and the queue it stopped after (`None`: it read
/// them all).
static LAST_POLL_MS: AtomicI64 = AtomicI64::new(0);
static POLLED_UP_TO: Mutex<Option<Id>> = Mutex::new(None);

fn waiting() -> MutexGuard<'static, BTreeMap<Id, u32>> {
    WAITING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The queues one blocked claim waits on: counted until the server lets the claim go (answered,
/// timed out, unblocked or disconnected) and drops this.
pub struct Waiting {
    db: i32,
    queues: Vec<Vec<u8>>,
}

/// A claim blocks on `queues` of `db`: the timer reads them from its next poll on (the caller
/// has it tick by [`poll_at`]).
pub fn blocked(db: i32, queues: &[Queue<'_>]) -> Waiting {
    let mut all = waiting();
    let queues: Vec<Vec<u8>> = queues.iter().map(|q| q.as_bytes().to_vec()).collect();
    for queue in &queues {
        *all.entry((db, queue.clone())).or_insert(0) += 1;
    }
    Waiting { db, queues }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut all = waiting();
        for queue in std::mem::take(&mut self.queues) {
            let id = (self.db, queue);
            if let Some(claims) = all.get_mut(&id) {
                *claims = claims.saturating_sub(1);
                if *claims == 0 {
                    all.remove(&id);
                }
            }
        }
    }
}

/// Number of queues a claim waits on (for `INFO emq`).
pub fn count() -> usize {
    waiting().len()
}

/// Whether the timer reads the waited-on queues: only where foreign writes are not learned
/// as they happen.
fn polls() -> bool {
    !learn_foreign_writes()
}

fn next_poll() -> i64 {
    LAST_POLL_MS.load(Ordering::Relaxed).saturating_add(POLL_MS)
}

/// When the timer must next tick to poll (unix ms), if a claim waits: at once if the wall
/// clock was set back past the last poll.
pub fn poll_at() -> Option<i64> {
    let now = now_ms() as i64;
    let at = match now < LAST_POLL_MS.load(Ordering::Relaxed) {
        true => now,
        false => next_poll(),
    };
    (polls() && !waiting().is_empty()).then_some(at)
}

/// The timer's tick: if a poll is due, up to [`POLL_BUDGET`] waited-on queues, going on from
/// where the last poll stopped; each with a scheduled job or a lease, as (db, name, the
/// earliest due time or deadline), for the timer to visit it by then (at once if it has
/// passed; `Watchlist::visit_by_polled` keeps a refused visit's retry). The caller restores the
/// db.
pub fn poll(ctx: &Context, now: i64) -> Vec<(i32, Vec<u8>, i64)> {
    let last = LAST_POLL_MS.load(Ordering::Relaxed);
    // A wall clock set back polls at once rather than waiting the jump out.
    if !polls() || (now >= last && now < next_poll()) {
        return Vec::new();
    }
    LAST_POLL_MS.store(now, Ordering::Relaxed);
    let mut from = POLLED_UP_TO.lock().unwrap_or_else(|p| p.into_inner());
    let mut batch: Vec<Id> = {
        let all = waiting();
        let after = match from.as_ref() {
            Some(id) => Bound::Excluded(id),
            None => Bound::Unbounded,
        };
        all.range((after, Bound::Unbounded))
            .map(|(id, _)| id.clone())
            .take(POLL_BUDGET + 1)
            .collect()
    };
    // More behind this batch: the next poll goes on after it; else from the first again.
    *from = match batch.len() > POLL_BUDGET {
        true => {
            batch.truncate(POLL_BUDGET);
            batch.last().cloned()
        }
        false => None,
    };
    drop(from);
    counters::count(&POLLED, batch.len() as u64);
    let mut visits = Vec::new();
    for (db, name) in batch {
        let Some(queue) = Queue::parse(&name) else {
            continue;
        };
        if !select_db(ctx, db) {
            continue;
        }
        let heads = [KeyType::Schedule, KeyType::Active].map(|ty| head(ctx, queue, ty));
        if let Some(at) = heads.into_iter().flatten().min() {
            visits.push((db, name, at));
        }
    }
    visits
}

/// The lowest score in the queue's set of type `ty` (a due time or a lease deadline, unix
/// ms), if it has a member.
fn head(ctx: &Context, queue: Queue<'_>, ty: KeyType) -> Option<i64> {
    let name = OwnedString::new(ctx, KeyBuf::queue(queue, ty).as_bytes()).ok()?;
    let key = Key::probe(ctx, &name).ok()?;
    let first = key
        .zrange_by_score(f64::NEG_INFINITY, f64::INFINITY, 1)
        .ok()?;
    first.first().map(|(_, score)| *score as i64)
}
