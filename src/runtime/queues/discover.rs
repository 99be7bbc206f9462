//! Queues only others wrote, found where EchoMQ lists its queues: where EchoMQ learns no
//! foreign write as it happens (`emq.learn-foreign-writes no`, the default), each
//! `EMQ.QUEUES` call walks on through the database's keys, about [`KEYS_PER_CALL`] a call,
//! from where the last call in that database stopped; each queue key it passes makes its queue
//! known. A key there for a whole round of the walk is passed in that round, so a queue only a
//! Lua speaker wrote is known within two rounds (keys in the database ÷ [`KEYS_PER_CALL`]
//! calls each), at the first call where the database holds fewer keys.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use valkey_module::Context;

use crate::host::key::expires_at;
use crate::host::scan::scan_step;
use crate::host::string::OwnedString;
use crate::protocol::keyspace::PREFIX;
use crate::protocol::{decode, Decoded, KeyType};

/// Keys one call walks past, about (`SCAN`'s `COUNT` is a hint).
pub const KEYS_PER_CALL: usize = 10_000;
/// Keys one `SCAN` step is asked to look at.
const KEYS_PER_STEP: usize = 1_000;

/// Where the walk of each database stands (its `SCAN` cursor; absent: at the start).
static WALKS: Mutex<BTreeMap<i32, u64>> = Mutex::new(BTreeMap::new());

fn walks() -> MutexGuard<'static, BTreeMap<i32, u64>> {
    WALKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Forgets where every walk stands (module unload, a flush, `SWAPDB`).
pub fn forget() {
    walks().clear();
}

/// Walks on through the context's database (`db`), at most about [`KEYS_PER_CALL`] keys: the
/// queue keys it passed, as (queue, type, expiry).
pub fn walk_on(ctx: &Context, db: i32) -> Vec<(Vec<u8>, KeyType, Option<i64>)> {
    let mut cursor = walks().get(&db).copied().unwrap_or(0);
    let mut pattern = PREFIX.to_vec();
    pattern.push(b'*');
    let (mut seen, mut found) = (0, Vec::new());
    while seen < KEYS_PER_CALL {
        let Ok((next, names)) = scan_step(ctx, cursor, &pattern, KEYS_PER_STEP) else {
            break;
        };
        seen += KEYS_PER_STEP;
        for name in names {
            let Some(Decoded::Queue { queue, ty, .. }) = decode(&name) else {
                continue;
            };
            // Only a row's expiry matters (`Registry::learn_key`).
            let expires = match ty {
                KeyType::Job => OwnedString::new(ctx, &name)
                    .ok()
                    .and_then(|key| expires_at(ctx, key.as_str())),
                _ => None,
            };
            found.push((queue.as_bytes().to_vec(), ty, expires));
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    walks().insert(db, cursor);
    found
}
