//! Failover on a real cluster: a primary killed under load loses no job a replica confirmed,
//! and a manual failover hands a queue and its timer to the replica.

use emq_harness as support;

use std::sync::Mutex;
use std::time::Duration;

use redis::cmd;
use support::cluster::Cluster;
use support::cluster_load::*;
use support::*;

/// The tests take it in turn: one kills and restarts a node on its own port, which the other's
/// cluster, started meanwhile, could take for one of its nodes (or their bus ports), and the
/// two clusters then meet.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn failover_loses_no_job_acknowledged_by_a_replica() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start(3, 1);
    let queue = "orders".to_string();
    let slot = slot_of(&queue);
    let victim = cluster.owner(slot);
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let load = Load::start(ports, &queue, true);
    assert!(load.reaches(300, Duration::from_secs(20)));
    cluster.kill(victim.port);
    // A replica is promoted; the load goes on against it.
    let promoted = wait_until(Duration::from_secs(30), || {
        cluster.topology().iter().any(|n| {
            n.primary
                && n.port != victim.port
                && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
        })
    });
    assert!(promoted, "a replica took over the slot");
    // The old primary comes back as a replica of the new one, so WAIT can acknowledge again.
    cluster.restart(victim.port);
    let after_kill = load.acked();
    assert!(
        load.reaches(after_kill + 200, Duration::from_secs(60)),
        "acknowledged enqueues resumed on the new primary"
    );
    let (tried, _, acked) = load.finish();
    let found = assert_present(&cluster, &queue, &acked);
    println!(
        "RELIABILITY failover tried={tried} acknowledged={} found={found} lost={}",
        acked.len(),
        acked.len() - found
    );
    assert_eq!(found, acked.len(), "0 acknowledged jobs lost");
}

#[test]
fn a_manual_failover_hands_a_queue_and_its_timer_to_the_replica() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // `CLUSTER FAILOVER` pauses the owner's writes while its replica catches up, then swaps
    // the roles, while the queue's delayed jobs come due and its leases run out. The old
    // owner stays up (nothing may be propagated in that pause), and the new owner's timer
    // finishes the work: every job ends up pending exactly once.
    let cluster = Cluster::start(3, 1);
    let queue = "handover";
    let slot = slot_of(queue);
    let old = cluster.owner(slot).port;
    let new = cluster.replica_of(old);
    let mut p = cluster.node(old).conn();
    let mut r = cluster.node(new).conn();
    // Jobs coming due through the whole failover, so the timer has work on every tick.
    let expected = jobs_coming_due(&mut p, queue);
    let _: () = cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut r)
        .expect("CLUSTER FAILOVER");
    let handed_over = wait_until(Duration::from_secs(30), || {
        cluster
            .try_owner(slot)
            .is_some_and(|owner| owner.port == new)
    });
    assert!(handed_over, "the replica owns the slot");
    assert!(
        cluster.node(old).is_alive(),
        "the old owner is up: {}",
        cluster.node(old).log_tail()
    );
    let settled = wait_until(Duration::from_secs(10), || {
        set_len(&mut r, queue, "pending") == expected.len() as i64
    });
    assert!(
        settled,
        "the new owner promoted what came due and reclaimed the leases"
    );
    assert_eq!(set_len(&mut r, queue, "schedule"), 0);
    assert_eq!(set_len(&mut r, queue, "active"), 0);
    assert_eq!(
        set_members(&mut r, queue, "pending"),
        expected,
        "every job once, in id order"
    );
}
