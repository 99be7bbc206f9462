//! A partitioned queue's partitions: partition `i` of `n` is an ordinary queue named
//! `<queue>~<i>-<j>`, with `j` the least number that puts its slot in the `i`-th of `n` shares
//! of the slot range (equal to a slot), so the partitions spread over the primaries of any
//! balanced cluster; a job goes to the partition a hash of its id (or of its group) names. The
//! clients compute the same (testing/vectors/ holds them to it). No command uses it yet.

use std::ops::Range;

use super::keyspace::Queue;
use super::slot::{slot, SLOTS};

/// Most partitions a queue may have.
pub const MAX_PARTITIONS: u16 = 1024;

/// Longest name of a partitioned queue: its partitions' names, at most 12 bytes longer
/// (`~1023-999999`), stay within a queue name's 128.
pub const MAX_NAME_LEN: usize = 112;

/// Most suffixes tried for one partition's name; the expected number is `n`.
const MAX_TRIES: u32 = 1_000_000;

/// FNV-1a, 32 bits, of `bytes`.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash: u32, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The partition, of `width` (0 reads as 1), a job goes to: by its group's name where it has
/// one, else by its id (`key`).
pub fn route(width: u16, key: &[u8]) -> u16 {
    (fnv1a32(key) % u32::from(width.max(1))) as u16
}

/// The slots partition `index` of `width` owns: from ⌈index·16384/width⌉ up to the next
/// index's; `None` for a width out of 1–1024 or an index past it.
pub fn share(index: u16, width: u16) -> Option<Range<u16>> {
    if !(1..=MAX_PARTITIONS).contains(&width) || index >= width {
        return None;
    }
    let bound = |i: u32| (i * u32::from(SLOTS)).div_ceil(u32::from(width)) as u16;
    Some(bound(u32::from(index))..bound(u32::from(index) + 1))
}

/// The name of partition `index` of `queue`'s `width`; `None` for a queue name that is no
/// queue name (protocol.md §1.1) or too long, a width out of 1–1024, or an index past it.
pub fn name(queue: &[u8], index: u16, width: u16) -> Option<Vec<u8>> {
    if queue.len() > MAX_NAME_LEN || Queue::parse(queue).is_none() {
        return None;
    }
    let share = share(index, width)?;
    (0..MAX_TRIES).find_map(|j| {
        let mut name = queue.to_vec();
        name.extend_from_slice(format!("~{index}-{j}").as_bytes());
        share.contains(&slot(&name)).then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The widths the vectors hold.
    const WIDTHS: [u16; 6] = [1, 2, 3, 12, 100, 1024];

    /// The vectors every client is held to, made from the functions above.
    fn vectors() -> String {
        let mut out = String::from(
            "# Partitioned queues (src/protocol/partition.rs): queue, width, a job's id or group,\n\
             # its partition, that partition's name and slot. Tab-separated. Rewrite with\n\
             # ECHOMQ_BLESS=1 cargo test -p echomq --lib partition.\n",
        );
        let keys = [
            "JOB0KHTOWnGLuC",
            "ORD0NgWEfAEJfs",
            "JOBAzL8n0Y58m7",
            "tenant-7",
            "a",
            "",
        ];
        for queue in ["orders", "q", "emails.v2"] {
            for width in WIDTHS {
                for key in keys {
                    let index = route(width, key.as_bytes());
                    let name = name(queue.as_bytes(), index, width).expect("a name");
                    let name = String::from_utf8(name).expect("ascii");
                    let slot = slot(name.as_bytes());
                    out.push_str(&format!(
                        "{queue}\t{width}\t{key}\t{index}\t{name}\t{slot}\n"
                    ));
                }
            }
        }
        out
    }

    /// Every share of every width the vectors use.
    fn shares() -> String {
        let mut out = String::from(
            "# Partitioned queues' shares of the slot range (src/protocol/partition.rs): width,\n\
             # index, first slot, the slot past the last. Tab-separated. Rewrite with\n\
             # ECHOMQ_BLESS=1 cargo test -p echomq --lib partition.\n",
        );
        for width in WIDTHS {
            for index in 0..width {
                let share = share(index, width).expect("a share");
                out.push_str(&format!(
                    "{width}\t{index}\t{}\t{}\n",
                    share.start, share.end
                ));
            }
        }
        out
    }

    /// `made` is the file `name` of testing/vectors/ (written first with `ECHOMQ_BLESS=1`).
    fn check_vectors(name: &str, made: &str) {
        let path = format!("{}/testing/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("ECHOMQ_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, made).expect("write the vectors");
        }
        let kept = std::fs::read_to_string(&path).expect("the vectors");
        assert_eq!(
            kept, made,
            "{name}: after a deliberate change, ECHOMQ_BLESS=1"
        );
    }

    #[test]
    fn the_clients_vectors_are_these_functions() {
        check_vectors("partitions.tsv", &vectors());
        check_vectors("shares.tsv", &shares());
    }

    #[test]
    fn fnv1a32_matches_its_published_values() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn every_width_s_partitions_fall_each_in_its_own_share_and_cover_the_range() {
        for width in [1u16, 2, 3, 7, 12, 16, 100, 1000, 1024] {
            let mut next = 0;
            for index in 0..width {
                let share = share(index, width).expect("a share");
                assert_eq!(share.start, next, "width {width}: shares meet");
                assert!(!share.is_empty());
                next = share.end;
                let name = name(b"orders", index, width).expect("a name");
                assert!(share.contains(&slot(&name)));
                assert!(
                    crate::protocol::Queue::parse(&name).is_some(),
                    "a queue name"
                );
            }
            assert_eq!(next, SLOTS, "width {width}: the whole range");
        }
    }

    #[test]
    fn a_name_too_long_a_width_out_of_range_or_an_index_past_it_has_no_partition() {
        assert!(name(&[b'q'; MAX_NAME_LEN], 1023, 1024).is_some_and(|n| n.len() <= 128));
        assert_eq!(name(&[b'q'; MAX_NAME_LEN + 1], 0, 2), None);
        assert_eq!(name(b"q", 0, 0), None);
        assert_eq!(name(b"q", 0, MAX_PARTITIONS + 1), None);
        assert_eq!(name(b"q", 3, 3), None);
        assert_eq!(name(b"a{b}c", 0, 2), None, "no queue name");
        assert_eq!(name(b"", 0, 2), None);
        assert_eq!(share(3, 1), None);
    }

    #[test]
    fn routing_spreads_ids_over_the_partitions() {
        let mut counts = [0u32; 12];
        for n in 0..12_000u32 {
            counts[usize::from(route(12, format!("JOB{n:011}").as_bytes()))] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }
}
