//! The queues a claim waits on (`EMQ.CLAIM ... BLOCK`), per database. Where EchoMQ learns no
//! foreign write as it happens (`emq.learn-foreign-writes no`, the default), the timer reads
//! the heads of their `schedule` and `active` sets every [`POLL_MS`] while a claim waits, so a
//! job that another writer (a Lua speaker) scheduled there, or a lease it cut short, comes due
//! for the claim on time. The cost follows the waiting claims, not the server's writes, and
//! nothing is read while no claim waits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard};

use valkey_module::Context;

use crate::host::client::select_db;
use crate::host::key::Key;
use crate::host::string::OwnedString;
use crate::protocol::counters::{self, POLLED};
use crate::protocol::settings::learn_foreign_writes;
use crate::protocol::{KeyBuf, KeyType, Queue};

/// How often the timer reads the waited-on queues' heads, in ms: a job another writer
/// schedules for T comes due for a waiting claim by T + this.
pub const POLL_MS: i64 = 50;

/// Each waited-on queue, as (db, name), with the number of claims waiting on it.
static WAITING: Mutex<BTreeMap<(i32, Vec<u8>), u32>> = Mutex::new(BTreeMap::new());
/// When the timer last read them (unix ms).
static LAST_POLL_MS: AtomicI64 = AtomicI64::new(0);

fn waiting() -> MutexGuard<'static, BTreeMap<(i32, Vec<u8>), u32>> {
    WAITING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The queues one blocked claim waits on, until the server lets it go ([`released`]).
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

/// The claim is no longer blocked (answered, timed out, unblocked or disconnected).
pub fn released(w: Waiting) {
    let mut all = waiting();
    for queue in w.queues {
        let key = (w.db, queue);
        if let Some(n) = all.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                all.remove(&key);
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

/// When the timer must next tick to poll (unix ms), if a claim waits.
pub fn poll_at() -> Option<i64> {
    (polls() && !waiting().is_empty()).then(next_poll)
}

/// The timer's tick: if a poll is due, each waited-on queue with a scheduled job or a lease,
/// as (db, name), with the earliest due time or deadline, by which the timer visits it (at once
/// if it has passed). The caller restores the db.
pub fn poll(ctx: &Context, now: i64) -> Vec<(i32, Vec<u8>, i64)> {
    if !polls() || now < next_poll() {
        return Vec::new();
    }
    LAST_POLL_MS.store(now, Ordering::Relaxed);
    let queues: Vec<(i32, Vec<u8>)> = waiting().keys().cloned().collect();
    counters::count(&POLLED, queues.len() as u64);
    let mut visits = Vec::new();
    for (db, name) in queues {
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
