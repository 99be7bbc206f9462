//! What every run shares: its clients, its payload, its ids, and an empty server to start on.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::cmd;

use crate::support::{self, job_id, Rng};

/// The reference `@enqueue`.
pub const ENQUEUE_LUA: &str = include_str!("../../lua/enqueue.lua");
/// The client connections of a run.
pub const CONNECTIONS: usize = 50;
/// Every job's payload, the same for every variant.
pub const PAYLOAD: &[u8; 48] = b"{\"sku\":4242,\"qty\":1,\"note\":\"forty-eight bytes!\"}";
/// A claimed job's lease: far longer than any run, so none expires and goes back.
pub const LIFE_LEASE_MS: &[u8] = b"60000";

/// How a round's job ids are drawn: minted in order, or at random.
#[derive(Clone, Copy, PartialEq)]
pub enum Ids {
    Monotonic,
    Random,
}

/// The `jobs` ids of `round`, the same for every variant of the round.
pub fn ids_for(ids: Ids, jobs: usize, round: u64) -> Vec<String> {
    match ids {
        Ids::Monotonic => (0..jobs as u64)
            .map(|i| job_id((round << 40) + i + 1))
            .collect(),
        Ids::Random => {
            let mut rng = Rng::new(0x5EED + round);
            (0..jobs).map(|_| job_id(rng.next_u64() >> 2)).collect()
        }
    }
}

/// An empty server with its statistics reset (`FLUSHALL`, `CONFIG RESETSTAT`).
pub fn fresh(con: &mut support::Connection) {
    let _: () = cmd("FLUSHALL").query(con).expect("flushall");
    reset_stats(con);
}

/// The server's statistics reset (`CONFIG RESETSTAT`): commandstats count from here.
pub fn reset_stats(con: &mut support::Connection) {
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("resetstat");
}

/// The wall clock, in ms since the Unix epoch.
pub fn now_unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}
