//! A queue's hash slot (protocol.md §3): CRC16-XMODEM of the queue name mod 16384. Every key of
//! queue `q` is `emq:{q}:...`, so its slot is that of the name (a name holds no braces). A
//! child whose parent's queue has another slot is adopted by the parent's node first.

/// The slots of a cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-XMODEM (polynomial 0x1021, init 0), the checksum `CLUSTER KEYSLOT` takes.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (0..8).fold(crc ^ (u16::from(b) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// The hash slot of a queue's keys.
pub fn slot(queue: &str) -> u16 {
    crc16(queue.as_bytes()) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_protocols_vectors() {
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("orders"), 105);
        assert_eq!(slot("fills"), 4165);
        assert_eq!(slot("quotes"), 3378);
    }
}
