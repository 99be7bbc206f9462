//! The counters behind `INFO emq`: what happened to jobs, and why commands were refused (one
//! counter per reason of the error catalogue).

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::EmqError;

pub static ENQUEUED: AtomicU64 = AtomicU64::new(0);
pub static DUPLICATES: AtomicU64 = AtomicU64::new(0);
pub static SCHEDULED: AtomicU64 = AtomicU64::new(0);
pub static CLAIMED: AtomicU64 = AtomicU64::new(0);
pub static RENEWED: AtomicU64 = AtomicU64::new(0);
pub static ACKED: AtomicU64 = AtomicU64::new(0);
pub static RETRIED: AtomicU64 = AtomicU64::new(0);
pub static DEAD: AtomicU64 = AtomicU64::new(0);
pub static CANCELLED: AtomicU64 = AtomicU64::new(0);
/// Attempts the server ended at their deadline (`TIMEOUT`).
pub static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
pub static REQUEUED: AtomicU64 = AtomicU64::new(0);
/// Jobs the timer moved to pending (due or lease expired).
pub static PROMOTED: AtomicU64 = AtomicU64::new(0);
/// Set members whose row was gone (deleted by hand, evicted), dropped by a claim or a move.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Jobs deleted by `EMQ.PURGE`.
pub static PURGED: AtomicU64 = AtomicU64::new(0);
/// Dead jobs the timer deleted past the dead set's retention.
pub static TRIMMED: AtomicU64 = AtomicU64::new(0);
/// Claims that took fewer jobs than asked, or none, because of the queue's limits.
pub static LIMITED: AtomicU64 = AtomicU64::new(0);
/// Enqueues answered with the id of the job holding their unique key (nothing written).
pub static UNIQUE_HELD: AtomicU64 = AtomicU64::new(0);
/// Jobs the timer enqueued for repeating schedules.
pub static CRON_FIRED: AtomicU64 = AtomicU64::new(0);
/// Finished children counted by their parents (docs/flows.md).
pub static HANDED_OVER: AtomicU64 = AtomicU64::new(0);
/// Hand-overs left in a child queue's outbox for a worker to deliver.
pub static PARKED: AtomicU64 = AtomicU64::new(0);
/// Parents whose children all finished, moved out of `waiting`.
pub static RELEASED: AtomicU64 = AtomicU64::new(0);
/// Hand-overs a parent refused (gone, not waiting, or with all its children).
pub static ORPHANED: AtomicU64 = AtomicU64::new(0);
/// Hand-overs neither a parent nor the outbox could take (the outbox key holds another type,
/// met by the timer's burial of an expired lease, which is never refused): logged, and lost.
pub static HANDOVERS_LOST: AtomicU64 = AtomicU64::new(0);

/// Timer ticks: one every 10 ms while something is due, none while nothing is.
pub static TICKS: AtomicU64 = AtomicU64::new(0);
/// Timer ticks that reached their time budget with queues still due (their visits wait for the
/// next tick).
pub static TICKS_AT_BUDGET: AtomicU64 = AtomicU64::new(0);
/// Timer visits refused before writing (a key of the queue holds another type); the queue is
/// tried again a second later.
pub static VISITS_REFUSED: AtomicU64 = AtomicU64::new(0);
/// Queues a claim waits on whose `schedule` and `active` heads the timer read
/// (`runtime::waiters`).
pub static POLLED: AtomicU64 = AtomicU64::new(0);

/// The job counters of `INFO emq`, by field name.
pub static JOB_COUNTERS: [(&str, &AtomicU64); 23] = [
    ("enqueued", &ENQUEUED),
    ("duplicates", &DUPLICATES),
    ("scheduled", &SCHEDULED),
    ("claimed", &CLAIMED),
    ("renewed", &RENEWED),
    ("acked", &ACKED),
    ("retried", &RETRIED),
    ("dead", &DEAD),
    ("cancelled", &CANCELLED),
    ("timed_out", &TIMED_OUT),
    ("requeued", &REQUEUED),
    ("promoted", &PROMOTED),
    ("dropped", &DROPPED),
    ("purged", &PURGED),
    ("trimmed", &TRIMMED),
    ("limited", &LIMITED),
    ("unique_held", &UNIQUE_HELD),
    ("cron_fired", &CRON_FIRED),
    ("handed_over", &HANDED_OVER),
    ("parked", &PARKED),
    ("released", &RELEASED),
    ("orphaned", &ORPHANED),
    ("handovers_lost", &HANDOVERS_LOST),
];

/// Refusals by reason, in the order of [`REFUSAL_REASONS`].
pub static REFUSALS: [AtomicU64; REFUSAL_REASONS.len()] =
    [const { AtomicU64::new(0) }; REFUSAL_REASONS.len()];

pub const REFUSAL_REASONS: [&str; 19] = [
    "queue",
    "type",
    "id",
    "kind",
    "key",
    "payload",
    "lease",
    "cancelled",
    "timeout",
    "set",
    "cursor",
    "noperm",
    "wrongtype",
    "syntax",
    "tryagain",
    "oom",
    "cron",
    "parent",
    "internal",
];

pub fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

pub fn refused(err: &EmqError) {
    let reason = err.reason();
    if let Some(i) = REFUSAL_REASONS.iter().position(|r| *r == reason) {
        REFUSALS[i].fetch_add(1, Ordering::Relaxed);
    }
}

pub fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_reason_has_a_counter() {
        for err in [
            EmqError::Queue,
            EmqError::Type,
            EmqError::Id,
            EmqError::Kind,
            EmqError::Key,
            EmqError::Payload { limit: 1 },
            EmqError::Lease,
            EmqError::Cancelled,
            EmqError::Timeout,
            EmqError::Set,
            EmqError::Leased,
            EmqError::Cursor,
            EmqError::NoPerm,
            EmqError::NoPermCommand,
            EmqError::UncheckableUser,
            EmqError::WrongType,
            EmqError::Arity("x"),
            EmqError::TryAgain,
            EmqError::Oom,
            EmqError::Cron("x".into()),
            EmqError::Parent("x".into()),
            EmqError::Internal,
        ] {
            assert!(REFUSAL_REASONS.contains(&err.reason()), "{err:?}");
        }
    }
}
