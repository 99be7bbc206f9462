//! Branded ids minted by the client, in the module's layout (protocol.md §2): `JOB` and 11 base62
//! digits of a 63-bit value, the milliseconds since 2024-01-01 in the high bits, so they sort
//! as minted. A producer that mints its ids retries an enqueue with the same id, which the
//! server makes idempotent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const EPOCH_MS: u64 = 1_704_067_200_000;
/// The module's node (10) and sequence (12) bits.
const LOW_BITS: u32 = 22;
const MAX_VALUE: u64 = (1 << 63) - 1;

static LAST: AtomicU64 = AtomicU64::new(0);

/// `kind` and `value` as the 14-byte wire form.
pub fn encode(kind: &[u8; 3], mut value: u64) -> String {
    let mut out = [b'0'; 14];
    out[..3].copy_from_slice(kind);
    for slot in out[3..].iter_mut().rev() {
        *slot = ALPHABET[(value % 62) as usize];
        value /= 62;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A fresh `JOB` id: the time, then random low bits; always above the last one minted by this
/// process.
pub fn mint() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let ms = now.saturating_sub(EPOCH_MS);
    let fresh = ((ms << LOW_BITS) | rand::random::<u64>() & ((1 << LOW_BITS) - 1)) & MAX_VALUE;
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let value = fresh.max(last + 1).min(MAX_VALUE);
        match LAST.compare_exchange_weak(last, value, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return encode(b"JOB", value),
            Err(seen) => last = seen,
        }
    }
}

/// When an id in the module's layout was minted (unix ms): the high bits of its value; `None`
/// for bytes that are not a branded id.
pub fn minted_at_ms(id: &str) -> Option<u64> {
    let bytes = id.as_bytes();
    if bytes.len() != 14 || !bytes[..3].iter().all(u8::is_ascii_uppercase) {
        return None;
    }
    let mut value: u64 = 0;
    for b in &bytes[3..] {
        let digit = ALPHABET.iter().position(|a| a == b)? as u64;
        value = value.checked_mul(62)?.checked_add(digit)?;
    }
    (value <= MAX_VALUE).then_some((value >> LOW_BITS) + EPOCH_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_encode_as_the_module_does_and_sort_as_minted() {
        assert_eq!(encode(b"JOB", 274_557_032_793_636_864), "JOB0KHTOWnGLuC");
        let ids: Vec<String> = (0..1000).map(|_| mint()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn an_id_tells_when_it_was_minted() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let at = minted_at_ms(&mint()).unwrap();
        assert!(at >= before - 1 && at <= before + 1000, "{at} vs {before}");
        assert_eq!(minted_at_ms("JOB00000000000"), Some(EPOCH_MS));
        assert_eq!(minted_at_ms("job00000000000"), None);
        assert_eq!(minted_at_ms("JOB0000000000!"), None);
        assert_eq!(minted_at_ms("JOBzzzzzzzzzzz"), None);
    }
}
