//! (Compiled for tests only: `#[cfg(test)]` in `protocol/mod.rs`.)
//! Property tests of the pure parsers over arbitrary input: they never panic, they agree with
//! straightforward reference implementations, and every production reads back.

use proptest::prelude::*;

use super::branded_id::{BrandedId, LEN};
use super::keyspace::{
    decode, group_key, job_key, queue_key, Decoded, Group, KeyBuf, KeyType, Queue, RowPrefix,
};
use super::slot::{hashtag, slot};

/// CRC16-XMODEM bit by bit (poly 0x1021, init 0), as the spec defines it.
fn crc16_reference(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The hashtag rule in its plainest words.
fn hashtag_reference(key: &[u8]) -> Vec<u8> {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key.to_vec();
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(0) | None => key.to_vec(),
        Some(len) => key[open + 1..open + 1 + len].to_vec(),
    }
}

fn braced_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![any::<u8>(), Just(b'{'), Just(b'}')], 0..40)
}

fn queue_name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        (0x21u8..=0x7E).prop_filter("no braces", |b| *b != b'{' && *b != b'}'),
        1..=128,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn slot_matches_the_reference(key in braced_bytes()) {
        let tag = hashtag_reference(&key);
        prop_assert_eq!(hashtag(&key), tag.as_slice());
        prop_assert_eq!(slot(&key), crc16_reference(&tag) % 16384);
    }

    #[test]
    fn branded_ids_round_trip(kind in "[A-Z]{3}", value in 0u64..=i64::MAX as u64) {
        let kind: [u8; 3] = kind.as_bytes().try_into().expect("three letters");
        let id = BrandedId::new(kind, value).expect("valid parts");
        prop_assert_eq!(BrandedId::parse(&id.encode()), Some(id));
    }

    #[test]
    fn parsing_any_bytes_is_total_and_canonical(bytes in prop::collection::vec(any::<u8>(), 0..20)) {
        if let Some(id) = BrandedId::parse(&bytes) {
            prop_assert_eq!(bytes.len(), LEN);
            let encoded = id.encode();
            prop_assert_eq!(encoded.as_slice(), bytes.as_slice());
        }
    }

    #[test]
    fn decoding_any_bytes_never_panics(bytes in braced_bytes()) {
        let _ = decode(&bytes);
        let mut key = b"emq:{".to_vec();
        key.extend_from_slice(&bytes);
        let _ = decode(&key);
    }

    #[test]
    fn every_production_decodes_back(name in queue_name(), value in 0u64..=i64::MAX as u64, t in 0usize..KeyType::ALL.len()) {
        let queue = Queue::parse(&name).expect("a valid name");
        let ty = KeyType::ALL[t];
        let id = BrandedId::new(*b"JOB", value).expect("valid");
        let group = Group::parse(&name).expect("a valid name");
        let key = match ty {
            KeyType::Job => job_key(queue, &id),
            KeyType::Group => group_key(queue, group),
            _ => queue_key(queue, ty),
        };
        let Some(Decoded::Queue { queue: q, ty: got, id: got_id, group: got_group }) = decode(&key) else {
            return Err(TestCaseError::fail("decodes"));
        };
        prop_assert_eq!(q.as_bytes(), name.as_slice());
        prop_assert_eq!(got, ty);
        prop_assert_eq!(got_id, (ty == KeyType::Job).then_some(id));
        prop_assert_eq!(got_group, (ty == KeyType::Group).then_some(group));
        prop_assert_eq!(slot(&key), slot(&name));
    }

    #[test]
    fn every_way_to_compose_a_row_key_agrees(name in queue_name(), value in 0u64..=i64::MAX as u64) {
        let queue = Queue::parse(&name).expect("a valid name");
        let id = BrandedId::new(*b"JOB", value).expect("valid");
        let want = job_key(queue, &id);
        let prefix = RowPrefix::new(queue);
        for made in [
            KeyBuf::job(queue, &id),
            prefix.row(&id),
            prefix.row_arg(&id, &id.encode()),
        ] {
            prop_assert_eq!(made.as_bytes(), want.as_slice());
        }
    }
}
