//! Branded ids (protocol.md §2): 3 bytes of kind (`[A-Z]{3}`) and an 11-byte Base62 snowflake,
//! big-endian and zero-padded, so byte order equals numeric order equals mint order.

/// Total length of a branded id.
pub const LEN: usize = 14;
/// Length of the kind prefix.
pub const KIND_LEN: usize = 3;
const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The only kind `EMQ.ENQUEUE` admits.
pub const JOB_KIND: [u8; 3] = *b"JOB";

/// Milliseconds from the unix epoch to the snowflake epoch, 2024-01-01T00:00:00Z.
pub const EPOCH_MS: u64 = 1_704_067_200_000;
const NODE_BITS: u32 = 10;
const SEQ_BITS: u32 = 12;
/// Largest node id a snowflake can carry.
pub const MAX_NODE: u16 = (1 << NODE_BITS) - 1;
const MAX_SEQ: u64 = (1 << SEQ_BITS) - 1;
const MAX_MS: u64 = (1 << 41) - 1;

/// A well-formed branded id: its kind and its snowflake value (< 2^63).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrandedId {
    kind: [u8; 3],
    value: u64,
}

/// Each byte's Base62 digit, or [`NOT_A_DIGIT`]: one load a character where a parse runs on
/// every claim and settle.
const DIGITS: [u8; 256] = {
    let mut table = [NOT_A_DIGIT; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};
const NOT_A_DIGIT: u8 = u8::MAX;

impl BrandedId {
    /// Builds an id from its parts; `None` if the kind is not `[A-Z]{3}` or the value ≥ 2^63.
    pub fn new(kind: [u8; 3], value: u64) -> Option<Self> {
        (kind.iter().all(u8::is_ascii_uppercase) && value <= i64::MAX as u64)
            .then_some(Self { kind, value })
    }

    /// Parses exactly 14 bytes; anything else (length, lower-case kind, a character outside
    /// the alphabet, a payload ≥ 2^63) is `None`.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != LEN {
            return None;
        }
        let kind = [bytes[0], bytes[1], bytes[2]];
        let (head, last) = bytes[KIND_LEN..].split_at(LEN - KIND_LEN - 1);
        // Ten digits stay below 62^10 < 2^64, and so do ten bytes outside the alphabet (each
        // read as 255, under 255 * 62^10 / 61): only the last step can overflow.
        let mut value: u64 = 0;
        let mut bad = 0u8;
        for &b in head {
            let d = DIGITS[usize::from(b)];
            bad |= d;
            value = value * 62 + u64::from(d);
        }
        if bad & 0xC0 != 0 {
            return None;
        }
        let d = DIGITS[usize::from(last[0])];
        if d == NOT_A_DIGIT {
            return None;
        }
        Self::new(kind, value.checked_mul(62)?.checked_add(u64::from(d))?)
    }

    pub fn kind(&self) -> [u8; 3] {
        self.kind
    }

    pub fn value(&self) -> u64 {
        self.value
    }

    pub fn is_job(&self) -> bool {
        self.kind == JOB_KIND
    }

    /// The 14-byte wire form.
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [b'0'; LEN];
        out[..KIND_LEN].copy_from_slice(&self.kind);
        let mut v = self.value;
        for slot in out[KIND_LEN..].iter_mut().rev() {
            *slot = ALPHABET[(v % 62) as usize];
            v /= 62;
        }
        out
    }

    /// Unix milliseconds at which a module-minted snowflake was made.
    pub fn minted_at_ms(&self) -> u64 {
        (self.value >> (NODE_BITS + SEQ_BITS)) + EPOCH_MS
    }

    /// The node id (`emq.node-id`) a module-minted snowflake carries.
    pub fn node_id(&self) -> u16 {
        ((self.value >> SEQ_BITS) & u64::from(MAX_NODE)) as u16
    }
}

/// Mints strictly increasing `JOB` snowflakes: 41 bits of ms since [`EPOCH_MS`], 10 bits of
/// node id, 12 bits of sequence. If the clock steps back, minting continues from the last
/// millisecond used, and a new node id (`emq.node-id` set at runtime) starts a new millisecond,
/// so ids never repeat or go backwards.
#[derive(Debug, Default)]
pub struct Minter {
    last_ms: u64,
    node: u64,
    seq: u64,
}

impl Minter {
    pub const fn new() -> Self {
        Self {
            last_ms: 0,
            node: 0,
            seq: 0,
        }
    }

    /// The next id for `node` (masked to 10 bits) at wall-clock `now_unix_ms`.
    pub fn mint(&mut self, now_unix_ms: u64, node: u16) -> BrandedId {
        let now = now_unix_ms.saturating_sub(EPOCH_MS).min(MAX_MS);
        let node = u64::from(node & MAX_NODE);
        if now > self.last_ms {
            self.last_ms = now;
            self.seq = 0;
        } else if self.seq < MAX_SEQ && node == self.node {
            self.seq += 1;
        } else {
            // Sequence exhausted within one millisecond, or another node id whose ids in this
            // millisecond could sort below those just minted: borrow the next one.
            self.last_ms = (self.last_ms + 1).min(MAX_MS);
            self.seq = 0;
        }
        self.node = node;
        let value = (self.last_ms << (NODE_BITS + SEQ_BITS)) | (node << SEQ_BITS) | self.seq;
        BrandedId {
            kind: JOB_KIND,
            value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parse_vector() {
        let id = BrandedId::parse(b"JOB0KHTOWnGLuC").expect("well formed");
        assert_eq!(&id.kind(), b"JOB");
        assert_eq!(id.value(), 274_557_032_793_636_864);
        assert!(id.is_job());
        assert_eq!(&id.encode(), b"JOB0KHTOWnGLuC");
    }

    #[test]
    fn other_kinds_are_well_formed_but_not_jobs() {
        let id = BrandedId::parse(b"ORD0NgWEfAEJfs").expect("well formed");
        assert_eq!(&id.kind(), b"ORD");
        assert!(!id.is_job());
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            &b"12345678901234"[..], // a 14-byte decimal
            b"order-12345678",      // a 14-byte slug
            b"JOB0KHTOWnGLu",       // 13 bytes
            b"JOB0KHTOWnGLuCC",     // 15 bytes
            b"",
            b"job0KHTOWnGLuC", // lower-case namespace
            b"JO10KHTOWnGLuC", // digit in namespace
            b"JOB0KHTOWnGLu-", // outside the alphabet
            b"JOBAzL8n0Y58m8", // 2^63, one past the largest payload
            b"JOBzzzzzzzzzzz", // overflows u64
        ] {
            assert_eq!(
                BrandedId::parse(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// The parse as the protocol words it: each digit's place, every step checked.
    fn parsed_digit_by_digit(bytes: &[u8]) -> Option<BrandedId> {
        if bytes.len() != LEN {
            return None;
        }
        let mut value: u64 = 0;
        for &b in &bytes[KIND_LEN..] {
            let d = ALPHABET.iter().position(|&a| a == b)? as u64;
            value = value.checked_mul(62)?.checked_add(d)?;
        }
        BrandedId::new([bytes[0], bytes[1], bytes[2]], value)
    }

    #[test]
    fn every_byte_at_every_place_parses_as_digit_by_digit() {
        let mut seen = [0usize; 2];
        for base in [
            &b"JOB0KHTOWnGLuC"[..],
            b"JOBAzL8n0Y58m7",
            b"JOBzzzzzzzzzzz",
            b"JOB00000000000",
        ] {
            for at in KIND_LEN..LEN {
                for b in 0..=u8::MAX {
                    let mut id = base.to_vec();
                    id[at] = b;
                    let parsed = BrandedId::parse(&id);
                    assert_eq!(parsed, parsed_digit_by_digit(&id), "{id:?}");
                    seen[usize::from(parsed.is_some())] += 1;
                }
            }
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    }

    #[test]
    fn largest_payload_is_i64_max() {
        let id = BrandedId::parse(b"JOBAzL8n0Y58m7").expect("largest payload");
        assert_eq!(id.value(), i64::MAX as u64);
        assert_eq!(&id.encode(), b"JOBAzL8n0Y58m7");
    }

    #[test]
    fn byte_order_is_numeric_order() {
        let values = [0u64, 1, 61, 62, 3843, 3844, 1 << 40, i64::MAX as u64 - 1];
        for pair in values.windows(2) {
            let a = BrandedId::new(JOB_KIND, pair[0]).expect("valid").encode();
            let b = BrandedId::new(JOB_KIND, pair[1]).expect("valid").encode();
            assert!(a < b);
        }
    }

    #[test]
    fn seed_ids_decode_to_2026() {
        // 2026-01-01T00:00:00Z = 1767225600000, 2027-01-01 = 1798761600000
        for s in [&b"JOB0KHTOWnGLuC"[..], b"ORD0NgWEfAEJfs", b"JOB0Nb1VTbfnu4"] {
            let at = BrandedId::parse(s).expect("seed id").minted_at_ms();
            assert!((1_767_225_600_000..1_798_761_600_000).contains(&at), "{at}");
        }
    }

    #[test]
    fn minting_is_strictly_increasing_even_when_the_clock_steps_back() {
        let mut m = Minter::new();
        let t = 1_780_000_000_000;
        let mut prev = m.mint(t, 7);
        assert_eq!(prev.minted_at_ms(), t);
        for now in [t, t, t - 5_000, t + 1, t + 1, t - 1] {
            let next = m.mint(now, 7);
            assert!(next.encode() > prev.encode());
            assert!(next.is_job());
            prev = next;
        }
    }

    #[test]
    fn sequence_overflow_borrows_the_next_millisecond() {
        let mut m = Minter::new();
        let t = 1_780_000_000_000;
        let mut prev = m.mint(t, 1);
        for _ in 0..5000 {
            let next = m.mint(t, 1);
            assert!(next > prev);
            prev = next;
        }
        assert!(prev.minted_at_ms() > t);
    }

    #[test]
    fn a_new_node_id_never_mints_below_the_ids_before_it() {
        let mut m = Minter::new();
        let t = 1_780_000_000_000;
        let mut prev = m.mint(t, 900);
        for node in [3, 3, 900, 0, 1023, 1] {
            let next = m.mint(t, node);
            assert!(next > prev, "node {node}");
            assert_eq!(next.node_id(), node);
            prev = next;
        }
    }

    #[test]
    fn node_id_is_carried() {
        let mut m = Minter::new();
        let id = m.mint(1_780_000_000_000, 1023);
        assert_eq!(id.node_id(), 1023);
    }
}
