//! `EMQ.CANCEL` (protocol.md §6): a pending or scheduled job is removed, row and all; an active
//! one's attempt ends, the job to `dead` with the error `cancelled`, and its worker's renewal
//! and settles are refused with `EMQCANCELLED`; a dead job, or none, is left as it is.
//! (`EMQ.REQUEUE` of a dead job: tests/lease.rs.)

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

fn cancel(con: &mut Connection, q: &str, id: &str) -> i64 {
    cmd("EMQ.CANCEL").arg(q).arg(id).query(con).expect("cancel")
}

#[test]
fn cancel_removes_pending_and_scheduled_jobs() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cancel");
    enqueue(&mut con, &q, &job_id(1), "pending");
    enqueue_delayed(&mut con, &q, &job_id(2), "later", 60_000);
    assert_eq!(cancel(&mut con, &q, &job_id(1)), 1);
    assert_eq!(cancel(&mut con, &q, &job_id(2)), 1);
    assert_eq!(cancel(&mut con, &q, &job_id(4)), 0, "no such job");
    assert_eq!(job_state(&mut con, &q, &job_id(1)), None, "the row is gone");
    assert_eq!(job_state(&mut con, &q, &job_id(2)), None);
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["scheduled"], s["dead"]), (0, 0, 0));
    assert!(expect_err(&mut con, cmd("EMQ.CANCEL").arg(&q).arg("bad")).starts_with("EMQID"));
}

#[test]
fn cancelling_an_active_job_ends_its_attempt_and_refuses_its_worker() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cancel-active");
    let id = job_id(3);
    enqueue(&mut con, &q, &id, "running");
    let jobs = claim(&mut con, &q, &[]).expect("claim");
    let token = jobs[0].2;
    assert_eq!(cancel(&mut con, &q, &id), 1, "an active job is cancelled");
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("dead"));
    assert_eq!(
        row_field(&mut con, &q, &id, "error").as_deref(),
        Some("cancelled")
    );
    assert_eq!(
        row_field(&mut con, &q, &id, "cancelled"),
        Some(token.to_string())
    );
    let s = stats(&mut con, &q);
    assert_eq!((s["active"], s["dead"]), (0, 1));

    // Its worker: the next renewal, an ack, a fail and a batched ack are each told.
    let renew = cmd("EMQ.RENEW")
        .arg(&q)
        .arg(&id)
        .arg(token)
        .arg(30_000)
        .clone();
    let ack = cmd("EMQ.ACK").arg(&q).arg(&id).arg(token).clone();
    let fail = cmd("EMQ.FAIL").arg(&q).arg(&id).arg(token).clone();
    let refused_before = info_int(&mut con, "emq", "emq_refused_cancelled");
    for refused in [&renew, &ack, &fail] {
        assert!(expect_err(&mut con, refused).starts_with("EMQCANCELLED"));
    }
    let mack = mack(&mut con, &q, &[id.clone(), token.to_string()]).expect("mack");
    assert!(
        matches!(&mack, Value::Array(r) if refused_with(&r[0], "EMQCANCELLED")),
        "{mack:?}"
    );
    assert_eq!(
        info_int(&mut con, "emq", "emq_refused_cancelled") - refused_before,
        4,
        "each refusal counted in INFO"
    );
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("dead"));
    assert_eq!(cancel(&mut con, &q, &id), 0, "a dead job is left alone");
    // Another token is stale as ever.
    assert!(
        expect_err(&mut con, cmd("EMQ.ACK").arg(&q).arg(&id).arg(token + 1))
            .starts_with("EMQLEASE")
    );

    // Requeued, the job runs again and is acknowledged under its new token.
    let requeued: i64 = cmd("EMQ.REQUEUE")
        .arg(&q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue");
    assert_eq!(requeued, 1);
    let again = claim(&mut con, &q, &[]).expect("claim again");
    assert_ne!(again[0].2, token, "a new life, a new token");
    assert!(expect_err(&mut con, &renew).starts_with("EMQCANCELLED"));
    let acked: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(&id)
        .arg(again[0].2)
        .query(&mut con)
        .expect("ack");
    assert_eq!(acked, 1);
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("done"));
}

#[test]
fn a_cancelled_active_job_frees_its_room_under_a_concurrency_limit() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cancel-room");
    limit(&mut con, &q, &["CONCURRENCY", "1"]);
    enqueue(&mut con, &q, &job_id(1), "first");
    enqueue(&mut con, &q, &job_id(2), "second");
    let first = claim(&mut con, &q, &[]).expect("claim");
    assert_eq!(first[0].0, job_id(1));
    assert_eq!(
        claim(&mut con, &q, &[]).expect("claim"),
        vec![],
        "at the limit"
    );
    assert_eq!(cancel(&mut con, &q, &job_id(1)), 1);
    let second = claim(&mut con, &q, &[]).expect("claim");
    assert_eq!(second[0].0, job_id(2), "the cancel made room");
}

#[test]
fn a_child_cancelled_while_it_runs_fails_its_parent() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cancel-flow");
    let (parent, child) = (job_id(10), job_id(11));
    let _: Value = cmd("EMQ.ENQUEUE")
        .arg(&q)
        .arg(&parent)
        .arg("album")
        .arg("CHILDREN")
        .arg(1)
        .query(&mut con)
        .expect("parent");
    let _: Value = cmd("EMQ.ENQUEUE")
        .arg(&q)
        .arg(&child)
        .arg("resize")
        .arg("PARENT")
        .arg(&q)
        .arg(&parent)
        .query(&mut con)
        .expect("child");
    let jobs = claim(&mut con, &q, &[]).expect("claim");
    assert_eq!(jobs[0].0, child);
    assert_eq!(cancel(&mut con, &q, &child), 1);
    assert_eq!(job_state(&mut con, &q, &parent).as_deref(), Some("dead"));
    let error = row_field(&mut con, &q, &parent, "error").expect("the parent's error");
    assert!(error.contains(&child), "{error}");
    let field = format!("child:{q}:{child}");
    assert_eq!(
        row_field(&mut con, &q, &parent, &field).as_deref(),
        Some("cancelled:")
    );
}

#[test]
fn unstarted_cancels_only_a_job_that_has_not_started() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cancel-unstarted");
    enqueue(&mut con, &q, &job_id(1), "running");
    enqueue(&mut con, &q, &job_id(2), "pending");
    let jobs = claim(&mut con, &q, &[]).expect("claim");
    let unstarted = |con: &mut Connection, id: &str| -> i64 {
        cmd("EMQ.CANCEL")
            .arg(&q)
            .arg(id)
            .arg("UNSTARTED")
            .query(con)
            .expect("cancel")
    };
    assert_eq!(unstarted(&mut con, &job_id(1)), 0, "a running job runs on");
    assert_eq!(
        job_state(&mut con, &q, &job_id(1)).as_deref(),
        Some("active")
    );
    assert_eq!(unstarted(&mut con, &job_id(2)), 1);
    assert_eq!(job_state(&mut con, &q, &job_id(2)), None);
    let acked: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(jobs[0].2)
        .query(&mut con)
        .expect("ack");
    assert_eq!(acked, 1);
    assert!(expect_err(
        &mut con,
        cmd("EMQ.CANCEL").arg(&q).arg(job_id(2)).arg("NOW")
    )
    .starts_with("ERR syntax error"));
}
