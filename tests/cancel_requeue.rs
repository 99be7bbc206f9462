//! `EMQ.CANCEL` (protocol.md §6): a pending or scheduled job is removed, row and all; an active one, or
//! one that does not exist, is left as it is. (`EMQ.REQUEUE` of a dead job: tests/lease.rs.)

use emq_harness as support;

use redis::cmd;
use support::*;

#[test]
fn cancel_removes_pending_and_scheduled_jobs_only() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cancel");
    enqueue(&mut con, &q, &job_id(1), "pending");
    enqueue_delayed(&mut con, &q, &job_id(2), "later", 60_000);
    enqueue(&mut con, &q, &job_id(3), "active");
    let cancel = |con: &mut Connection, id: &str| -> i64 {
        cmd("EMQ.CANCEL")
            .arg(&q)
            .arg(id)
            .query(con)
            .expect("cancel")
    };
    assert_eq!(cancel(&mut con, &job_id(1)), 1);
    assert_eq!(cancel(&mut con, &job_id(2)), 1);
    claim(&mut con, &q, &[]).expect("claim 3");
    assert_eq!(
        cancel(&mut con, &job_id(3)),
        0,
        "an active job is not cancelled"
    );
    assert_eq!(cancel(&mut con, &job_id(4)), 0, "no such job");
    assert_eq!(job_state(&mut con, &q, &job_id(1)), None, "the row is gone");
    assert_eq!(job_state(&mut con, &q, &job_id(2)), None);
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["scheduled"], s["active"]), (0, 0, 1));
    assert!(expect_err(&mut con, cmd("EMQ.CANCEL").arg(&q).arg("bad")).starts_with("EMQID"));
}
