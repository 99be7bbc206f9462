//! What the harness watches while a phase runs, besides the load: a limit's use, read from the
//! server's own count (`EMQ.STATS`) of the limited queue on its primary, into the history; and
//! whether any primary lost its role (the checker excuses unconfirmed writes only then).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cluster::{connect, owner, slot_map};
use crate::docker::Node;
use crate::history::{now_ns, record_limit, History, LimitSample};

/// A limit the harness sets on a queue and reads back. A group's limit would be another kind
/// here, read the same way into the same samples.
pub struct Limit {
    pub queue: String,
    pub slot: u16,
    pub concurrency: i64,
}

impl Limit {
    /// Sets it on the queue's primary (`EMQ.LIMIT <queue> CONCURRENCY <n>`).
    pub fn set(&self, nodes: &[Node]) -> Result<(), String> {
        let map = slot_map(nodes).ok_or("no slot map")?;
        let ip = owner(&map, self.slot).ok_or("no owner of the limited queue")?;
        let mut con = connect(ip, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        redis::cmd("EMQ.LIMIT")
            .arg(&self.queue)
            .arg("CONCURRENCY")
            .arg(self.concurrency)
            .query::<redis::Value>(&mut con)
            .map(|_| ())
            .map_err(|e| format!("EMQ.LIMIT {}: {e}", self.queue))
    }

    /// The server's count of the queue's active jobs now, on its primary.
    fn read(&self, nodes: &[Node]) -> Option<LimitSample> {
        let map = slot_map(nodes)?;
        let ip = owner(&map, self.slot)?;
        let mut con = connect(ip, Duration::from_millis(500)).ok()?;
        let stats: Vec<(String, Option<i64>)> = redis::cmd("EMQ.STATS")
            .arg(&self.queue)
            .query(&mut con)
            .ok()?;
        let get = |k: &str| stats.iter().find(|(f, _)| f == k).and_then(|(_, v)| *v);
        Some(LimitSample {
            scope: format!("queue {} concurrency", self.queue),
            limit: get("concurrency")?,
            observed: get("active")?,
            at_ns: now_ns(),
        })
    }
}

/// The primaries by address, as the slot map has them.
fn primaries(nodes: &[Node]) -> Option<BTreeSet<String>> {
    slot_map(nodes).map(|m| m.into_iter().map(|(_, _, ip)| ip).collect())
}

pub struct Watch {
    running: Arc<AtomicBool>,
    failover: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Watch {
    /// Reads `limit` and the primaries every 50 ms until stopped.
    pub fn start(nodes: &[Node], limit: Limit, history: &History) -> Watch {
        let running = Arc::new(AtomicBool::new(true));
        let failover = Arc::new(AtomicBool::new(false));
        let (nodes, history) = (nodes.to_vec(), history.clone());
        let (run, moved) = (running.clone(), failover.clone());
        let thread = std::thread::spawn(move || {
            let first = primaries(&nodes);
            while run.load(Ordering::SeqCst) {
                if let Some(sample) = limit.read(&nodes) {
                    record_limit(&history, sample);
                }
                let now = primaries(&nodes);
                if now.is_some() && now != first {
                    moved.store(true, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Watch {
            running,
            failover,
            thread,
        }
    }

    /// Stops watching; whether a primary lost its role meanwhile.
    pub fn stop(self) -> bool {
        self.running.store(false, Ordering::SeqCst);
        let _ = self.thread.join();
        self.failover.load(Ordering::SeqCst)
    }
}
