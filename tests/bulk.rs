//! Purge and bulk requeue through 100,000 jobs, each call changing exactly its batch (the
//! oldest `COUNT` jobs, counted per call, never timed), in a suite of its own: its 100,000
//! jobs share the machine with no other test of the same run.

use emq_harness as support;

use redis::{cmd, Connection, Value};
use support::*;

const Q: &str = "big";

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

/// Calls `name args` until it answers 0, checking after each call that it took exactly the
/// next batch of `from`: the set is shorter by the batch, the batch's last job is gone from
/// it, the next job is still there (`state_of` reads a job's state); how many calls moved jobs.
fn batches(
    con: &mut Connection,
    name: &str,
    args: &[&str],
    from: &str,
    total: u64,
    state_of: &dyn Fn(&mut Connection, u64) -> Option<String>,
) -> u64 {
    let mut done = 0u64;
    let mut calls = 0u64;
    loop {
        let n = int(con, name, args) as u64;
        if n == 0 {
            break;
        }
        calls += 1;
        assert_eq!(
            n,
            1_000.min(total - done),
            "{name} call {calls}: the default COUNT"
        );
        done += n;
        assert_eq!(
            set_len(con, Q, from) as u64,
            total - done,
            "{name} call {calls}"
        );
        let (last, next) = (state_of(con, done), state_of(con, done + 1));
        assert_ne!(
            last.as_deref(),
            Some(from),
            "{name} call {calls} took job {done}"
        );
        if done < total {
            assert_eq!(
                next.as_deref(),
                Some(from),
                "{name} call {calls} left the next"
            );
        }
    }
    assert_eq!(done, total);
    calls
}

#[test]
fn purge_and_bulk_requeue_work_through_100000_jobs_a_batch_a_call() {
    // Dead jobs kept however many (the default would trim them to 10,000).
    let server = Server::start(Options::default().arg("emq.dead-max-jobs", "0"));
    let mut con = server.conn();
    let q = Q;
    dead_jobs(&mut con, q, 100_000);
    // What keeps a bulk command from holding the server is that one call does one batch: the
    // module reads the set through an iterator that stops at COUNT. So each call is counted,
    // not timed: it changes exactly the oldest 1,000 jobs, 100 calls for 100,000 (a call over
    // the whole set would empty it at once).
    let state = |con: &mut Connection, n: u64| job_state(con, q, &job_id(n));
    let calls = batches(
        &mut con,
        "EMQ.REQUEUE",
        &[q, "DEAD"],
        "dead",
        100_000,
        &state,
    );
    assert_eq!(calls, 100);
    assert_eq!(set_len(&mut con, q, "dead"), 0);
    assert_eq!(set_len(&mut con, q, "pending"), 100_000);
    assert_eq!(job_attempts(&mut con, q, &job_id(7)).as_deref(), Some("0"));
    let calls = batches(
        &mut con,
        "EMQ.PURGE",
        &[q, "pending"],
        "pending",
        100_000,
        &state,
    );
    assert_eq!(calls, 100);
    assert!(keys_of(&mut con, q).is_empty(), "rows and sets are gone");
    assert_eq!(info_int(&mut con, "emq", "emq_purged"), 100_000);
}
