//! Valkey 9.0's atomic slot migrations (`CLUSTER MIGRATESLOTS`) and queues in several
//! databases of a cluster: ignored by `make test` (Valkey 8.0), run by
//! `make test-valkey-latest`.

use emq_harness as support;

use std::thread;
use std::time::Duration;

use redis::{cmd, Value};
use support::cluster::{Cluster, NodeInfo};
use support::cluster_load::*;
use support::*;

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
    // stays in its streaming phase while jobs are enqueued, come due and lose their lease. The
    // nodes learn every write as it happens, so the target knows the queue mid-import (by
    // default it learns it from the scan at the import's end) and must still leave it be.
    let cluster = Cluster::start_with(3, 0, &[("emq.learn-foreign-writes", "yes")]);
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
