//! The queue's entry in the server's metrics (`host::metrics`), found once a call, and what the
//! call tells it, kept in a buffer reused from call to call and counted when the call ends.

use std::cell::{Cell, RefCell};

use super::super::metrics::{apply, entry, observe, Shared};
use super::ServerStore;
use crate::protocol::metrics::{Observed, Timed};
use crate::protocol::{settings, Store};

/// Most notes a buffer keeps room for once its call ends: 192 KiB (48 bytes a note).
const KEPT_ROOM: usize = 4096;

thread_local! {
    /// The last call's buffer, emptied, for the next call.
    static SPARE: RefCell<Vec<Timed>> = const { RefCell::new(Vec::new()) };
}

impl ServerStore<'_, '_> {
    /// The queue's metrics, found at the call's first use.
    pub(super) fn metrics(&self) -> Option<&Shared> {
        self.metrics
            .get_or_init(|| entry(self.queue_name()))
            .as_ref()
    }

    /// Keeps `what` for the call's end.
    fn note(&self, what: Timed) {
        let mut noted = self.noted.borrow_mut();
        if noted.capacity() == 0 {
            *noted = SPARE.take();
        }
        noted.push(what);
    }

    /// Keeps `what` for the call's end; the first attempt's end reads the clock for them all.
    pub(super) fn note_timed(&self, what: Timed) {
        if matches!(what, Timed::Ended { .. }) && self.ended_at.get().is_none() {
            self.ended_at.set(Some(self.now_ms()));
        }
        self.note(what);
    }

    /// Finds the queue's entry where the call noted anything, marking it used.
    pub(super) fn find_metrics(&self) {
        let counted = self.counted.iter().any(|n| n.get() > 0);
        if counted || !self.noted.borrow().is_empty() {
            self.metrics();
        }
    }

    /// Counts `what`: an event as one more in the call's count, added when it ends; anything
    /// else (a `ready` written, which the call's own claims read) at once.
    pub(super) fn note_observed(&self, what: Observed) {
        match what {
            Observed::Event(event) => {
                if let Some(count) = self.counted.get(event as usize) {
                    count.set(count.get() + 1);
                }
            }
            _ => observe(self.metrics(), what),
        }
    }

    /// Counts what the call noted, and keeps its buffer for the next call.
    pub(super) fn count_noted(&self) {
        let counts = self.counted.each_ref().map(Cell::get);
        let mut noted = self.noted.take();
        if noted.is_empty() && counts.iter().all(|n| *n == 0) {
            return;
        }
        if let Some(entry) = self.metrics() {
            if settings::metrics() {
                entry.borrow_mut().metrics.count_events(&counts);
            }
            let ended_at = self.ended_at.get().unwrap_or_default();
            apply(entry, &noted, ended_at);
        }
        noted.clear();
        if noted.capacity() > 0 && noted.capacity() <= KEPT_ROOM {
            SPARE.set(noted);
        }
    }
}
