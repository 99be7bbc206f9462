//! Packet delay without `sch_netem`: the node's `iptables` rules hand its packets to an
//! NFQUEUE, and this loop, run inside the node's network namespace (`emq-chaos delay ...`),
//! holds each one for its delay before it lets it go. Packets leave in the order they came
//! (a packet's release is never before the one ahead of it), so a TCP stream is slowed, not
//! reordered. The rules use `--queue-bypass`: once this loop is gone, packets pass untouched.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use nfq::{Message, Queue, Verdict};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The NFQUEUE number the harness's rules use.
pub const QUEUE: u16 = 7;

/// Holds each queued packet for `ms` ± `jitter_ms` (drawn from `seed`), until killed.
pub fn serve(ms: u64, jitter_ms: u64, seed: u64) -> std::io::Result<()> {
    let mut queue = Queue::open()?;
    queue.bind(QUEUE)?;
    // The headers are enough: a verdict without a payload keeps the packet as it was.
    queue.set_copy_range(QUEUE, 64)?;
    queue.set_queue_max_len(QUEUE, 65_536)?;
    queue.set_nonblocking(true);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut held: VecDeque<(Instant, Message)> = VecDeque::new();
    let mut last = Instant::now();
    loop {
        let now = Instant::now();
        while held.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, msg)) = held.pop_front() {
                queue.verdict(msg)?;
            }
        }
        match queue.recv() {
            Ok(mut msg) => {
                msg.set_verdict(Verdict::Accept);
                let low = ms.saturating_sub(jitter_ms);
                let delay = Duration::from_millis(rng.random_range(low..=ms + jitter_ms));
                last = last.max(now + delay);
                held.push_back((last, msg));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let next = held.front().map_or(Duration::from_millis(1), |(at, _)| {
                    at.saturating_duration_since(now)
                });
                std::thread::sleep(next.min(Duration::from_millis(1)));
            }
            Err(e) => return Err(e),
        }
    }
}
