//! The queues' metrics in this server's memory (docs/observability.md): on the main thread,
//! by queue name, for at most [`MAX_QUEUES`] queues (the one used longest ago makes room for a
//! new one), with when each attempt in flight was claimed (at most [`MAX_RUNNING`] in all);
//! gone with the process, as `INFO`'s counters are.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::protocol::metrics::{Ended, Observed, QueueMetrics, Timed};
use crate::protocol::settings;

/// Most queues one server keeps metrics for.
pub const MAX_QUEUES: usize = 10_000;

/// Most attempts in flight, over every queue, whose claim time is kept for their run time; past
/// them (and past a sweep of the ones claimed over an hour ago) a claim's attempt is not timed.
pub const MAX_RUNNING: usize = 250_000;

/// The room a queue's table of attempts in flight keeps once they have all ended (hashbrown's
/// room in 256 slots, about 4 KiB): a worker's batch after batch doesn't build it anew.
const KEPT_ROOM: usize = 224;

/// An attempt claimed longer ago than this is dropped by a sweep of a full table: its run lands
/// past the last bucket whenever it ends, or its queue's keys are gone.
const STALE_MS: i64 = 3_600_000;

/// Least time between two sweeps of a full table, so a full table costs a claim nothing more.
const SWEEP_EVERY_MS: i64 = 60_000;

/// One queue's metrics, when it was last used, and when each of its attempts in flight was
/// claimed, by job id.
#[derive(Default)]
pub struct Entry {
    pub metrics: QueueMetrics,
    used: u64,
    running: FxHashMap<u64, i64>,
}

/// One queue's entry, shared by the table and the store of a call that counts in it.
pub type Shared = Rc<RefCell<Entry>>;

thread_local! {
    static QUEUES: RefCell<FxHashMap<Vec<u8>, Shared>> = RefCell::new(FxHashMap::default());
    static RUNNING: Cell<usize> = const { Cell::new(0) };
    /// A count of the calls that found an entry: the entries' order of use.
    static USES: Cell<u64> = const { Cell::new(0) };
    static LAST_SWEEP: Cell<i64> = const { Cell::new(i64::MIN) };
}

/// `queue`'s entry, made at its first use while metrics are on; a full table first drops the
/// entry used longest ago.
pub fn entry(queue: &[u8]) -> Option<Shared> {
    let used = USES.get() + 1;
    USES.set(used);
    QUEUES.with_borrow_mut(|queues| {
        if let Some(m) = queues.get(queue) {
            m.borrow_mut().used = used;
            return Some(Rc::clone(m));
        }
        if !settings::metrics() {
            return None;
        }
        if queues.len() >= MAX_QUEUES {
            let oldest = queues
                .iter()
                .min_by_key(|(_, m)| m.borrow().used)
                .map(|(name, _)| name.clone());
            if let Some(gone) = oldest.and_then(|name| queues.remove(&name)) {
                let running = gone.borrow().running.len();
                RUNNING.set(RUNNING.get().saturating_sub(running));
            }
        }
        let m = Shared::default();
        m.borrow_mut().used = used;
        queues.insert(queue.to_vec(), Rc::clone(&m));
        Some(m)
    })
}

/// Counts what one call `noted` in `entry`, in order, its attempts ended at `now`: times while
/// `emq.metrics` is on, and the claim times of the attempts in flight kept and taken whatever
/// it is (so none stays behind when it is turned off and on).
pub fn apply(entry: &Shared, noted: &[Timed], now: i64) {
    let on = settings::metrics();
    for what in noted {
        match *what {
            Timed::Claimed { id, at, readied } => {
                // A snowflake's time is its minting, as EchoMQ and its clients mint ids; a
                // hand-chosen id reads as a time in 2024, past what a histogram counts.
                if let Some(id) = &id {
                    note_claim(entry, id.value(), at);
                }
                let since = readied.or_else(|| id.map(|id| id.minted_at_ms() as i64));
                if let (true, Some(since)) = (on, since) {
                    entry
                        .borrow_mut()
                        .metrics
                        .observe(Observed::Wait(at - since));
                }
            }
            Timed::Ended { id, ended } => {
                let claimed = take_claim(entry, id.value());
                if !on {
                    continue;
                }
                let mut e = entry.borrow_mut();
                if let Some(claimed) = claimed.filter(|_| ended != Ended::Cancelled) {
                    e.metrics.observe(Observed::Run(ended, now - claimed));
                }
                if ended == Ended::Acked {
                    let minted = id.minted_at_ms() as i64;
                    e.metrics.observe(Observed::EndToEnd(now - minted));
                }
            }
        }
    }
}

/// Notes that job `id`'s attempt was claimed at `at`: one insert while the table has room (an
/// attempt claimed again only moves its time); a full one is swept first.
fn note_claim(entry: &Shared, id: u64, at: i64) {
    if RUNNING.get() >= MAX_RUNNING && !entry.borrow().running.contains_key(&id) {
        sweep(at);
        if RUNNING.get() >= MAX_RUNNING {
            return;
        }
    }
    if entry.borrow_mut().running.insert(id, at).is_none() {
        RUNNING.set(RUNNING.get() + 1);
    }
}

/// Drops the attempts claimed over [`STALE_MS`] before `now`, at most once a
/// [`SWEEP_EVERY_MS`].
fn sweep(now: i64) {
    if now.saturating_sub(LAST_SWEEP.get()) < SWEEP_EVERY_MS {
        return;
    }
    LAST_SWEEP.set(now);
    let mut left = 0;
    QUEUES.with_borrow(|queues| {
        for m in queues.values() {
            let mut e = m.borrow_mut();
            e.running
                .retain(|_, at| now.saturating_sub(*at) <= STALE_MS);
            left += e.running.len();
        }
    });
    RUNNING.set(left);
}

/// When job `id`'s attempt was claimed, forgotten now; `None` where it was not noted.
fn take_claim(entry: &Shared, id: u64) -> Option<i64> {
    let mut e = entry.borrow_mut();
    let at = e.running.remove(&id)?;
    RUNNING.set(RUNNING.get().saturating_sub(1));
    // A burst's table is given back once it is over; a batch's stays for the next batch.
    if e.running.is_empty() && e.running.capacity() > KEPT_ROOM {
        e.running = FxHashMap::default();
    }
    Some(at)
}

/// Forgets every queue's metrics: a database was emptied (`FLUSHDB`, `FLUSHALL`, a full sync),
/// and which queues it held is not known here, or the server became a replica, which keeps
/// none.
pub fn forget_all() {
    QUEUES.with_borrow_mut(|queues| queues.clear());
    RUNNING.set(0);
}

/// Counts `what` in `metrics`, while `emq.metrics` is on.
pub fn observe(metrics: Option<&Shared>, what: Observed) {
    if let (true, Some(m)) = (settings::metrics(), metrics) {
        m.borrow_mut().metrics.observe(what);
    }
}

/// A copy of `queue`'s metrics (all zero for a queue not counted).
pub fn of(queue: &[u8]) -> QueueMetrics {
    QUEUES.with_borrow(|queues| {
        queues
            .get(queue)
            .map(|m| m.borrow().metrics.clone())
            .unwrap_or_default()
    })
}

/// How many queues this server keeps metrics for, and how many attempts in flight it times.
pub fn sizes() -> (usize, usize) {
    (QUEUES.with_borrow(FxHashMap::len), RUNNING.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_takes_the_bytes_observability_md_gives() {
        assert_eq!(std::mem::size_of::<Timed>(), 48);
    }
}
