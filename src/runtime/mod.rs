//! What runs beside commands: the timer ([`timer`]), the keyspace and server events and the
//! command filter ([`events`]), slot migration ([`cluster`]), the effects gate's policy
//! ([`effects`]), the Valkey 8.1 database correction ([`client_db`]), the eviction warning
//! ([`eviction`]), the registry of the node's queues ([`queues`]), the queues claims wait on
//! ([`waiters`]), who else takes keyspace events ([`listeners`]) and `INFO emq` ([`info`]).

#![forbid(unsafe_code)]

pub mod client_db;
pub mod cluster;
pub mod effects;
pub mod events;
pub mod eviction;
pub mod flows;
pub mod info;
pub mod listeners;
pub mod meta_watch;
pub mod owners;
pub mod queues;
pub mod timer;
pub mod waiters;
pub mod watchlist;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use valkey_module::Context;

use crate::host::events::{
    register_filter, register_info, route_own_events, subscribe_keyspace, subscribe_server_events,
    unroute_own_events,
};
use crate::host::meta_cache::hash_writes_seen;
use crate::host::propagate::{NOTIFY_EVICTED, NOTIFY_EXPIRED, NOTIFY_GENERIC, NOTIFY_ZSET};
use crate::protocol::settings::learn_foreign_writes;

/// What must be known before commands are registered (module load).
pub fn init(ctx: &Context) {
    crate::host::store::set_hand_over(flows::hand_over);
    effects::reset();
    cluster::init(ctx);
    client_db::init();
}

/// Subscribes to the events, rebuilds the watched queues and the registry, and starts the
/// timer (module load, after the commands are registered).
pub fn start(ctx: &Context) -> Result<(), String> {
    // Keyspace events on every key tell EchoMQ of the queues others write, and of their keys
    // the server expires or evicts. Without them (`emq.learn-foreign-writes no`), the server
    // calls EchoMQ for no event on another key, and its own writes' events reach it directly.
    // Either way, while nothing else takes keyspace events (`listeners`), EchoMQ's own writes
    // notify it directly, without the server's dispatch.
    if learn_foreign_writes() {
        subscribe_keyspace::<events::Events>(
            ctx,
            NOTIFY_ZSET | NOTIFY_GENERIC | NOTIFY_EXPIRED | NOTIFY_EVICTED,
        )?;
    }
    route_own_events::<events::Events>(NOTIFY_ZSET | NOTIFY_GENERIC, learn_foreign_writes());
    listeners::start(ctx);
    // The command filter: every command on the server pays for the server's call of it (about
    // 2% of a round of plain writes), so it is registered only where one of its duties needs
    // it: learning foreign writes, and a cluster node's legacy slot migrations (`CLUSTER
    // SETSLOT`, `RESTORE-ASKING`). Without it a fork opens the effects gate (`effects`).
    let filtered = learn_foreign_writes() || cluster::enabled();
    subscribe_server_events::<events::Events>(ctx, cluster::handles_atomic_migration(), !filtered);
    if filtered {
        register_filter::<events::Events>(ctx)?;
    }
    COMMAND_FILTER.store(filtered, Ordering::Relaxed);
    hash_writes_seen(filtered);
    queues::start();
    events::rebuild(ctx);
    timer::start(ctx);
    eviction::check(ctx);
    register_info::<info::Info>(ctx);
    Ok(())
}

/// Whether the command filter is registered (see [`start`]).
static COMMAND_FILTER: AtomicBool = AtomicBool::new(true);

pub fn command_filter() -> bool {
    COMMAND_FILTER.load(Ordering::Relaxed)
}

/// Stops the timer and forgets the watched queues and the registry (module unload, or a
/// failed load).
pub fn stop(ctx: &Context) {
    timer::stop(ctx);
    unroute_own_events();
    listeners::stop();
    queues::stop();
}

/// Whether `every_ms` has passed since the time stamped in `last` (0: never); if so, stamps
/// `now_ms`. For work done at most so often from the cron or the timer (main thread only).
pub fn once_every(last: &AtomicU64, now_ms: u64, every_ms: u64) -> bool {
    if now_ms.saturating_sub(last.load(Ordering::Relaxed)) < every_ms {
        return false;
    }
    last.store(now_ms, Ordering::Relaxed);
    true
}
