//! Priorities on real servers: a job's priority is its `pending` score, lower first, ids in
//! mint order within one; the default 0 writes the reference row; a job keeps its priority on
//! every way back to `pending`; batches give each job its own; out of range is refused, and a
//! replica without the module ends identical.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Connection, Value};
use support::*;

fn enqueue_at(con: &mut Connection, q: &str, id: &str, priority: i64) -> i64 {
    cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg("p")
        .arg("PRIORITY")
        .arg(priority)
        .query(con)
        .expect("enqueue")
}

fn claimed_ids(con: &mut Connection, q: &str, count: usize) -> Vec<String> {
    claim(con, q, &["COUNT", &count.to_string()])
        .expect("jobs")
        .into_iter()
        .map(|j| j.0)
        .collect()
}

#[test]
fn claims_take_the_lowest_priority_first_then_mint_order() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("prio");
    enqueue_at(&mut con, &q, &job_id(1), 5);
    enqueue(&mut con, &q, &job_id(2), "p");
    enqueue_at(&mut con, &q, &job_id(3), -5);
    enqueue_at(&mut con, &q, &job_id(4), 0);
    assert_eq!(set_score(&mut con, &q, "pending", &job_id(3)), Some(-5.0));
    assert_eq!(
        claimed_ids(&mut con, &q, 4),
        [job_id(3), job_id(2), job_id(4), job_id(1)]
    );
    let fields: Vec<String> = cmd("HKEYS")
        .arg(row_key(&q, &job_id(4)))
        .query(&mut con)
        .expect("fields");
    assert_eq!(
        fields,
        ["state", "attempts", "payload"],
        "0 is the reference row"
    );
    assert_eq!(
        row_field(&mut con, &q, &job_id(1), "priority").as_deref(),
        Some("5")
    );
}

#[test]
fn a_job_keeps_its_priority_on_every_way_back_to_pending() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "2"));
    let mut con = server.conn();
    let q = "kept";
    let id = job_id(1);
    let delayed: i64 = cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(&id)
        .arg("p")
        .arg("PRIORITY")
        .arg(9)
        .arg("DELAY")
        .arg(50)
        .query(&mut con)
        .expect("enqueue");
    assert_eq!(delayed, 1);
    let back = |con: &mut Connection| {
        wait_until(Duration::from_secs(5), || {
            set_score(con, q, "pending", &id) == Some(9.0)
        })
    };
    assert!(back(&mut con), "due, at its priority");
    let job = claim(&mut con, q, &["LEASE", "50"])
        .expect("jobs")
        .remove(0);
    assert!(back(&mut con), "its lease ran out");
    let job2 = claim(&mut con, q, &[]).expect("jobs").remove(0);
    assert_eq!((job.2, job2.2), (1, 2));
    let dead: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(&id)
        .arg(2)
        .query(&mut con)
        .expect("fail");
    assert_eq!(dead, "dead");
    let n: i64 = cmd("EMQ.REQUEUE")
        .arg(q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue");
    assert_eq!(n, 1);
    assert_eq!(
        set_score(&mut con, q, "pending", &id),
        Some(9.0),
        "requeued"
    );
    let job = claim(&mut con, q, &[]).expect("jobs").remove(0);
    let retry: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(&id)
        .arg(job.2)
        .arg("RETRY-IN")
        .arg(0)
        .query(&mut con)
        .expect("fail");
    assert_eq!(retry, "scheduled");
    assert!(back(&mut con), "retried");
}

#[test]
fn a_batch_gives_each_job_its_own_priority() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("batch-prio");
    let replies: Vec<i64> = cmd("EMQ.MENQUEUE")
        .arg(&q)
        .arg("PRIORITY")
        .arg(3)
        .arg(job_id(1))
        .arg("a")
        .arg(job_id(2))
        .arg("b")
        .arg("PRIORITY")
        .arg(-1)
        .arg(job_id(3))
        .arg("c")
        .query(&mut con)
        .expect("menqueue");
    assert_eq!(replies, [1, 1, 1]);
    assert_eq!(
        set_members(&mut con, &q, "pending"),
        [job_id(3), job_id(2), job_id(1)]
    );
    let view: Vec<(String, Value)> = cmd("EMQ.JOB")
        .arg(&q)
        .arg(job_id(1))
        .query(&mut con)
        .expect("job");
    let priority = view
        .iter()
        .find(|(k, _)| k == "priority")
        .map(|(_, v)| v.clone());
    assert_eq!(priority, Some(Value::Int(3)), "EMQ.JOB shows it");
}

#[test]
fn priorities_out_of_range_or_given_twice_are_refused_and_write_nothing() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("bad-prio");
    for args in [
        vec!["PRIORITY", "1000001"],
        vec!["PRIORITY", "-1000001"],
        vec!["PRIORITY", "x"],
        vec!["PRIORITY", "1", "PRIORITY", "2"],
        vec!["DELAY", "5", "AT", "5"],
    ] {
        let mut c = cmd("EMQ.ENQUEUE");
        c.arg(&q).arg(job_id(1)).arg("p").arg(&args);
        assert!(expect_err(&mut con, &c).starts_with("ERR "), "{args:?}");
    }
    let mut c = cmd("EMQ.MENQUEUE");
    c.arg(&q).arg(job_id(1)).arg("p").arg("PRIORITY").arg(1);
    assert!(
        expect_err(&mut con, &c).starts_with("ERR "),
        "a priority with no job"
    );
    for twice in [
        &["PRIORITY", "1", "PRIORITY", "2"][..],
        &["HEADERS", "1", "k", "v", "HEADERS", "1", "k", "w"],
    ] {
        let mut c = cmd("EMQ.MENQUEUE");
        c.arg(&q).arg(twice).arg(job_id(1)).arg("p");
        let err = expect_err(&mut con, &c);
        assert!(
            err.starts_with("ERR syntax error"),
            "{twice:?} given twice: {err}"
        );
    }
    assert!(keys_of(&mut con, &q).is_empty());
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    for n in 1..=10 {
        enqueue_at(&mut p, "mirrored", &job_id(n), (n as i64 % 3) - 1);
    }
    let _ = claimed_ids(&mut p, "mirrored", 4);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}
