//! The `emq.*` settings, with their defaults and bounds: settable in `module.conf` (after
//! `loadmodule`), with `MODULE LOADEX ... CONFIG` and with `CONFIG SET` (the host registers
//! them, and the server enforces the bounds).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Largest payload `EMQ.ENQUEUE` accepts, in bytes.
pub static MAX_PAYLOAD_BYTES: AtomicI64 = AtomicI64::new(MAX_PAYLOAD_DEFAULT);
pub const MAX_PAYLOAD_DEFAULT: i64 = 1 << 20;
pub const MAX_PAYLOAD_MIN: i64 = 1;
/// The server's own `proto-max-bulk-len` default.
pub const MAX_PAYLOAD_MAX: i64 = 512 << 20;

/// The node id carried by minted snowflakes (protocol.md §2), 0..=1023.
pub static NODE_ID: AtomicI64 = AtomicI64::new(0);
pub const NODE_ID_MAX: i64 = super::branded_id::MAX_NODE as i64;

pub fn max_payload_bytes() -> i64 {
    MAX_PAYLOAD_BYTES.load(Ordering::Relaxed)
}

pub fn node_id() -> u16 {
    // Bounded by the server to 0..=1023, so the conversion cannot fail; clamp anyway.
    u16::try_from(NODE_ID.load(Ordering::Relaxed).clamp(0, NODE_ID_MAX)).unwrap_or(0)
}

/// Default lease of `EMQ.CLAIM`, in ms (`LEASE` overrides it per call).
pub static LEASE_MS: AtomicI64 = AtomicI64::new(30_000);
/// Attempts after which `EMQ.FAIL` (or an expired lease) moves a job to `dead`.
pub static MAX_ATTEMPTS: AtomicI64 = AtomicI64::new(25);
/// First retry delay of the exponential backoff, in ms.
pub static BACKOFF_BASE_MS: AtomicI64 = AtomicI64::new(1_000);
/// Cap of the exponential backoff, in ms.
pub static BACKOFF_MAX_MS: AtomicI64 = AtomicI64::new(3_600_000);
/// How long an acknowledged row is kept (so a re-enqueue is still a duplicate), in ms.
pub static DONE_TTL_MS: AtomicI64 = AtomicI64::new(86_400_000);

/// Most dead jobs a queue keeps; the timer deletes the oldest beyond it (0: no limit).
pub static DEAD_MAX_JOBS: AtomicI64 = AtomicI64::new(DEAD_MAX_JOBS_DEFAULT);
/// Sidekiq's default: its dead set keeps 10,000 jobs.
pub const DEAD_MAX_JOBS_DEFAULT: i64 = 10_000;
pub const DEAD_MAX_JOBS_MAX: i64 = 1_000_000_000;
/// How long a dead job is kept, in ms; the timer deletes older ones (0: forever).
pub static DEAD_TTL_MS: AtomicI64 = AtomicI64::new(DEAD_TTL_DEFAULT_MS);
/// Sidekiq's default: its dead set keeps a job for 180 days.
pub const DEAD_TTL_DEFAULT_MS: i64 = 180 * 86_400_000;

/// Whether EchoMQ learns its queues from writes it did not make itself (a Lua speaker, the
/// replication stream, a slot import, `RENAME`/`MOVE`/`RESTORE` by hand), through zset and
/// generic keyspace events on every key: `emq.learn-foreign-writes`, a load-time setting.
pub static LEARN_FOREIGN_WRITES: AtomicBool = AtomicBool::new(false);

pub fn learn_foreign_writes() -> bool {
    LEARN_FOREIGN_WRITES.load(Ordering::Relaxed)
}

/// Whether the server keeps each queue's metrics (docs/observability.md): `emq.metrics`, on by
/// default, settable at run time.
pub static METRICS: AtomicBool = AtomicBool::new(true);

pub fn metrics() -> bool {
    METRICS.load(Ordering::Relaxed)
}

/// Upper bound of every duration setting and argument: one year, in ms.
pub const MAX_DURATION_MS: i64 = 365 * 86_400_000;
/// Latest due time `AT` takes, in unix ms: the largest integer a zset score (a double) holds
/// exactly, so the schedule set and its replicated `ZADD` keep the very time given.
pub const MAX_UNIX_MS: i64 = (1 << 53) - 1;
pub const MAX_ATTEMPTS_MAX: i64 = 1_000_000;

fn get(v: &AtomicI64) -> i64 {
    v.load(Ordering::Relaxed)
}

pub fn lease_ms() -> i64 {
    get(&LEASE_MS)
}

pub fn max_attempts() -> i64 {
    get(&MAX_ATTEMPTS)
}

pub fn dead_max_jobs() -> i64 {
    get(&DEAD_MAX_JOBS)
}

pub fn dead_ttl_ms() -> i64 {
    get(&DEAD_TTL_MS)
}

pub fn done_ttl_ms() -> i64 {
    get(&DONE_TTL_MS)
}

/// The retry delay after failed attempt number `attempts` (1-based): base * 2^(attempts-1),
/// capped at `emq.backoff-max-ms`.
pub fn backoff_ms(attempts: i64) -> i64 {
    backoff(attempts, get(&BACKOFF_BASE_MS), get(&BACKOFF_MAX_MS))
}

pub fn backoff(attempts: i64, base: i64, max: i64) -> i64 {
    let shift = attempts.saturating_sub(1).clamp(0, 62) as u32;
    base.checked_mul(1i64 << shift)
        .map_or(max, |d| d.min(max))
        .max(0)
}

/// One numeric setting: its name under `emq.`, where it lives, its default and bounds.
pub struct Setting {
    pub name: &'static std::ffi::CStr,
    pub value: &'static AtomicI64,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

pub const SETTINGS: [Setting; 9] = [
    Setting {
        name: c"max-payload-bytes",
        value: &MAX_PAYLOAD_BYTES,
        default: MAX_PAYLOAD_DEFAULT,
        min: MAX_PAYLOAD_MIN,
        max: MAX_PAYLOAD_MAX,
    },
    Setting {
        name: c"node-id",
        value: &NODE_ID,
        default: 0,
        min: 0,
        max: NODE_ID_MAX,
    },
    Setting {
        name: c"lease-ms",
        value: &LEASE_MS,
        default: 30_000,
        min: 1,
        max: MAX_DURATION_MS,
    },
    Setting {
        name: c"max-attempts",
        value: &MAX_ATTEMPTS,
        default: 25,
        min: 1,
        max: MAX_ATTEMPTS_MAX,
    },
    Setting {
        name: c"backoff-base-ms",
        value: &BACKOFF_BASE_MS,
        default: 1_000,
        min: 0,
        max: MAX_DURATION_MS,
    },
    Setting {
        name: c"backoff-max-ms",
        value: &BACKOFF_MAX_MS,
        default: 3_600_000,
        min: 0,
        max: MAX_DURATION_MS,
    },
    Setting {
        name: c"done-ttl-ms",
        value: &DONE_TTL_MS,
        default: 86_400_000,
        min: 0,
        max: MAX_DURATION_MS,
    },
    Setting {
        name: c"dead-max-jobs",
        value: &DEAD_MAX_JOBS,
        default: DEAD_MAX_JOBS_DEFAULT,
        min: 0,
        max: DEAD_MAX_JOBS_MAX,
    },
    Setting {
        name: c"dead-ttl-ms",
        value: &DEAD_TTL_MS,
        default: DEAD_TTL_DEFAULT_MS,
        min: 0,
        max: MAX_DURATION_MS,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1, 1000, 60_000), 1000);
        assert_eq!(backoff(2, 1000, 60_000), 2000);
        assert_eq!(backoff(6, 1000, 60_000), 32_000);
        assert_eq!(backoff(7, 1000, 60_000), 60_000);
        assert_eq!(backoff(500, 1000, 60_000), 60_000, "no overflow");
        assert_eq!(backoff(0, 1000, 60_000), 1000);
    }
}
