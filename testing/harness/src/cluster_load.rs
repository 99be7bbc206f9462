//! A load of enqueues over a cluster that follows its redirections, and the checks of where
//! its acknowledged jobs ended up; queues' slots and owners: shared by the cluster suites.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use redis::cmd;

use super::cluster::{Cluster, NodeInfo, Router};
use super::*;

pub fn slot_of(queue: &str) -> u16 {
    echomq::protocol::slot(queue.as_bytes())
}

/// A queue named `<prefix><n>` owned by a primary that owns none of `others`' slots.
pub fn queue_elsewhere(cluster: &Cluster, prefix: &str, others: &[&str]) -> String {
    let primaries: Vec<NodeInfo> = cluster
        .topology()
        .into_iter()
        .filter(|n| n.primary)
        .collect();
    let owner = |q: &str| {
        let slot = slot_of(q);
        primaries
            .iter()
            .find(|n| n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|n| n.port)
    };
    let taken: Vec<Option<u16>> = others.iter().map(|q| owner(q)).collect();
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|q| !taken.contains(&owner(q)))
        .expect("a queue on another primary")
}

/// `CLUSTER COUNTKEYSINSLOT` in the connection's database.
pub fn count_in_slot(con: &mut Connection, slot: u16) -> i64 {
    cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(con)
        .expect("count")
}

/// A producer in a thread of its own: enqueues ids 1, 2, ... into one queue through the
/// router until stopped, recording each acknowledged id.
pub struct Load {
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<(u64, Router)>,
}

impl Load {
    /// With `wait_replica`, an enqueue counts as acknowledged only once `WAIT 1` says a
    /// replica has it, as a careful producer would.
    pub fn start(ports: Vec<u16>, queue: &str, wait_replica: bool) -> Load {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (queue, acks, stopped) = (queue.to_string(), acked.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let mut router = Router::new(ports);
            let slot = slot_of(&queue);
            let mut tried = 0;
            for i in 1.. {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                tried += 1;
                let id = job_id(i);
                let mut c = cmd("EMQ.ENQUEUE");
                c.arg(&queue).arg(&id).arg(format!("payload {i}"));
                let Ok(Value::Int(_)) = router.call(slot, &c, 1000) else {
                    continue;
                };
                if wait_replica {
                    let mut w = cmd("WAIT");
                    w.arg(1).arg(1000);
                    match router.call(slot, &w, 5) {
                        Ok(Value::Int(n)) if n >= 1 => {}
                        _ => continue,
                    }
                }
                acks.lock().expect("lock").push(id);
            }
            (tried, router)
        });
        Load {
            acked,
            stop,
            thread,
        }
    }

    pub fn acked(&self) -> usize {
        self.acked.lock().expect("lock").len()
    }

    /// Whether `n` enqueues were acknowledged within `timeout`.
    pub fn reaches(&self, n: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.acked() >= n)
    }

    /// Stops the producer: how many enqueues it tried, its router, the acknowledged ids.
    pub fn finish(self) -> (u64, Router, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let (tried, router) = self.thread.join().expect("load");
        let acked = self.acked.lock().expect("lock").clone();
        (tried, router, acked)
    }
}

pub fn assert_present(cluster: &Cluster, queue: &str, acked: &[String]) -> usize {
    let owner = cluster.owner(slot_of(queue));
    let mut con = cluster.node(owner.port).conn();
    let members: HashSet<String> = set_members(&mut con, queue, "pending")
        .into_iter()
        .collect();
    let mut found = 0;
    for id in acked {
        let exists: i64 = cmd("EXISTS")
            .arg(row_key(queue, id))
            .query(&mut con)
            .expect("exists");
        if exists == 1 && members.contains(id) {
            found += 1;
        }
    }
    found
}

/// After `queue`'s slot moved `from` one node `to` another under a [`Load`] that tried
/// `tried` enqueues: every acknowledged job is on the new owner once, with its row, and nothing
/// is left behind. Returns how many acknowledged jobs were found.
pub fn assert_moved_whole(
    cluster: &Cluster,
    queue: &str,
    (from, to): (&NodeInfo, &NodeInfo),
    tried: u64,
    acked: &[String],
) -> usize {
    let slot = slot_of(queue);
    assert_eq!(cluster.owner(slot).port, to.port);
    let found = assert_present(cluster, queue, acked);
    assert_eq!(
        found,
        acked.len(),
        "every acknowledged job is on the new owner"
    );
    let unique: HashSet<&String> = acked.iter().collect();
    assert_eq!(unique.len(), acked.len(), "each job acknowledged once");
    // A job whose reply was lost in the move may be there too, but only once, with its row.
    let card = set_len(&mut cluster.node(to.port).conn(), queue, "pending");
    assert!(
        (acked.len()..=tried as usize).contains(&(card as usize)),
        "{card} pending for {} acknowledged of {tried} tried",
        acked.len()
    );
    assert_eq!(
        count_in_slot(&mut cluster.node(to.port).conn(), slot),
        card + 1,
        "one row per pending job, and the pending set"
    );
    assert_eq!(
        count_in_slot(&mut cluster.node(from.port).conn(), slot),
        0,
        "nothing left behind"
    );
    found
}
