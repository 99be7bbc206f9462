//! Counters behind `INFO emq`.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::EmqError;

pub static ENQUEUED: AtomicU64 = AtomicU64::new(0);
pub static DUPLICATES: AtomicU64 = AtomicU64::new(0);
pub static SCHEDULED: AtomicU64 = AtomicU64::new(0);
pub static CLAIMED: AtomicU64 = AtomicU64::new(0);
pub static RENEWED: AtomicU64 = AtomicU64::new(0);
pub static ACKED: AtomicU64 = AtomicU64::new(0);
pub static RETRIED: AtomicU64 = AtomicU64::new(0);
pub static DEAD: AtomicU64 = AtomicU64::new(0);
pub static CANCELLED: AtomicU64 = AtomicU64::new(0);
pub static REQUEUED: AtomicU64 = AtomicU64::new(0);
/// Jobs the timer moved to pending (due or lease expired).
pub static PROMOTED: AtomicU64 = AtomicU64::new(0);
/// Set members whose row was gone (deleted by hand, evicted), dropped by a claim or a move.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Timer ticks that reached their time budget with queues still due (their visits wait for the
/// next tick).
pub static TICKS_AT_BUDGET: AtomicU64 = AtomicU64::new(0);
/// Timer visits refused before writing (a key of the queue holds another type); the queue is
/// tried again a second later.
pub static VISITS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// The job counters of `INFO emq`, by field name.
pub static JOB_COUNTERS: [(&str, &AtomicU64); 12] = [
    ("enqueued", &ENQUEUED),
    ("duplicates", &DUPLICATES),
    ("scheduled", &SCHEDULED),
    ("claimed", &CLAIMED),
    ("renewed", &RENEWED),
    ("acked", &ACKED),
    ("retried", &RETRIED),
    ("dead", &DEAD),
    ("cancelled", &CANCELLED),
    ("requeued", &REQUEUED),
    ("promoted", &PROMOTED),
    ("dropped", &DROPPED),
];

/// Refusals by reason, in the order of [`REFUSAL_REASONS`].
pub static REFUSALS: [AtomicU64; REFUSAL_REASONS.len()] = [const { AtomicU64::new(0) }; 13];

pub const REFUSAL_REASONS: [&str; 13] = [
    "queue",
    "type",
    "id",
    "kind",
    "key",
    "payload",
    "lease",
    "noperm",
    "wrongtype",
    "syntax",
    "tryagain",
    "oom",
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

/// The `INFO emq` section: protocol version and counters.
pub(crate) extern "C" fn info(
    ctx: *mut valkey_module::raw::RedisModuleInfoCtx,
    _for_crash_report: c_int,
) {
    use valkey_module::raw;
    let _ = std::panic::catch_unwind(|| {
        // SAFETY (all calls): the server passes a live info context for this callback.
        unsafe {
            let (Some(section), Some(field_str), Some(field_u64)) = (
                raw::RedisModule_InfoAddSection,
                raw::RedisModule_InfoAddFieldCString,
                raw::RedisModule_InfoAddFieldULongLong,
            ) else {
                return;
            };
            if section(ctx, c"".as_ptr()) != raw::REDISMODULE_OK as c_int {
                return;
            }
            let version =
                std::ffi::CString::new(crate::commands::PROTOCOL_VERSION).unwrap_or_default();
            field_str(ctx, c"version".as_ptr(), version.as_ptr());
            for (name, counter) in JOB_COUNTERS.iter() {
                if let Ok(name) = std::ffi::CString::new(*name) {
                    field_u64(ctx, name.as_ptr(), get(counter));
                }
            }
            field_u64(
                ctx,
                c"effects_replicated".as_ptr(),
                u64::from(crate::effects::open()),
            );
            field_u64(
                ctx,
                c"watched_queues".as_ptr(),
                crate::scheduler::watched_queues() as u64,
            );
            field_u64(
                ctx,
                c"timer_due_queues".as_ptr(),
                crate::scheduler::due_queues() as u64,
            );
            field_u64(
                ctx,
                c"timer_ticks_at_budget".as_ptr(),
                get(&TICKS_AT_BUDGET),
            );
            field_u64(ctx, c"timer_visits_refused".as_ptr(), get(&VISITS_REFUSED));
            for (reason, counter) in REFUSAL_REASONS.iter().zip(REFUSALS.iter()) {
                if let Ok(name) = std::ffi::CString::new(format!("refused_{reason}")) {
                    field_u64(ctx, name.as_ptr(), get(counter));
                }
            }
        }
    });
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
            EmqError::NoPerm,
            EmqError::NoPermCommand,
            EmqError::UncheckableUser,
            EmqError::WrongType,
            EmqError::Arity("x"),
            EmqError::TryAgain,
            EmqError::Oom,
            EmqError::Internal,
        ] {
            assert!(REFUSAL_REASONS.contains(&err.reason()), "{err:?}");
        }
    }
}
