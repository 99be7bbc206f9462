//! The server's eviction policy, watched for what it would do to queues.
//!
//! Under an `allkeys-*` `maxmemory-policy` the server may evict any key: a job's row (the claim
//! then drops its id) or a whole set, and with it every job the set held. EchoMQ cannot stop
//! that, so it says so in the log: at load and whenever `maxmemory-policy` is set to such a
//! policy. `noeviction` (the default, under which EchoMQ's writes are refused with `OOM`
//! instead) and the `volatile-*` policies (which evict only keys with a TTL: done rows) keep
//! queues whole.

use std::ffi::CStr;

use valkey_module::Context;

use crate::host::server::{info_field, log};

/// Whether `policy` may evict keys without a TTL, which queues are made of.
pub fn evicts_queues(policy: &[u8]) -> bool {
    policy.starts_with(b"allkeys-")
}

/// Reads the policy and logs a warning if it may evict queues.
pub fn check(ctx: &Context) {
    let Some(policy) = info_field(ctx, "memory", "maxmemory_policy") else {
        return;
    };
    if evicts_queues(&policy) {
        log(
            ctx,
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

/// A config change: checks again when `maxmemory-policy` changed.
pub fn on_config_change(ctx: &Context, names: &[&CStr]) {
    if names
        .iter()
        .any(|n| n.to_bytes().eq_ignore_ascii_case(b"maxmemory-policy"))
    {
        check(ctx);
    }
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
