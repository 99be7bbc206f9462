//! A queue's slot moved by hand (`CLUSTER SETSLOT` and `MIGRATE`) on a real cluster: under a
//! load of enqueues, with a claimer blocked on it, and with its schedules, unique keys and
//! limits: nothing lost, nothing duplicated, nothing left behind.

use emq_harness as support;

use std::thread;
use std::time::Duration;

use redis::{cmd, Value};
use support::cluster::Cluster;
use support::cluster_load::*;
use support::*;

#[test]
fn resharding_a_busy_queue_loses_and_duplicates_nothing() {
    let cluster = Cluster::start(3, 1);
    let queue = "busy".to_string();
    let slot = slot_of(&queue);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let ports: Vec<u16> = cluster
        .topology()
        .iter()
        .filter(|n| n.primary)
        .map(|n| n.port)
        .collect();
    let load = Load::start(ports, &queue, false);
    assert!(load.reaches(500, Duration::from_secs(20)));

    // Move the slot by hand, letting the load run between batches: the migration happens
    // under it.
    let moved = cluster.move_slot(slot, &from, &to, || {
        thread::sleep(Duration::from_millis(10))
    });
    // Keep the load going on the new owner for a moment, then stop it.
    let at_switch = load.acked();
    assert!(load.reaches(at_switch + 200, Duration::from_secs(20)));
    let (tried, router, acked) = load.finish();
    assert!(moved > 2, "keys were migrated under load ({moved})");
    assert!(
        router.asked + router.retried > 0,
        "the load met the migration (ASK/TRYAGAIN)"
    );
    assert!(router.moved > 0, "and was moved to the new owner");
    assert!(acked.len() > 100, "the load kept going ({})", acked.len());
    let found = assert_moved_whole(&cluster, &queue, (&from, &to), tried, &acked);
    println!(
        "RELIABILITY resharding tried={tried} acknowledged={} found={found} migrated_keys={moved} ask={} tryagain={} moved={}",
        acked.len(),
        router.asked,
        router.retried,
        router.moved
    );
}

#[test]
fn a_claimer_blocked_on_a_queue_whose_slot_moves_is_sent_to_the_new_owner() {
    // The claim blocks on the queue's pending set, a key of the queue's slot, so when the slot
    // moves away the server ends the wait with MOVED, as for a native blocking command. The
    // delayed job moves with the slot and comes due on the new owner, whose timer learned the
    // queue from the import, and the claim sent there gets it.
    let cluster = Cluster::start(3, 0);
    let queue = "moving";
    let slot = slot_of(queue);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let mut src = cluster.node(from.port).conn();
    enqueue_delayed(&mut src, queue, &job_id(1), "due after the move", 4000);
    let claim = blocked_claim(&mut src, cluster.node(from.port).conn(), queue, 30_000);
    let moved = cluster.move_slot(slot, &from, &to, || {});
    assert_eq!(moved, 2, "the row and the schedule set");
    let reply = claim.join().expect("claim thread");
    assert_eq!(
        reply,
        Err(format!("MOVED {slot} 127.0.0.1:{}", to.port)),
        "the wait ends with a redirection"
    );
    assert!(cluster.node(from.port).is_alive());
    let mut dst = cluster.node(to.port).conn();
    assert_eq!(set_len(&mut dst, queue, "schedule"), 1, "not due yet");
    // As a cluster client would, retry the TRYAGAIN answered until the new owner's EchoMQ
    // has seen the slot settle.
    let mut claim = cmd("EMQ.CLAIM");
    claim.arg(queue).arg("BLOCK").arg(30_000);
    let mut jobs = None;
    let served = wait_until(Duration::from_secs(10), || {
        match claim.query::<Vec<(String, String, i64)>>(&mut dst) {
            Ok(got) => jobs = Some(got),
            Err(e) if e.code() == Some("TRYAGAIN") => {}
            Err(e) => panic!("claim on the new owner: {e}"),
        }
        jobs.is_some()
    });
    assert!(served, "the new owner settled the slot");
    assert_eq!(
        jobs,
        Some(vec![(job_id(1), "due after the move".to_string(), 1)])
    );
}

#[test]
fn a_queues_schedules_unique_keys_and_limits_move_with_its_slot() {
    // The cron and unique tables, the limits in `meta` and the rate window are keys of the
    // queue's slot: they move with it, and the new owner's timer, which learns them from the
    // import, fires the schedule from its next firing on.
    let cluster = Cluster::start(3, 0);
    let queue = "policies-move";
    let slot = slot_of(queue);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let mut src = cluster.node(from.port).conn();
    let _: i64 = cmd("EMQ.CRON")
        .arg(queue)
        .arg("tick")
        .arg("EVERY")
        .arg(300)
        .arg("p")
        .query(&mut src)
        .expect("EMQ.CRON");
    let _: Value = cmd("EMQ.LIMIT")
        .arg(queue)
        .arg("CONCURRENCY")
        .arg(1)
        .arg("RATE")
        .arg(100)
        .arg("PER")
        .arg(600_000)
        .query(&mut src)
        .expect("EMQ.LIMIT");
    let holder: String = cmd("EMQ.ENQUEUE")
        .arg(queue)
        .arg("*")
        .arg("held")
        .arg("UNIQUE")
        .arg("k")
        .query(&mut src)
        .expect("EMQ.ENQUEUE UNIQUE");
    assert!(until_more_than(&mut src, queue, "pending", 1));
    assert_eq!(
        claim(&mut src, queue, &["COUNT", "5"]).expect("jobs").len(),
        1
    );
    let last_before = |con: &mut Connection| -> i64 {
        let record: String = cmd("HGET")
            .arg(set_key(queue, "cron"))
            .arg("tick")
            .query(con)
            .expect("HGET");
        record.split('|').nth(1).expect("last").parse().expect("ms")
    };
    let moved = cluster.move_slot(slot, &from, &to, || {});
    assert!(
        moved >= 6,
        "rows, pending, active, meta, rate, unique and cron: {moved}"
    );
    let mut dst = cluster.node(to.port).conn();
    let before = last_before(&mut dst);
    assert!(
        wait_until(Duration::from_secs(10), || last_before(&mut dst) > before),
        "the new owner fires the schedule"
    );
    let fired = last_before(&mut dst);
    assert_eq!(
        (fired - before) % 300,
        0,
        "on its grid, from the next firing: {before} {fired}"
    );
    assert!(
        keys_of(&mut src, queue).is_empty(),
        "nothing left on the old owner"
    );
    let mut jobs = None;
    let settled = wait_until(Duration::from_secs(10), || {
        match cmd("EMQ.CLAIM")
            .arg(queue)
            .arg("COUNT")
            .arg(5)
            .query::<Vec<(String, String, i64)>>(&mut dst)
        {
            Ok(got) => jobs = Some(got),
            Err(e) if e.code() == Some("TRYAGAIN") => {}
            Err(e) => panic!("claim on the new owner: {e}"),
        }
        jobs.is_some()
    });
    assert!(settled, "the new owner settled the slot");
    assert_eq!(
        jobs,
        Some(vec![]),
        "the concurrency limit of 1 came along, one job active"
    );
    let again: String = cmd("EMQ.ENQUEUE")
        .arg(queue)
        .arg("*")
        .arg("again")
        .arg("UNIQUE")
        .arg("k")
        .query(&mut dst)
        .expect("EMQ.ENQUEUE UNIQUE");
    assert_eq!(again, holder, "the unique key came along");
    let stats = stats(&mut dst, queue);
    assert_eq!(stats.get("rate-used"), Some(&1), "{stats:?}");
}
