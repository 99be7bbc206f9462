//! Cluster slots (protocol.md §3): the same function the server uses for `CLUSTER KEYSLOT`.

use crc16::{State, XMODEM};

/// Number of hash slots in a Valkey Cluster.
pub const SLOTS: u16 = 16384;

/// The bytes that decide a key's slot: between the first `{` and the first `}` after it when
/// that is non-empty, otherwise the whole key.
pub fn hashtag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// `CRC16-XMODEM(hashtag(key)) mod 16384`.
pub fn slot(key: &[u8]) -> u16 {
    State::<XMODEM>::calculate(hashtag(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_vectors() {
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"orders"), 105);
        assert_eq!(slot(b"fills"), 4165);
        assert_eq!(slot(b"quotes"), 3378);
    }

    #[test]
    fn hashtag_rules() {
        assert_eq!(hashtag(b"emq:{orders}:pending"), b"orders");
        assert_eq!(hashtag(b"{}x"), b"{}x", "an empty tag means the whole key");
        assert_eq!(
            hashtag(b"a{b"),
            b"a{b",
            "an unclosed brace means the whole key"
        );
        assert_eq!(
            hashtag(b"}{x}{y}"),
            b"x",
            "first open brace, first close after it"
        );
        assert_eq!(hashtag(b"{{a}}"), b"{a");
        assert_eq!(hashtag(b""), b"");
    }

    #[test]
    fn every_key_of_a_queue_shares_its_slot() {
        for key in [
            &b"emq:{orders}:pending"[..],
            b"emq:{orders}:active",
            b"emq:{orders}:schedule",
            b"emq:{orders}:meta",
            b"emq:{orders}:job:JOB0KHTOWnGLuC",
        ] {
            assert_eq!(slot(key), 105);
        }
    }
}
