//! The queues' metrics in this server's memory (docs/observability.md): on the main thread,
//! by queue name, for at most [`MAX_QUEUES`] queues (the one used longest ago makes room for a
//! new one), with when each attempt in flight was claimed (at most [`MAX_RUNNING`] in all);
//! gone with the process, as `INFO`'s counters are.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::protocol::metrics::{Observed, QueueMetrics};
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

/// Notes that job `id`'s attempt was claimed at `at` (in the entry of a queue that has one).
pub fn note_claim(entry: Option<&Shared>, id: u64, at: i64) {
    let Some(entry) = entry else {
        return;
    };
    // One lookup while the table has room: an attempt claimed again only moves its time.
    if RUNNING.get() < MAX_RUNNING {
        if entry.borrow_mut().running.insert(id, at).is_none() {
            RUNNING.set(RUNNING.get() + 1);
        }
        return;
    }
    if let Some(kept) = entry.borrow_mut().running.get_mut(&id) {
        *kept = at;
        return;
    }
    sweep(at);
    if RUNNING.get() < MAX_RUNNING {
        entry.borrow_mut().running.insert(id, at);
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
pub fn take_claim(entry: &Shared, id: u64) -> Option<i64> {
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
