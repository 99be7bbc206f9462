//! What the harness watches while a phase runs, besides the load: the limits' use, read from the
//! server's own counts of the limited queue on its primary (`EMQ.STATS` for the queue's,
//! `EMQ.GROUPS` for each group's), into the history; and whether any primary lost its role
//! (the checker excuses unconfirmed writes only then).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cluster::{connect, owner, slot_map};
use crate::docker::Node;
use crate::history::{now_ns, record_limit, History, LimitSample};

/// The limits the harness sets on a queue and reads back: the queue's concurrency, its groups'
/// (`GROUP-CONCURRENCY`) and one group's own.
pub struct Limit {
    pub queue: String,
    pub slot: u16,
    pub concurrency: i64,
    pub group_concurrency: i64,
    /// A group with a limit of its own, and that limit.
    pub own: (String, i64),
}

impl Limit {
    /// Sets them on the queue's primary (`EMQ.LIMIT <queue> CONCURRENCY <n> GROUP-CONCURRENCY
    /// <m>`, then `EMQ.LIMIT <queue> GROUP <g> CONCURRENCY <k>`).
    pub fn set(&self, nodes: &[Node]) -> Result<(), String> {
        let map = slot_map(nodes).ok_or("no slot map")?;
        let ip = owner(&map, self.slot).ok_or("no owner of the limited queue")?;
        let mut con = connect(ip, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        redis::pipe()
            .cmd("EMQ.LIMIT")
            .arg(&self.queue)
            .arg("CONCURRENCY")
            .arg(self.concurrency)
            .arg("GROUP-CONCURRENCY")
            .arg(self.group_concurrency)
            .cmd("EMQ.LIMIT")
            .arg(&self.queue)
            .arg("GROUP")
            .arg(&self.own.0)
            .arg("CONCURRENCY")
            .arg(self.own.1)
            .query::<redis::Value>(&mut con)
            .map(|_| ())
            .map_err(|e| format!("EMQ.LIMIT {}: {e}", self.queue))
    }

    /// The server's counts of the queue's active jobs and of each group's now, on its
    /// primary, against the limits it has.
    fn read(&self, nodes: &[Node]) -> Vec<LimitSample> {
        let map = slot_map(nodes);
        let Some(ip) = map.as_ref().and_then(|m| owner(m, self.slot)) else {
            return Vec::new();
        };
        let Ok(mut con) = connect(ip, Duration::from_millis(500)) else {
            return Vec::new();
        };
        let mut samples = Vec::new();
        let stats: Option<Vec<(String, Option<i64>)>> = redis::cmd("EMQ.STATS")
            .arg(&self.queue)
            .query(&mut con)
            .ok();
        if let Some(stats) = stats {
            let get = |k: &str| stats.iter().find(|(f, _)| f == k).and_then(|(_, v)| *v);
            if let (Some(limit), Some(observed)) = (get("concurrency"), get("active")) {
                samples.push(LimitSample {
                    scope: format!("queue {} concurrency", self.queue),
                    limit,
                    observed,
                    at_ns: now_ns(),
                });
            }
        }
        let groups: Option<(String, Vec<GroupEntry>)> = redis::cmd("EMQ.GROUPS")
            .arg(&self.queue)
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .ok();
        for group in groups.map(|(_, page)| page).unwrap_or_default() {
            let get = |k: &str| group.iter().find(|(f, _)| f == k).map(|(_, v)| v);
            let int = |k: &str| match get(k) {
                Some(redis::Value::Int(n)) => Some(*n),
                _ => None,
            };
            let name = match get("group") {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => continue,
            };
            if let (Some(limit), Some(observed)) = (int("concurrency"), int("active")) {
                samples.push(LimitSample {
                    scope: format!("queue {} group {name} concurrency", self.queue),
                    limit,
                    observed,
                    at_ns: now_ns(),
                });
            }
        }
        samples
    }
}

/// One group of an `EMQ.GROUPS` page: its fields and their values.
type GroupEntry = Vec<(String, redis::Value)>;

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
                for sample in limit.read(&nodes) {
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
