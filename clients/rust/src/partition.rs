//! A partitioned queue's partitions, as the module names and routes them: partition `i` of `n`
//! is the queue `<queue>~<i>-<j>`, `j` the least number that puts its slot in the `i`-th of `n`
//! shares of the slot range; a job goes to partition FNV-1a-32(its group, else its id) mod `n`.
//! testing/vectors/ holds every client to the same. A [`Queue`](crate::Queue) routes by them,
//! and a [`Worker`](crate::Worker) claims the partitions they name (span.rs, claims.rs).

use std::ops::Range;

use crate::slot::{slot, SLOTS};

/// Most partitions a queue may have.
pub const MAX_PARTITIONS: u16 = 1024;

/// Longest name of a partitioned queue.
pub const MAX_NAME_LEN: usize = 112;

/// FNV-1a, 32 bits.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash: u32, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The partition, of `width` (0 reads as 1), of a job with this group, or this id where it has
/// none.
pub fn route(width: u16, key: &str) -> u16 {
    (fnv1a32(key.as_bytes()) % u32::from(width.max(1))) as u16
}

/// The slots partition `index` of `width` owns, from ⌈index·16384/width⌉ up to the next
/// index's; `None` for a width out of 1–1024 or an index past it.
pub fn share(index: u16, width: u16) -> Option<Range<u16>> {
    if !(1..=MAX_PARTITIONS).contains(&width) || index >= width {
        return None;
    }
    let bound = |i: u32| (i * u32::from(SLOTS)).div_ceil(u32::from(width)) as u16;
    Some(bound(u32::from(index))..bound(u32::from(index) + 1))
}

/// Whether `text` is a name as the server takes a queue's or a group's: 1 to `longest` bytes of
/// printable ASCII (`0x21..=0x7e`) without `{` or `}`.
pub fn is_name(text: &str, longest: usize) -> bool {
    let printable = |b: u8| (0x21..=0x7e).contains(&b) && b != b'{' && b != b'}';
    !text.is_empty() && text.len() <= longest && text.bytes().all(printable)
}

/// The name of partition `index` of `queue`'s `width`; `None` for a name that is no queue name
/// (1–112 bytes of printable ASCII without braces), a width out of 1–1024 or an index past it.
pub fn name(queue: &str, index: u16, width: u16) -> Option<String> {
    if !is_name(queue, MAX_NAME_LEN) {
        return None;
    }
    let share = share(index, width)?;
    (0..1_000_000u32)
        .map(|j| format!("{queue}~{index}-{j}"))
        .find(|name| share.contains(&slot(name)))
}
