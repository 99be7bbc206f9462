//! The queues' metrics in this server's memory (docs/observability.md): on the main thread,
//! by queue name, for at most [`MAX_QUEUES`] queues, with when each attempt in flight was
//! claimed (at most [`MAX_RUNNING`] in all); gone with the process, as `INFO`'s counters are.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::protocol::metrics::{Observed, QueueMetrics};
use crate::protocol::settings;

/// Most queues one server keeps metrics for; past them a new queue is not counted.
pub const MAX_QUEUES: usize = 10_000;

/// Most attempts in flight, over every queue, whose claim time is kept for their run time; past
/// them a claim's attempt is not timed.
pub const MAX_RUNNING: usize = 250_000;

/// One queue's metrics, and when each of its attempts in flight was claimed, by job id.
#[derive(Default)]
pub struct Entry {
    pub metrics: QueueMetrics,
    running: FxHashMap<u64, i64>,
}

/// One queue's entry, shared by the table and the store of a call that counts in it.
pub type Shared = Rc<RefCell<Entry>>;

thread_local! {
    static QUEUES: RefCell<FxHashMap<Vec<u8>, Shared>> = RefCell::new(FxHashMap::default());
    static RUNNING: Cell<usize> = const { Cell::new(0) };
}

/// `queue`'s entry, made at its first use (while metrics are on and there is room).
pub fn entry(queue: &[u8]) -> Option<Shared> {
    QUEUES.with_borrow_mut(|queues| {
        if let Some(m) = queues.get(queue) {
            return Some(Rc::clone(m));
        }
        if !settings::metrics() || queues.len() >= MAX_QUEUES {
            return None;
        }
        let m = Shared::default();
        queues.insert(queue.to_vec(), Rc::clone(&m));
        Some(m)
    })
}

/// Notes that job `id`'s attempt was claimed at `at`.
pub fn note_claim(entry: &Shared, id: u64, at: i64) {
    let mut e = entry.borrow_mut();
    if let Some(kept) = e.running.get_mut(&id) {
        *kept = at;
        return;
    }
    if RUNNING.get() < MAX_RUNNING {
        e.running.insert(id, at);
        RUNNING.set(RUNNING.get() + 1);
    }
}

/// When job `id`'s attempt was claimed, forgotten now; `None` where it was not noted.
pub fn take_claim(entry: &Shared, id: u64) -> Option<i64> {
    let at = entry.borrow_mut().running.remove(&id)?;
    RUNNING.set(RUNNING.get().saturating_sub(1));
    Some(at)
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
