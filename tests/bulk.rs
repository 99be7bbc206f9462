//! Purge and bulk requeue through 100,000 jobs with no call over 50 ms (`SLOWLOG`), in a suite
//! of its own so that no other test of the same run shares the machine with it.

mod support;

use redis::{cmd, Connection, Value};
use support::*;

fn int(con: &mut Connection, name: &str, args: &[&str]) -> i64 {
    let mut c = cmd(name);
    for a in args {
        c.arg(*a);
    }
    match c.query::<Value>(con) {
        Ok(Value::Int(n)) => n,
        other => panic!("{name} {args:?}: {other:?}"),
    }
}

fn reset_slowlog(con: &mut Connection) {
    let () = cmd("SLOWLOG").arg("RESET").query(con).expect("reset");
}

fn assert_no_slow_call(con: &mut Connection, name: &str) {
    let slow: Vec<Value> = cmd("SLOWLOG").arg("GET").arg(-1).query(con).expect("log");
    let slow: Vec<String> = slow.iter().map(|e| format!("{e:?}")).collect();
    assert!(
        slow.iter().all(|e| !e.to_lowercase().contains("emq.")),
        "no {name} call over 50 ms: {slow:?}"
    );
}

#[test]
fn purge_and_bulk_requeue_work_through_100000_jobs_without_a_slow_call() {
    // Dead jobs kept however many (the default would trim them to 10,000).
    let server = Server::start(Options::default().arg("emq.dead-max-jobs", "0"));
    let mut con = server.conn();
    let q = "big";
    dead_jobs(&mut con, q, 100_000);
    // A batch of 1,000 takes a few ms; one call over the whole set would take about a hundred
    // times that. 50 ms tells the two apart without failing on the scheduling noise of a small
    // shared machine (where batches have been seen at 10-16 ms, with builds before this one too).
    config_set(&mut con, "slowlog-log-slower-than", "50000");
    // The first batch of each command also builds the target set's encoding and grows its
    // tables once; it is counted but kept out of the log, so the log judges the steady batches.
    let mut moved = int(&mut con, "EMQ.REQUEUE", &[q, "DEAD"]);
    reset_slowlog(&mut con);
    loop {
        let n = int(&mut con, "EMQ.REQUEUE", &[q, "DEAD"]);
        assert!(n <= 1_000, "bounded by the default COUNT");
        if n == 0 {
            break;
        }
        moved += n;
    }
    assert_no_slow_call(&mut con, "EMQ.REQUEUE");
    assert_eq!(moved, 100_000);
    assert_eq!(set_len(&mut con, q, "dead"), 0);
    assert_eq!(set_len(&mut con, q, "pending"), 100_000);
    assert_eq!(job_attempts(&mut con, q, &job_id(7)).as_deref(), Some("0"));
    let mut purged = int(&mut con, "EMQ.PURGE", &[q, "pending"]);
    reset_slowlog(&mut con);
    loop {
        let n = int(&mut con, "EMQ.PURGE", &[q, "pending"]);
        if n == 0 {
            break;
        }
        purged += n;
    }
    assert_no_slow_call(&mut con, "EMQ.PURGE");
    assert_eq!(purged, 100_000);
    assert!(keys_of(&mut con, q).is_empty(), "rows and sets are gone");
    assert_eq!(info_int(&mut con, "emq", "emq_purged"), 100_000);
}
