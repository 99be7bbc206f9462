//! The server's eviction policy, watched for what it would do to queues.
//!
//! Under an `allkeys-*` `maxmemory-policy` the server may evict any key: a job's row (the claim
//! then drops its id) or a whole set, and with it every job the set held. EchoMQ cannot stop
//! that, so it says so in the log: at load and whenever `maxmemory-policy` is set to such a
//! policy. `noeviction` (the default, under which EchoMQ's writes are refused with `OOM`
//! instead) and the `volatile-*` policies (which evict only keys with a TTL: done rows) keep
//! queues whole.

use std::ffi::CStr;
use std::os::raw::c_void;

use valkey_module::{raw, Context};

use crate::server;
use crate::store;

/// Whether `policy` may evict keys without a TTL, which queues are made of.
pub fn evicts_queues(policy: &[u8]) -> bool {
    policy.starts_with(b"allkeys-")
}

/// Reads the policy and logs a warning if it may evict queues.
pub fn check(ctx: &Context) {
    let Some(policy) = store::info_field(ctx, c"memory", c"maxmemory_policy") else {
        return;
    };
    if evicts_queues(&policy) {
        server::log(
            ctx.ctx,
            c"warning",
            &format!(
                "EchoMQ: maxmemory-policy is {}: the server may evict job rows and whole queue \
                 sets, losing jobs. Use noeviction (EchoMQ's writes are then refused with OOM) \
                 or a volatile-* policy for queue data.",
                String::from_utf8_lossy(&policy)
            ),
        );
    }
}

/// The server's config-change event: checks again when `maxmemory-policy` changed.
///
/// # Safety
/// Called by the server with a live context and, for a change, its list of config names.
pub unsafe extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        if subevent != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE || data.is_null() {
            return;
        }
        // SAFETY: for this event and subevent the server passes its config-change record,
        // whose `num_changes` names are live NUL-terminated strings during the call.
        let change = unsafe { &*(data as *const raw::RedisModuleConfigChange) };
        let mut names = (0..change.num_changes as usize).filter_map(|i| {
            // SAFETY: `i` is within `num_changes`.
            let name = unsafe { *change.config_names.add(i) };
            // SAFETY: a live NUL-terminated string, as above.
            (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
        });
        if names.any(|n| n.to_bytes().eq_ignore_ascii_case(b"maxmemory-policy")) {
            check(&Context::new(ctx));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::evicts_queues;

    #[test]
    fn only_allkeys_policies_evict_queues() {
        for p in ["allkeys-lru", "allkeys-lfu", "allkeys-random"] {
            assert!(evicts_queues(p.as_bytes()), "{p}");
        }
        for p in [
            "noeviction",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(!evicts_queues(p.as_bytes()), "{p}");
        }
    }
}
