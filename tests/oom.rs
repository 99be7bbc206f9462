//! Under maxmemory, EMQ.ENQUEUE (`write deny-oom`) is refused and writes nothing, while the
//! pure commands keep answering.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

#[test]
fn maxmemory_refuses_the_write_and_writes_nothing() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    config_set(&mut con, "maxmemory", "1");
    let err = expect_err(
        &mut con,
        cmd("EMQ.ENQUEUE").arg("orders").arg(job_id(1)).arg("x"),
    );
    assert!(err.starts_with("OOM"), "{err}");
    config_set(&mut con, "maxmemory", "0");
    let n: i64 = cmd("DBSIZE").query(&mut con).expect("dbsize");
    assert_eq!(n, 0, "nothing written under OOM");
    config_set(&mut con, "maxmemory", "1");
    let slot: i64 = cmd("EMQ.SLOT")
        .arg("orders")
        .query(&mut con)
        .expect("pure commands still answer");
    assert_eq!(slot, 105);
}

#[test]
fn every_lifecycle_write_is_refused_under_maxmemory() {
    let server = Server::start(Options::default().arg("enable-debug-command", "local"));
    let mut con = server.conn();
    enqueue(&mut con, "orders", &job_id(1), "x");
    claim(&mut con, "orders", &[]);
    enqueue(&mut con, "orders", &job_id(2), "y");
    let before = digest(&mut con);
    config_set(&mut con, "maxmemory", "1");
    for c in [
        cmd("EMQ.MENQUEUE")
            .arg("orders")
            .arg(job_id(3))
            .arg("z")
            .clone(),
        cmd("EMQ.CLAIM").arg("orders").clone(),
        cmd("EMQ.RENEW")
            .arg("orders")
            .arg(job_id(1))
            .arg(1)
            .arg(1000)
            .clone(),
        cmd("EMQ.ACK").arg("orders").arg(job_id(1)).arg(1).clone(),
        cmd("EMQ.FAIL").arg("orders").arg(job_id(1)).arg(1).clone(),
        cmd("EMQ.CANCEL").arg("orders").arg(job_id(2)).clone(),
        cmd("EMQ.REQUEUE").arg("orders").arg(job_id(1)).clone(),
    ] {
        let err = expect_err(&mut con, &c);
        assert!(err.starts_with("OOM"), "{err}");
    }
    // Reads go on.
    let stats = stats(&mut con, "orders");
    assert_eq!(stats.get("active"), Some(&1), "{stats:?}");
    config_set(&mut con, "maxmemory", "0");
    let after = digest(&mut con);
    assert_eq!(before, after, "nothing was written");
}

#[test]
fn a_claimer_woken_under_maxmemory_is_refused_as_a_new_claim_would_be() {
    // The timer still promotes a due job past maxmemory, which wakes a blocked claimer. Its
    // claim would write, so it gets the OOM error a new `EMQ.CLAIM` gets, as a native blocked
    // command woken then does; the job stays pending.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let blocked = blocked_claim(&mut con, server.conn(), "orders", 5_000);
    enqueue_delayed(&mut con, "orders", &job_id(1), "x", 200);
    config_set(&mut con, "maxmemory", "1");
    let reply = blocked.join().expect("waiter");
    assert!(
        reply.as_ref().is_err_and(|e| e.starts_with("OOM")),
        "{reply:?}"
    );
    config_set(&mut con, "maxmemory", "0");
    assert_eq!(info_int(&mut con, "emq", "emq_refused_oom"), 1);
    assert_eq!(set_len(&mut con, "orders", "pending"), 1, "the job waits");
    assert_eq!(set_len(&mut con, "orders", "active"), 0);
}

/// How many times the server log warns that the eviction policy may evict queues.
fn eviction_warnings(server: &Server) -> usize {
    server
        .log()
        .matches("EchoMQ: maxmemory-policy is allkeys-")
        .count()
}

/// An `allkeys-*` policy may evict rows and whole sets: the log says so at load and whenever
/// the policy is set to one; `noeviction` and `volatile-*` draw no warning.
#[test]
fn an_eviction_policy_that_may_evict_queues_is_warned_about() {
    let evicting = Server::start(Options::default().arg("maxmemory-policy", "allkeys-lru"));
    assert!(
        evicting
            .log()
            .contains("EchoMQ: maxmemory-policy is allkeys-lru"),
        "{}",
        evicting.log_tail()
    );

    let server = Server::start(Options::default());
    let mut con = server.conn();
    assert_eq!(eviction_warnings(&server), 0, "noeviction is safe");
    config_set(&mut con, "maxmemory-policy", "volatile-lru");
    config_set(&mut con, "maxmemory-policy", "allkeys-lfu");
    assert!(
        wait_until(Duration::from_secs(5), || eviction_warnings(&server) == 1),
        "{}",
        server.log_tail()
    );
    assert!(server.log().contains("maxmemory-policy is allkeys-lfu"));
    // The config-change event runs inside CONFIG SET, so its warning would be logged by now.
    config_set(&mut con, "maxmemory-policy", "noeviction");
    assert_eq!(eviction_warnings(&server), 1, "no warning for noeviction");
}
