//! Leases (protocol.md §6): `EMQ.RENEW`, `EMQ.ACK` and `EMQ.FAIL` under the attempt token, retries with
//! backoff until a job is dead, and an expired lease returning the job and fencing the worker
//! that held it, however often that worker crashes.

use emq_harness as support;

use std::thread;
use std::time::Duration;

use redis::{cmd, Value};
use support::*;

#[test]
fn a_lease_past_its_deadline_holds_until_the_job_is_taken_back() {
    // Inside one transaction the timer cannot take the job back: an ACK, RENEW or FAIL just
    // after the deadline is still the worker's. Once the timer has run, it is stale.
    let server = Server::start(Options::default().arg("enable-debug-command", "local"));
    let mut con = server.conn();
    let late = |con: &mut Connection, q: &str, then: &mut redis::Cmd| -> Vec<Value> {
        enqueue(con, q, &job_id(1), "work");
        redis::pipe()
            .atomic()
            .cmd("EMQ.CLAIM")
            .arg(q)
            .arg("LEASE")
            .arg(1)
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.01")
            .add_command(then.clone())
            .query(con)
            .expect("transaction")
    };
    let replies = late(
        &mut con,
        "late-ack",
        cmd("EMQ.ACK").arg("late-ack").arg(job_id(1)).arg(1),
    );
    assert_eq!(replies[2], Value::Int(1));
    assert_eq!(
        job_state(&mut con, "late-ack", &job_id(1)).as_deref(),
        Some("done")
    );
    let replies = late(
        &mut con,
        "late-renew",
        cmd("EMQ.RENEW")
            .arg("late-renew")
            .arg(job_id(1))
            .arg(1)
            .arg(60_000),
    );
    assert!(matches!(replies[2], Value::Int(deadline) if deadline > now_ms() + 50_000));
    let replies = late(
        &mut con,
        "late-fail",
        cmd("EMQ.FAIL")
            .arg("late-fail")
            .arg(job_id(1))
            .arg(1)
            .arg("RETRY-IN")
            .arg(60_000),
    );
    assert_eq!(text(&replies[2]), "scheduled");

    enqueue(&mut con, "taken-back", &job_id(1), "work");
    let jobs = claim(&mut con, "taken-back", &["LEASE", "1"]).expect("claim");
    assert_eq!(jobs[0].2, 1);
    assert!(
        wait_until(Duration::from_secs(5), || set_score(
            &mut con,
            "taken-back",
            "pending",
            &job_id(1)
        )
        .is_some()),
        "the timer takes the job back"
    );
    let err = expect_err(
        &mut con,
        cmd("EMQ.ACK").arg("taken-back").arg(job_id(1)).arg(1),
    );
    assert!(err.starts_with("EMQLEASE"), "{err}");
}

#[test]
fn an_expired_lease_returns_the_job_and_fences_the_old_worker() {
    let server = Server::start_or_external();
    let q = unique_queue("fence");
    let mut a = server.conn();
    enqueue(&mut a, &q, &job_id(1), "work");
    let first = claim(&mut a, &q, &["LEASE", "200"]).expect("a claims");
    assert_eq!(first[0].2, 1, "token 1");
    drop(a); // worker A crashes: its connection closes without an ack

    let mut b = server.conn();
    let second = claim(&mut b, &q, &["BLOCK", "10000"]).expect("reclaimed after the lease");
    assert_eq!(second, vec![(job_id(1), b"work".to_vec(), 2)]);

    let mut a_again = server.conn();
    let err = expect_err(&mut a_again, cmd("EMQ.ACK").arg(&q).arg(job_id(1)).arg(1));
    assert!(err.starts_with("EMQLEASE"), "{err}");
    let err = expect_err(
        &mut a_again,
        cmd("EMQ.RENEW").arg(&q).arg(job_id(1)).arg(1).arg(1000),
    );
    assert!(err.starts_with("EMQLEASE"), "{err}");
    let err = expect_err(&mut a_again, cmd("EMQ.FAIL").arg(&q).arg(job_id(1)).arg(1));
    assert!(err.starts_with("EMQLEASE"), "{err}");
    assert_eq!(
        job_state(&mut b, &q, &job_id(1)).as_deref(),
        Some("active"),
        "the stale worker changed nothing"
    );
    let ok: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(2)
        .query(&mut b)
        .expect("b acks");
    assert_eq!(ok, 1);
}

#[test]
fn renew_extends_a_live_lease() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("renew");
    enqueue(&mut con, &q, &job_id(1), "x");
    claim(&mut con, &q, &["LEASE", "300"]).expect("claim");
    let deadline: i64 = cmd("EMQ.RENEW")
        .arg(&q)
        .arg(job_id(1))
        .arg(1)
        .arg(60_000)
        .query(&mut con)
        .expect("renew");
    assert!(deadline > now_ms() + 50_000);
    assert_eq!(
        set_score(&mut con, &q, "active", &job_id(1)),
        Some(deadline as f64)
    );
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        stats(&mut con, &q)["active"],
        1,
        "not reclaimed after the old lease"
    );
    let err = expect_err(
        &mut con,
        cmd("EMQ.RENEW").arg(&q).arg(job_id(1)).arg("x").arg(1000),
    );
    assert!(err.starts_with("EMQLEASE"), "{err}");
    let err = expect_err(
        &mut con,
        cmd("EMQ.RENEW").arg(&q).arg(job_id(2)).arg(1).arg(1000),
    );
    assert!(
        err.starts_with("EMQLEASE"),
        "a job never claimed has no lease: {err}"
    );
}

#[test]
fn ack_keeps_the_row_as_done_so_a_re_enqueue_is_a_duplicate() {
    let server = Server::start(Options::default().arg("emq.done-ttl-ms", "60000"));
    let mut con = server.conn();
    let q = unique_queue("ack");
    enqueue(&mut con, &q, &job_id(1), "x");
    claim(&mut con, &q, &[]).expect("claim");
    let ok: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(1)
        .query(&mut con)
        .expect("ack");
    assert_eq!(ok, 1);
    assert_eq!(job_state(&mut con, &q, &job_id(1)).as_deref(), Some("done"));
    let ttl: i64 = cmd("PTTL")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("pttl");
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    assert_eq!(
        enqueue(&mut con, &q, &job_id(1), "again"),
        0,
        "still a duplicate"
    );
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["active"]), (0, 0));
    let err = expect_err(&mut con, cmd("EMQ.ACK").arg(&q).arg(job_id(1)).arg(1));
    assert!(err.starts_with("EMQLEASE"), "a second ack: {err}");
}

#[test]
fn fail_retries_with_backoff_then_buries_the_job() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "100")
            .arg("emq.backoff-max-ms", "150"),
    );
    let mut con = server.conn();
    let q = unique_queue("fail");
    let id = job_id(1);
    enqueue(&mut con, &q, &id, "x");

    // Attempt 1 fails with an explicit retry time.
    claim(&mut con, &q, &[]).expect("claim 1");
    let before = now_ms();
    let r: String = cmd("EMQ.FAIL")
        .arg(&q)
        .arg(&id)
        .arg(1)
        .arg("ERROR")
        .arg("boom 1")
        .arg("RETRY-IN")
        .arg(5000)
        .query(&mut con)
        .expect("fail 1");
    assert_eq!(r, "scheduled");
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("scheduled"));
    let due = set_score(&mut con, &q, "schedule", &id).expect("scheduled");
    assert!(due >= (before + 5000) as f64 && due <= (now_ms() + 5000) as f64);
    assert_eq!(
        row_field(&mut con, &q, &id, "error").as_deref(),
        Some("boom 1")
    );

    // Pull it forward, then attempt 2 fails with the default backoff: base * 2 capped at 150.
    cmd("ZADD")
        .arg(set_key(&q, "schedule"))
        .arg(0)
        .arg(&id)
        .query::<i64>(&mut con)
        .expect("due now");
    let jobs = claim(&mut con, &q, &[]).expect("claim 2");
    assert_eq!(jobs[0].2, 2);
    let before = now_ms();
    let r: String = cmd("EMQ.FAIL")
        .arg(&q)
        .arg(&id)
        .arg(2)
        .query(&mut con)
        .expect("fail 2");
    assert_eq!(r, "scheduled");
    let due = set_score(&mut con, &q, "schedule", &id).expect("scheduled");
    assert!(
        due >= (before + 150) as f64 && due <= (now_ms() + 150) as f64,
        "backoff capped at 150: {due}"
    );

    // Attempt 3 is the last: dead.
    let mut waiter = server.conn();
    let jobs = claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("claim 3");
    assert_eq!(jobs[0].2, 3);
    let r: String = cmd("EMQ.FAIL")
        .arg(&q)
        .arg(&id)
        .arg(3)
        .arg("ERROR")
        .arg("final")
        .query(&mut con)
        .expect("fail 3");
    assert_eq!(r, "dead");
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("dead"));
    assert!(set_score(&mut con, &q, "dead", &id).is_some());
    let s = stats(&mut con, &q);
    assert_eq!(
        (s["pending"], s["active"], s["scheduled"], s["dead"]),
        (0, 0, 0, 1)
    );

    // Requeue brings it back with its attempts reset, and its tokens carry on past the three
    // its first life took.
    let n: i64 = cmd("EMQ.REQUEUE")
        .arg(&q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue");
    assert_eq!(n, 1);
    let jobs = claim(&mut con, &q, &[]).expect("claim again");
    assert_eq!(jobs[0].2, 4);
    assert_eq!(job_attempts(&mut con, &q, &id).as_deref(), Some("1"));
    let n: i64 = cmd("EMQ.REQUEUE")
        .arg(&q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue of a live job");
    assert_eq!(n, 0);
}

#[test]
fn a_job_whose_worker_keeps_crashing_dies_after_max_attempts() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "2"));
    let mut con = server.conn();
    let q = unique_queue("crashy");
    enqueue(&mut con, &q, &job_id(1), "x");
    claim(&mut con, &q, &["LEASE", "50"]).expect("1");
    let jobs = claim(&mut con, &q, &["LEASE", "50", "BLOCK", "5000"]).expect("2");
    assert_eq!(jobs[0].2, 2);
    assert!(wait_until(Duration::from_secs(5), || stats(&mut con, &q)
        ["dead"]
        == 1));
    assert_eq!(
        row_field(&mut con, &q, &job_id(1), "error").as_deref(),
        Some("lease expired")
    );
    // A death by lease counts in INFO like one by FAIL.
    assert_eq!(info_int(&mut con, "emq", "emq_dead"), 1);
}

#[test]
fn a_requeued_job_s_tokens_keep_growing_so_no_worker_from_an_earlier_life_can_settle_it() {
    // With one attempt a life, an expired lease buries the job at once. Its worker still holds
    // token 1 when the job is requeued and claimed again: the new claim's token is 2, so the
    // old worker's ACK is refused and the new one's taken. `attempts` still counts this
    // life's attempts; the row's `fence` keeps the tokens taken before.
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let (q, id) = ("fenced", job_id(1));
    enqueue(&mut con, q, &id, "work");
    let first = claim(&mut con, q, &["LEASE", "100"]).expect("claimed");
    assert_eq!(
        first[0].2, 1,
        "a job never requeued: its token is its attempts"
    );
    assert!(
        wait_until(Duration::from_secs(10), || job_state(&mut con, q, &id)
            .as_deref()
            == Some("dead")),
        "the expired lease buried the job"
    );
    let requeued: i64 = cmd("EMQ.REQUEUE")
        .arg(q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue");
    assert_eq!(requeued, 1);
    assert_eq!(
        row_field(&mut con, q, &id, "attempts").as_deref(),
        Some("0")
    );
    assert_eq!(row_field(&mut con, q, &id, "fence").as_deref(), Some("1"));
    let second = claim(&mut con, q, &[]).expect("claimed again");
    assert_eq!(
        second[0].2, 2,
        "the new life's first token is past the old one"
    );
    assert_eq!(
        row_field(&mut con, q, &id, "attempts").as_deref(),
        Some("1")
    );
    let stale = expect_err(&mut con, cmd("EMQ.ACK").arg(q).arg(&id).arg(first[0].2));
    assert!(stale.starts_with("EMQLEASE"), "{stale}");
    assert_eq!(job_state(&mut con, q, &id).as_deref(), Some("active"));

    // A failure buries it again, a requeue of the whole dead set gives it a third life, and
    // neither earlier token settles it there.
    let failed: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(&id)
        .arg(second[0].2)
        .query(&mut con)
        .expect("fail");
    assert_eq!(failed, "dead");
    let moved: i64 = cmd("EMQ.REQUEUE")
        .arg(q)
        .arg("DEAD")
        .query(&mut con)
        .expect("requeue dead");
    assert_eq!(moved, 1);
    let third = claim(&mut con, q, &[]).expect("a third life");
    assert_eq!(third[0].2, 3);
    for old in [first[0].2, second[0].2] {
        let err = expect_err(
            &mut con,
            cmd("EMQ.RENEW").arg(q).arg(&id).arg(old).arg(1_000),
        );
        assert!(err.starts_with("EMQLEASE"), "{old}: {err}");
    }
    let acked: i64 = cmd("EMQ.ACK")
        .arg(q)
        .arg(&id)
        .arg(third[0].2)
        .query(&mut con)
        .expect("ack");
    assert_eq!(acked, 1);
    assert_eq!(job_state(&mut con, q, &id).as_deref(), Some("done"));
}
