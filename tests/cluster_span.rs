//! A partitioned queue on a real 3-primary cluster (docs/cluster.md): its 12 partitions sit 4
//! on each primary and the queue is listed once; a claim blocked on one primary wakes for its
//! other partitions there and ends with `-MOVED` for one elsewhere; and a drain through a
//! slot migration and a failover loses nothing and runs nothing again once acknowledged.

use emq_harness as support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use echomq::protocol::partition::{name, route};
use redis::{cmd, Value};
use support::cluster::{Cluster, NodeInfo, Router};
use support::cluster_load::slot_of;
use support::*;

const WIDTH: u16 = 12;

/// The tests take it in turn: clusters started together in one process may pick the same free
/// ports (the harness reserves none), and a failover restarts a node on its own.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn partitions(queue: &str) -> Vec<String> {
    (0..WIDTH)
        .map(|i| String::from_utf8(name(queue.as_bytes(), i, WIDTH).expect("name")).expect("utf8"))
        .collect()
}

fn primaries(cluster: &Cluster) -> Vec<NodeInfo> {
    cluster
        .topology()
        .into_iter()
        .filter(|n| n.primary)
        .collect()
}

/// `EMQ.SPAN` every partition on its primary, then the queue.
fn span(router: &mut Router, queue: &str) -> Vec<String> {
    let names = partitions(queue);
    for (i, p) in names.iter().enumerate() {
        let mut c = cmd("EMQ.SPAN");
        c.arg(p).arg(WIDTH).arg("OF").arg(queue).arg("INDEX").arg(i);
        assert_eq!(router.call(slot_of(p), &c, 50), Ok(Value::Int(1)));
    }
    let mut c = cmd("EMQ.SPAN");
    c.arg(queue).arg(WIDTH);
    assert_eq!(router.call(slot_of(queue), &c, 50), Ok(Value::Int(1)));
    names
}

/// Enqueues jobs `ids` to the partitions their ids route to; with `wait`, each confirmed by a
/// replica (`WAIT 1`).
fn produce(router: &mut Router, names: &[String], ids: impl Iterator<Item = String>, wait: bool) {
    for id in ids {
        let p = &names[usize::from(route(WIDTH, id.as_bytes()))];
        let mut c = cmd("EMQ.ENQUEUE");
        c.arg(p).arg(&id).arg("x");
        assert_eq!(router.call(slot_of(p), &c, 100), Ok(Value::Int(1)), "{id}");
        if wait {
            let mut w = cmd("WAIT");
            w.arg(1).arg(5000);
            assert_eq!(router.call(slot_of(p), &w, 100), Ok(Value::Int(1)));
        }
    }
}

#[test]
fn twelve_partitions_sit_four_on_each_primary_and_the_queue_is_listed_once() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::start(3, 0);
    let ports: Vec<u16> = primaries(&cluster).iter().map(|n| n.port).collect();
    let mut router = Router::new(ports.clone());
    let names = span(&mut router, "orders");
    let mut per_primary: HashMap<u16, usize> = HashMap::new();
    for p in &names {
        *per_primary
            .entry(cluster.owner(slot_of(p)).port)
            .or_default() += 1;
    }
    assert_eq!(per_primary.len(), 3, "{per_primary:?}");
    assert!(per_primary.values().all(|n| *n == 4), "{per_primary:?}");
    produce(&mut router, &names, (1..=120).map(job_id), false);
    let mut listed = Vec::new();
    for port in &ports {
        let (_, page): (String, Vec<String>) = cmd("EMQ.QUEUES")
            .query(&mut cluster.node(*port).conn())
            .expect("queues");
        listed.extend(page);
    }
    assert_eq!(listed, vec!["orders".to_string()]);
    // The queue's own name refuses a job with its width, on the primary that owns it.
    let mut c = cmd("EMQ.ENQUEUE");
    c.arg("orders").arg("*").arg("x");
    let err = router.call(slot_of("orders"), &c, 10).expect_err("refused");
    assert_eq!(err.code(), Some("EMQSPANNED"));
}

#[test]
fn a_claim_blocked_once_a_primary_wakes_for_its_partitions_and_moves_for_one_elsewhere() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::start(3, 0);
    let ports: Vec<u16> = primaries(&cluster).iter().map(|n| n.port).collect();
    let mut router = Router::new(ports);
    let names = span(&mut router, "wake");
    let owner = |p: &String| cluster.owner(slot_of(p)).port;
    let home = owner(&names[0]);
    let here: Vec<&String> = names.iter().filter(|p| owner(p) == home).collect();
    let away = names.iter().find(|p| owner(p) != home).expect("elsewhere");
    let mut admin = cluster.node(home).conn();
    let before = blocked_clients(&mut admin);
    let mut worker = cluster.node(home).conn();
    let wake: Vec<String> = here[1..].iter().map(|p| p.to_string()).collect();
    let (first, others) = (here[0].clone(), wake.clone());
    let waiter = thread::spawn(move || {
        let mut c = cmd("EMQ.CLAIM");
        c.arg(&first)
            .arg("BLOCK")
            .arg(0)
            .arg("WAKE")
            .arg(others.len());
        for p in &others {
            c.arg(p);
        }
        c.query::<Value>(&mut worker)
    });
    assert!(wait_until(Duration::from_secs(5), || {
        blocked_clients(&mut admin) == before + 1
    }));
    let id = (1..)
        .map(job_id)
        .find(|id| names[usize::from(route(WIDTH, id.as_bytes()))] == *here[2])
        .expect("an id for the third partition here");
    produce(&mut router, &names, [id].into_iter(), false);
    assert_eq!(waiter.join().expect("waiter"), Ok(Value::Array(vec![])));
    // Naming a partition another primary owns ends the wait with a redirection there.
    let mut c = cmd("EMQ.CLAIM");
    c.arg(here[0].as_str())
        .arg("BLOCK")
        .arg(0)
        .arg("WAKE")
        .arg(1)
        .arg(away);
    let err = c
        .query::<Value>(&mut cluster.node(home).conn())
        .expect_err("redirected");
    assert_eq!(err.code(), Some("MOVED"), "{err}");
}

/// The acks the server took, by id, in order: each whether a replica confirmed it (`WAIT 1`).
type Acks = Arc<Mutex<HashMap<String, Vec<bool>>>>;

/// A worker in a thread: claims round the partitions with a short lease and acks each job,
/// confirmed by a replica, until stopped.
fn drain(
    ports: Vec<u16>,
    names: Vec<String>,
    acks: Acks,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut router = Router::new(ports);
        while !stop.load(Ordering::Relaxed) {
            for p in &names {
                let mut c = cmd("EMQ.CLAIM");
                c.arg(p).arg("COUNT").arg(5).arg("LEASE").arg(3000);
                let Ok(Value::Array(jobs)) = router.call(slot_of(p), &c, 20) else {
                    continue;
                };
                for job in jobs {
                    let Value::Array(f) = job else { continue };
                    let (Value::BulkString(id), Value::Int(token)) = (&f[0], &f[2]) else {
                        continue;
                    };
                    let id = String::from_utf8_lossy(id).to_string();
                    let mut a = cmd("EMQ.ACK");
                    a.arg(p).arg(&id).arg(*token);
                    if router.call(slot_of(p), &a, 20) != Ok(Value::Int(1)) {
                        continue;
                    }
                    // Briefly: a primary whose replica is not back yet (a restarted node's full
                    // sync) would hold each ack a second, and the drain past its deadline.
                    let mut w = cmd("WAIT");
                    w.arg(1).arg(100);
                    let confirmed = router.call(slot_of(p), &w, 20) == Ok(Value::Int(1));
                    acks.lock()
                        .expect("lock")
                        .entry(id)
                        .or_default()
                        .push(confirmed);
                }
            }
        }
    })
}

#[test]
fn a_drain_through_a_slot_migration_and_a_failover_loses_nothing_and_reruns_nothing_acked() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start(3, 1);
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let mut router = Router::new(ports.clone());
    let names = span(&mut router, "drained");
    let total = 1200;
    let ids: HashSet<String> = (1..=total).map(job_id).collect();
    produce(&mut router, &names, (1..=total).map(job_id), true);
    let acks: Acks = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = drain(ports, names.clone(), acks.clone(), stop.clone());
    let count = || acks.lock().expect("lock").len();
    let acked = |n: usize| wait_until(Duration::from_secs(60), || count() >= n);
    assert!(acked(200));
    // One partition's slot moves to another primary under the drain.
    let slot = slot_of(&names[5]);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let moved = cluster.move_slot(slot, &from, &to, || thread::sleep(Duration::from_millis(5)));
    assert!(moved > 0, "the partition's keys moved");
    assert!(count() < ids.len(), "the slot moved mid-drain");
    assert!(acked(500));
    // The primary of another partition is killed; its replica takes over.
    let victim = cluster.owner(slot_of(&names[9]));
    cluster.kill(victim.port);
    let at_kill = count();
    let promoted = wait_until(Duration::from_secs(30), || {
        cluster.topology().iter().any(|n| {
            n.primary
                && n.port != victim.port
                && n.slots
                    .iter()
                    .any(|(a, b)| (*a..=*b).contains(&slot_of(&names[9])))
        })
    });
    assert!(promoted, "a replica took over");
    cluster.restart(victim.port);
    assert!(acked(ids.len()), "every job was acknowledged");
    stop.store(true, Ordering::Relaxed);
    worker.join().expect("worker");
    let acks = acks.lock().expect("lock");
    let seen: HashSet<String> = acks.keys().cloned().collect();
    assert_eq!(seen, ids, "nothing lost, nothing foreign");
    // A job may run again after an ack a failover lost, never after one a replica confirmed.
    let again = |a: &Vec<bool>| a.iter().position(|c| *c).is_some_and(|i| i + 1 < a.len());
    let twice: Vec<&String> = acks
        .iter()
        .filter(|(_, a)| again(a))
        .map(|(id, _)| id)
        .collect();
    assert!(twice.is_empty(), "acknowledged twice: {twice:?}");
    assert!(
        at_kill < ids.len(),
        "the primary was killed mid-drain ({at_kill} acknowledged)"
    );
    println!(
        "RELIABILITY partitioned-drain jobs={} moved-keys={moved}",
        ids.len()
    );
}
