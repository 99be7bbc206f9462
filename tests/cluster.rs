//! EchoMQ on a real Valkey Cluster (3 primaries with a replica each, every node with the
//! module): routing by the queue, `MOVED` and key specs, replicas' reads, and the lifecycle's
//! timers on every primary. Resharding, failover and Valkey 9's atomic migrations have suites
//! of their own (`cluster_resharding`, `cluster_failover`, `cluster_atomic`).

use emq_harness as support;

use std::collections::HashSet;
use std::time::Duration;

use redis::{cmd, Value};
use support::cluster::Cluster;
use support::cluster_load::*;
use support::*;

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
