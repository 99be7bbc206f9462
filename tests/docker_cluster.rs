//! Smoke tests against the compose cluster (`make docker-test` starts it and sets
//! ECHOMQ_CLUSTER_PORTS): routing, MOVED, and enqueue across 50 queues.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

fn ports() -> Vec<u16> {
    std::env::var("ECHOMQ_CLUSTER_PORTS")
        .expect("ECHOMQ_CLUSTER_PORTS names the compose cluster's ports")
        .split(',')
        .map(|p| p.parse().expect("a port"))
        .collect()
}

fn conn(port: u16) -> Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect")
}

/// The port of the primary that owns `slot`, from CLUSTER SLOTS.
fn owner(port: u16, slot: i64) -> u16 {
    // Each range: [start, end, [ip, port, id, ...] (the primary), replicas...].
    let ranges: Vec<Vec<redis::Value>> = cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut conn(port))
        .expect("slots");
    ranges
        .iter()
        .find_map(|r| match (r.first(), r.get(1), r.get(2)) {
            (
                Some(redis::Value::Int(a)),
                Some(redis::Value::Int(b)),
                Some(redis::Value::Array(node)),
            ) if (*a..=*b).contains(&slot) => match node.get(1) {
                Some(redis::Value::Int(p)) => u16::try_from(*p).ok(),
                _ => None,
            },
            _ => None,
        })
        .expect("an owner for the slot")
}

#[test]
#[ignore = "run by make docker-test against the compose cluster"]
fn the_compose_cluster_routes_enqueues_across_50_queues() {
    let ports = ports();
    let mut client = redis::cluster::ClusterClient::new(
        ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect::<Vec<_>>(),
    )
    .expect("cluster client")
    .get_connection()
    .expect("cluster connection");
    let run = unique_queue("docker");
    for i in 0..50u64 {
        let q = format!("{run}-{i}");
        assert_eq!(enqueue(&mut client, &q, &job_id(i + 1), "x"), 1);
        let stats = stats(&mut client, &q);
        assert_eq!(stats.get("pending"), Some(&1), "{q}: {stats:?}");
        // The job is on the owner of the queue's slot.
        let slot: i64 = cmd("EMQ.SLOT").arg(&q).query(&mut client).expect("slot");
        let exists: i64 = cmd("EXISTS")
            .arg(row_key(&q, &job_id(i + 1)))
            .query(&mut conn(owner(ports[0], slot)))
            .expect("exists");
        assert_eq!(exists, 1);
    }
}

#[test]
#[ignore = "run by make docker-test against the compose cluster"]
fn a_compose_node_answers_moved_for_a_queue_it_does_not_own() {
    let ports = ports();
    let q = unique_queue("moved");
    let slot: i64 = cmd("EMQ.SLOT")
        .arg(&q)
        .query(&mut conn(ports[0]))
        .expect("slot");
    let owner = owner(ports[0], slot);
    let primaries: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|p| {
            let role: Vec<redis::Value> = cmd("ROLE").query(&mut conn(*p)).expect("role");
            format!("{:?}", role.first()).contains("master")
        })
        .collect();
    let other = primaries
        .into_iter()
        .find(|p| *p != owner)
        .expect("another primary");
    let err = expect_err(
        &mut conn(other),
        cmd("EMQ.ENQUEUE").arg(&q).arg(job_id(1)).arg("x"),
    );
    assert_eq!(err, format!("MOVED {slot} 127.0.0.1:{owner}"));
    assert_eq!(
        enqueue(&mut conn(owner), &q, &job_id(1), "x"),
        1,
        "the owner accepts"
    );
}
