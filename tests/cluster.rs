//! EchoMQ on a real Valkey Cluster (3 primaries, most tests with a replica each, every node
//! with the module): routing, resharding under load, a blocked claim whose slot moves,
//! failover under load, a manual failover, and the lifecycle's timers per node; on Valkey 9.0
//! and later, atomic slot migrations and queues in several databases (ignored by `make test`,
//! run by `make test-valkey-latest`).

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use redis::{cmd, Value};
use support::cluster::{Cluster, NodeInfo, Router};
use support::*;

fn slot_of(queue: &str) -> u16 {
    echomq::protocol::slot(queue.as_bytes())
}

/// `CLUSTER COUNTKEYSINSLOT` in the connection's database.
fn count_in_slot(con: &mut Connection, slot: u16) -> i64 {
    cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(con)
        .expect("count")
}

#[test]
fn routing_moved_and_key_specs() {
    let cluster = Cluster::start(3, 1);
    let mut client = cluster.client();
    let queues: Vec<String> = (0..200).map(|i| format!("q{i}")).collect();
    for (i, q) in queues.iter().enumerate() {
        assert_eq!(enqueue(&mut client, q, &job_id(i as u64 + 1), "x"), 1);
    }
    let topology = cluster.topology();
    let primaries: Vec<_> = topology.iter().filter(|n| n.primary).collect();
    assert_eq!(primaries.len(), 3);
    for (i, q) in queues.iter().enumerate() {
        let slot = slot_of(q);
        let owner = cluster.owner(slot);
        // The row and the pending set, both in the queue's slot, on its owner only.
        assert_eq!(
            count_in_slot(&mut cluster.node(owner.port).conn(), slot),
            2,
            "{q} on its owner"
        );
        for other in primaries.iter().filter(|n| n.port != owner.port) {
            assert_eq!(
                count_in_slot(&mut cluster.node(other.port).conn(), slot),
                0,
                "{q} elsewhere"
            );
        }
        let state = job_state(
            &mut cluster.node(owner.port).conn(),
            q,
            &job_id(i as u64 + 1),
        );
        assert_eq!(state.as_deref(), Some("pending"));
    }

    // A node asked for a queue it does not own answers MOVED, before the handler runs.
    let q = "orders";
    let owner = cluster.owner(slot_of(q));
    let other = primaries
        .iter()
        .find(|n| n.port != owner.port)
        .expect("another primary");
    let mut con = cluster.node(other.port).conn();
    let before: i64 = cmd("DBSIZE").query(&mut con).expect("dbsize");
    let err = expect_err(&mut con, cmd("EMQ.ENQUEUE").arg(q).arg(job_id(1)).arg("x"));
    assert_eq!(
        err,
        format!("MOVED {} 127.0.0.1:{}", slot_of(q), owner.port)
    );
    let after: i64 = cmd("DBSIZE").query(&mut con).expect("dbsize");
    assert_eq!(before, after, "nothing written on the wrong node");

    // Clients route by the key spec COMMAND INFO exposes.
    let info: Value = cmd("COMMAND")
        .arg("INFO")
        .arg("emq.enqueue")
        .query(&mut con)
        .expect("info");
    let text = format!("{info:?}");
    assert!(
        text.contains("not_key") && text.contains("begin_search"),
        "{text}"
    );
    let err = expect_err(
        &mut con,
        cmd("COMMAND")
            .arg("GETKEYS")
            .arg("EMQ.ENQUEUE")
            .arg(q)
            .arg(job_id(1))
            .arg("x"),
    );
    // A NotKey spec routes, but names no key: GETKEYS says so.
    assert_eq!(err, "ERR The command has no key arguments");

    // valkey-cli -c follows the redirection.
    let out = std::process::Command::new(support::cluster::cli_binary())
        .args([
            "-c",
            "-p",
            &other.port.to_string(),
            "EMQ.ENQUEUE",
            q,
            &job_id(2),
            "via cli",
        ])
        .output()
        .expect("valkey-cli -c");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");

    // A replica of the owner serves EMQ.STATS once the client says READONLY, as for a native
    // read, and redirects the rest: before READONLY, a write, a queue of another primary.
    let mut r = cluster.node(cluster.replica_of(owner.port)).conn();
    let moved = format!("MOVED {} 127.0.0.1:{}", slot_of(q), owner.port);
    assert_eq!(expect_err(&mut r, cmd("EMQ.STATS").arg(q)), moved);
    let _: () = cmd("READONLY").query(&mut r).expect("readonly");
    let pending = |r: &mut Connection| -> i64 { stats(r, q).get("pending").copied().unwrap_or(-1) };
    assert!(
        wait_until(Duration::from_secs(10), || pending(&mut r) == 1),
        "the replica's copy: {}",
        pending(&mut r)
    );
    let err = expect_err(&mut r, cmd("EMQ.ENQUEUE").arg(q).arg(job_id(3)).arg("x"));
    assert_eq!(err, moved, "a write goes to the owner");
    let elsewhere = (0..)
        .map(|i| format!("elsewhere{i}"))
        .find(|name| cluster.owner(slot_of(name)).port != owner.port)
        .expect("a queue of another primary");
    let err = expect_err(&mut r, cmd("EMQ.STATS").arg(&elsewhere));
    assert!(err.starts_with("MOVED "), "{err}");
}

/// A producer in a thread of its own: enqueues ids 1, 2, ... into one queue through the
/// router until stopped, recording each acknowledged id.
struct Load {
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<(u64, Router)>,
}

impl Load {
    /// With `wait_replica`, an enqueue counts as acknowledged only once `WAIT 1` says a
    /// replica has it, as a careful producer would.
    fn start(ports: Vec<u16>, queue: &str, wait_replica: bool) -> Load {
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

    fn acked(&self) -> usize {
        self.acked.lock().expect("lock").len()
    }

    /// Whether `n` enqueues were acknowledged within `timeout`.
    fn reaches(&self, n: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.acked() >= n)
    }

    /// Stops the producer: how many enqueues it tried, its router, the acknowledged ids.
    fn finish(self) -> (u64, Router, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let (tried, router) = self.thread.join().expect("load");
        let acked = self.acked.lock().expect("lock").clone();
        (tried, router, acked)
    }
}

fn assert_present(cluster: &Cluster, queue: &str, acked: &[String]) -> usize {
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

/// After `queue`'s slot moved `from` one node `to` another under a [`Load`] that tried
/// `tried` enqueues: every acknowledged job is on the new owner once, with its row, and nothing
/// is left behind. Returns how many acknowledged jobs were found.
fn assert_moved_whole(
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

#[test]
fn failover_loses_no_job_acknowledged_by_a_replica() {
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
fn the_lifecycle_runs_on_every_primary() {
    let cluster = Cluster::start(3, 1);
    let mut client = cluster.client();
    // Queues spread over all three primaries; each one's timer promotes its own.
    let queues: Vec<String> = (0..30).map(|i| format!("life{i}")).collect();
    let owners: HashSet<u16> = queues
        .iter()
        .map(|q| cluster.owner(slot_of(q)).port)
        .collect();
    assert_eq!(owners.len(), 3, "the queues cover every primary");
    for q in &queues {
        enqueue_delayed(&mut client, q, &job_id(1), "later", 200);
        enqueue(&mut client, q, &job_id(2), "now");
        let jobs = claim(&mut client, q, &["LEASE", "150"]);
        assert_eq!(jobs.map(|j| j.len()), Some(1));
    }
    for q in &queues {
        // Both the due job and the expired lease come back, without any claim promoting them.
        let ready = wait_until(Duration::from_secs(10), || {
            stats(&mut client, q).get("pending") == Some(&2)
        });
        assert!(ready, "{q} promoted by its node's timer");
    }
    // Each primary counts what its own timer moved: a due job and an expired lease a queue.
    let moved: i64 = cluster
        .topology()
        .iter()
        .filter(|n| n.primary)
        .map(|n| info_int(&mut cluster.node(n.port).conn(), "emq", "emq_promoted"))
        .sum();
    assert_eq!(moved, 2 * queues.len() as i64);
    // Replicas with the module hold the same data and never run the timer.
    for node in cluster.topology().iter().filter(|n| !n.primary) {
        let mut con = cluster.node(node.port).conn();
        let promoted = info_field(&mut con, "emq", "emq_promoted").expect("info");
        assert_eq!(promoted, "0");
    }
}

#[test]
fn a_manual_failover_hands_a_queue_and_its_timer_to_the_replica() {
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

/// Whether the server migrates slots atomically (`CLUSTER MIGRATESLOTS`, Valkey 9.0).
fn has_atomic_migration(con: &mut Connection) -> bool {
    let info: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("CLUSTER|MIGRATESLOTS")
        .query(con)
        .expect("COMMAND INFO");
    !matches!(info.as_slice(), [] | [Value::Nil])
}

/// Fails the test, saying why, where the server has no atomic slot migration: such a test is
/// `#[ignore]`d in `make test` (Valkey 8.0) and run by `make test-valkey-latest`.
fn require_atomic_migration(con: &mut Connection) {
    assert!(
        has_atomic_migration(con),
        "{} has no CLUSTER MIGRATESLOTS (Valkey 9.0 and later): this test cannot run on it",
        server_binary()
    );
}

/// The state of the newest migration `CLUSTER GETSLOTMIGRATIONS` lists on `con`'s node.
fn migration_state(con: &mut Connection) -> String {
    let jobs: Vec<Vec<Value>> = cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(con)
        .expect("GETSLOTMIGRATIONS");
    let fields = jobs.first().expect("a migration");
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| text(&kv[0]) == name)
            .map(|kv| text(&kv[1]))
            .unwrap_or_default()
    };
    format!("{} {}", field("state"), field("message"))
}

/// `CLUSTER MIGRATESLOTS` of `slot` from `from` to `to`, sent to `from`.
fn migrate_atomically(cluster: &Cluster, slot: u16, from: &NodeInfo, to: &NodeInfo) {
    let _: () = cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(&to.id)
        .query(&mut cluster.node(from.port).conn())
        .expect("CLUSTER MIGRATESLOTS");
}

/// Waits until the newest migration on `port` reaches `state` (a failure fails the test).
fn wait_migration(cluster: &Cluster, port: u16, state: &str) {
    let mut con = cluster.node(port).conn();
    let mut last = String::new();
    let reached = wait_until(Duration::from_secs(20), || {
        last = migration_state(&mut con);
        assert!(
            !last.starts_with("failed") && !last.starts_with("cancelled"),
            "the migration ended: {last}"
        );
        last.starts_with(state)
    });
    assert!(reached, "the migration reached {state}: it is {last}");
}

/// Enqueues `id` on `con`'s node and claims it with a lease of `lease_ms`.
fn leased_job(con: &mut Connection, queue: &str, id: &str, lease_ms: u64) {
    assert_eq!(enqueue(con, queue, id, "leased"), 1);
    let claimed = claim(con, queue, &["LEASE", &lease_ms.to_string()]);
    assert_eq!(claimed, Some(vec![(id.to_string(), b"leased".to_vec(), 1)]));
}

fn wait_effects_gate_closed(con: &mut Connection) {
    assert!(
        wait_until(Duration::from_secs(10), || info_int(
            con,
            "emq",
            "emq_effects_replicated"
        ) == 0),
        "a primary without replicas stops replicating EchoMQ's effects"
    );
}

#[test]
#[ignore = "needs Valkey 9.0+ (CLUSTER MIGRATESLOTS); make test-valkey-latest runs it"]
fn an_atomic_slot_migration_streams_echomqs_writes_and_holds_the_new_owners_timer() {
    // Valkey 9.0's `CLUSTER MIGRATESLOTS`: the source keeps its slot and streams every write in
    // it to the target, which holds the keys hidden until ownership changes at once. Here the
    // source is kept from finishing (`DEBUG SLOTMIGRATION PREVENT-PAUSE`), so the migration
    // stays in its streaming phase while jobs are enqueued, come due and lose their lease.
    let cluster = Cluster::start(3, 0);
    require_atomic_migration(&mut cluster.nodes[0].conn());
    let queue = "atomic";
    let slot = slot_of(queue);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let mut src = cluster.node(from.port).conn();
    let mut dst = cluster.node(to.port).conn();
    // No replica, no backlog: EchoMQ has stopped replicating its effects, as the server has.
    wait_effects_gate_closed(&mut src);
    let (leased, delayed, streamed) = (job_id(1), job_id(2), job_id(3));
    leased_job(&mut src, queue, &leased, 1500);
    enqueue_delayed(&mut src, queue, &delayed, "delayed", 1500);
    let _: () = cmd("DEBUG")
        .arg("SLOTMIGRATION")
        .arg("PREVENT-PAUSE")
        .arg(1)
        .query(&mut src)
        .expect("DEBUG SLOTMIGRATION");
    migrate_atomically(&cluster, slot, &from, &to);
    wait_migration(&cluster, from.port, "waiting-to-pause");

    // Mid-migration: the source serves the queue, and an enqueue reaches the target through
    // the stream, which carries only what is propagated.
    assert_eq!(
        info_int(&mut src, "emq", "emq_effects_replicated"),
        1,
        "an export has EchoMQ's effects replicated"
    );
    assert_eq!(enqueue(&mut src, queue, &streamed, "streamed"), 1);
    assert!(
        info_int(&mut dst, "emq", "emq_watched_queues") >= 1,
        "the target learned the queue from the import"
    );
    // The lease runs out and the delayed job comes due while the keys are on both nodes. With
    // the source's writes paused, its timer moves nothing, so nothing from the stream changes
    // them either: the target's timer, which knows the queue, must leave them alone.
    let _: () = cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut src)
        .expect("CLIENT PAUSE");
    thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        (
            set_len(&mut src, queue, "schedule"),
            set_len(&mut src, queue, "active")
        ),
        (1, 1),
        "due, but not moved while writes are paused"
    );
    assert_eq!(
        info_int(&mut dst, "emq", "emq_promoted"),
        0,
        "the target's timer wrote nothing to keys it does not own yet"
    );
    // The owner's timer moves them, and the stream carries its writes.
    let _: () = cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut src)
        .expect("CLIENT UNPAUSE");
    assert!(
        wait_until(Duration::from_secs(10), || set_len(
            &mut src, queue, "pending"
        ) == 3
            && set_len(&mut src, queue, "schedule") == 0
            && set_len(&mut src, queue, "active") == 0),
        "the source's timer promoted and took back the lease"
    );
    assert_eq!(info_int(&mut dst, "emq", "emq_promoted"), 0);

    let _: () = cmd("DEBUG")
        .arg("SLOTMIGRATION")
        .arg("PREVENT-PAUSE")
        .arg(0)
        .query(&mut src)
        .expect("DEBUG SLOTMIGRATION");
    wait_migration(&cluster, from.port, "success");
    assert_eq!(cluster.owner(slot).port, to.port);
    assert_eq!(
        count_in_slot(&mut cluster.node(from.port).conn(), slot),
        0,
        "nothing left behind"
    );
    assert_eq!(
        set_members(&mut dst, queue, "pending"),
        vec![leased.clone(), delayed.clone(), streamed.clone()],
        "every job on the new owner, pending"
    );
    for (id, state, attempts) in [
        (&leased, "pending", "1"),
        (&delayed, "pending", "0"),
        (&streamed, "pending", "0"),
    ] {
        let row: Vec<String> = cmd("HMGET")
            .arg(row_key(queue, id))
            .arg("state")
            .arg("attempts")
            .query(&mut dst)
            .expect("row");
        assert_eq!(row, vec![state, attempts], "{id}");
    }
    let log = cluster.node(to.port).log();
    for line in [
        format!("EchoMQ: slots {slot}-{slot} are being imported"),
        format!("EchoMQ: slots {slot}-{slot} are settled"),
    ] {
        assert!(log.contains(&line), "{line} in the target's log:\n{log}");
    }
    // The new owner serves the queue at once.
    let jobs = claim(&mut dst, queue, &["COUNT", "3"]);
    assert_eq!(jobs.map(|j| j.len()), Some(3), "claimed on the new owner");
}

#[test]
#[ignore = "needs Valkey 9.0+ (CLUSTER MIGRATESLOTS); make test-valkey-latest runs it"]
fn an_atomic_slot_migration_of_a_busy_queue_loses_and_duplicates_nothing() {
    // Primaries alone: the source replicates EchoMQ's effects for the export only.
    atomic_migration_under_load(0);
}

#[test]
#[ignore = "needs Valkey 9.0+ (CLUSTER MIGRATESLOTS); make test-valkey-latest runs it"]
fn an_atomic_slot_migration_with_replicas_reaches_the_new_owners_replica() {
    atomic_migration_under_load(1);
}

fn atomic_migration_under_load(replicas: usize) {
    let cluster = Cluster::start(3, replicas);
    require_atomic_migration(&mut cluster.nodes[0].conn());
    let queue = "busy".to_string();
    let slot = slot_of(&queue);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    if replicas == 0 {
        wait_effects_gate_closed(&mut cluster.node(from.port).conn());
    }
    let ports: Vec<u16> = cluster.topology().iter().map(|n| n.port).collect();
    let load = Load::start(ports, &queue, false);
    assert!(load.reaches(500, Duration::from_secs(20)));
    migrate_atomically(&cluster, slot, &from, &to);
    wait_migration(&cluster, from.port, "success");
    let at_switch = load.acked();
    assert!(load.reaches(at_switch + 200, Duration::from_secs(20)));
    let (tried, router, acked) = load.finish();
    assert!(router.moved > 0, "the load was moved to the new owner");
    let found = assert_moved_whole(&cluster, &queue, (&from, &to), tried, &acked);
    println!(
        "RELIABILITY atomic-migration replicas={replicas} tried={tried} acknowledged={} found={found} moved={}",
        acked.len(),
        router.moved
    );
    if replicas > 0 {
        // The new owner's replica holds the same queue, the imported part included.
        let card = set_len(&mut cluster.node(to.port).conn(), &queue, "pending");
        let mut r = cluster.node(cluster.replica_of(to.port)).conn();
        let _: () = cmd("READONLY").query(&mut r).expect("READONLY");
        assert!(
            wait_until(Duration::from_secs(10), || set_len(
                &mut r, &queue, "pending"
            ) == card),
            "the new owner's replica has all {card} jobs"
        );
    }
}

#[test]
#[ignore = "needs Valkey 9.0+ (databases in cluster mode); make test-valkey-latest runs it"]
fn queues_in_several_databases_of_a_cluster_come_due_and_move_with_their_slot() {
    // Valkey 9.0 lets a cluster hold several databases (`cluster-databases`), and an atomic
    // migration moves a slot's keys in all of them. Each database's queue keeps its own timed
    // jobs, on the owner before the move and on the new owner after it.
    // A server that does not know `cluster-databases` could not start this cluster at all.
    let probe = Server::start(Options::without_module());
    let known: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("cluster-databases")
        .query(&mut probe.conn())
        .expect("CONFIG GET");
    assert!(
        !known.is_empty(),
        "{} has no databases in cluster mode (Valkey 9.0 and later): this test cannot run on it",
        server_binary()
    );
    require_atomic_migration(&mut probe.conn());
    drop(probe);
    let cluster = Cluster::start_with(3, 0, &[("cluster-databases", "4")]);
    let queue = "multi";
    let slot = slot_of(queue);
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let mut src = cluster.node(from.port).conn();
    in_db(&mut src, 2);
    leased_job(&mut src, queue, &job_id(1), 300);
    enqueue_delayed(&mut src, queue, &job_id(2), "due soon", 300);
    in_db(&mut src, 3);
    enqueue_delayed(&mut src, queue, &job_id(3), "due after the move", 3000);
    in_db(&mut src, 2);
    assert!(
        wait_until(Duration::from_secs(10), || set_len(
            &mut src, queue, "pending"
        ) == 2),
        "the owner's timer promoted and took back the lease in database 2"
    );
    in_db(&mut src, 3);
    assert_eq!(set_len(&mut src, queue, "schedule"), 1, "not due yet");

    migrate_atomically(&cluster, slot, &from, &to);
    wait_migration(&cluster, from.port, "success");
    let mut dst = cluster.node(to.port).conn();
    in_db(&mut dst, 3);
    assert!(
        wait_until(Duration::from_secs(10), || set_len(
            &mut dst, queue, "pending"
        ) == 1),
        "the new owner's timer promoted the job of database 3"
    );
    in_db(&mut dst, 2);
    assert_eq!(
        set_members(&mut dst, queue, "pending"),
        vec![job_id(1), job_id(2)]
    );
    for db in [0, 2, 3] {
        in_db(&mut src, db);
        assert_eq!(
            count_in_slot(&mut src, slot),
            0,
            "nothing left behind in database {db}"
        );
    }
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
