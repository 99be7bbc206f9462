//! `EMQ.CLAIM` without blocking (protocol.md §6): it takes the lowest ids, counts attempts into the
//! lease token, passes over members whose row is gone, and a refusal writes nothing.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

#[test]
fn claim_takes_the_lowest_ids_and_counts_attempts() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("claim");
    for i in [5u64, 3, 9, 1] {
        enqueue(&mut con, &q, &job_id(i), &format!("p{i}"));
    }
    let before = now_ms();
    let jobs = claim(&mut con, &q, &["COUNT", "3", "LEASE", "60000"]).expect("claim");
    let ids: Vec<_> = jobs.iter().map(|j| j.0.clone()).collect();
    assert_eq!(ids, vec![job_id(1), job_id(3), job_id(5)]);
    assert!(jobs.iter().all(|j| j.2 == 1));
    assert_eq!(jobs[0].1, b"p1");
    for id in &ids {
        assert_eq!(job_state(&mut con, &q, id).as_deref(), Some("active"));
        let deadline = set_score(&mut con, &q, "active", id).expect("active");
        assert!(deadline >= (before + 60_000) as f64 && deadline <= (now_ms() + 60_000) as f64);
    }
    assert_eq!(job_attempts(&mut con, &q, &job_id(1)).as_deref(), Some("1"));
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["active"]), (1, 3));
}

#[test]
fn attempts_written_by_hand_give_a_token_the_lease_commands_take() {
    // A row whose `attempts` someone overwrote: a claim still counts from something sane and
    // hands out a token that RENEW, ACK and FAIL accept (they take 1 up to 2^63-1).
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("handmade");
    let cases = [
        (
            "9223372036854775807",
            9223372036854775807,
            "the largest stays the largest",
        ),
        ("-5", 1, "a negative count is none"),
        ("many", 1, "not a number is none"),
    ];
    for (i, (written, token, why)) in cases.iter().enumerate() {
        let id = job_id(i as u64 + 1);
        enqueue(&mut con, &q, &id, "p");
        cmd("HSET")
            .arg(row_key(&q, &id))
            .arg("attempts")
            .arg(*written)
            .query::<i64>(&mut con)
            .expect("hset");
        let jobs = claim(&mut con, &q, &[]).expect("claim");
        assert_eq!(
            (jobs[0].0.as_str(), jobs[0].2),
            (id.as_str(), *token),
            "{why}"
        );
        assert_eq!(
            job_attempts(&mut con, &q, &id),
            Some(token.to_string()),
            "{why}"
        );
        let acked: i64 = cmd("EMQ.ACK")
            .arg(&q)
            .arg(&id)
            .arg(*token)
            .query(&mut con)
            .expect("the token is accepted");
        assert_eq!(acked, 1, "{why}");
    }
}

#[test]
fn a_row_overwritten_with_another_type_stops_claims_until_it_is_removed() {
    // README: a queue key of another type is refused by every command that reaches it, a
    // claim included once that job is first in `pending`; deleting the key lets the queue go on.
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("badrow");
    for i in 1..=2 {
        enqueue(&mut con, &q, &job_id(i), &format!("p{i}"));
    }
    let _: () = cmd("SET")
        .arg(row_key(&q, &job_id(1)))
        .arg("not a row")
        .query(&mut con)
        .expect("set");
    let err = expect_err(&mut con, cmd("EMQ.CLAIM").arg(&q));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(
        set_members(&mut con, &q, "pending"),
        vec![job_id(1), job_id(2)],
        "nothing moved"
    );
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("del");
    let jobs = claim(&mut con, &q, &["COUNT", "2"]).expect("claim");
    let ids: Vec<_> = jobs.iter().map(|j| j.0.clone()).collect();
    assert_eq!(ids, vec![job_id(2)], "the id without a row is dropped");
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
}

#[test]
fn claim_refusals_write_nothing() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("refuse");
    enqueue(&mut con, &q, &job_id(1), "x");
    for (opts, code) in [
        (vec!["COUNT", "0"], "ERR"),
        (vec!["COUNT", "1001"], "ERR"),
        (vec!["LEASE", "-5"], "ERR"),
        (vec!["BLOCK", "soon"], "ERR"),
        (vec!["COUNT"], "ERR"),
        (vec!["WAIT", "1"], "ERR"),
    ] {
        let mut c = cmd("EMQ.CLAIM");
        c.arg(&q);
        for o in &opts {
            c.arg(*o);
        }
        let err = expect_err(&mut con, &c);
        assert!(err.starts_with(code), "{opts:?}: {err}");
    }
    assert!(expect_err(&mut con, cmd("EMQ.CLAIM").arg("a b")).starts_with("EMQQUEUE"));
    cmd("SET")
        .arg(set_key(&q, "active"))
        .arg("oops")
        .query::<()>(&mut con)
        .expect("set");
    assert!(expect_err(&mut con, cmd("EMQ.CLAIM").arg(&q)).starts_with("WRONGTYPE"));
    assert_eq!(
        job_state(&mut con, &q, &job_id(1)).as_deref(),
        Some("pending"),
        "nothing moved"
    );
}

/// Pending members whose rows are gone (deleted by hand, evicted under an `allkeys-*` policy)
/// are dropped by the claim that meets them, which still hands out the jobs behind them, and
/// a blocking claim does not go to sleep while such jobs wait.
#[test]
fn a_claim_passes_over_pending_members_whose_row_is_gone() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let dropped = |con: &mut Connection| info_int(con, "emq", "emq_dropped");
    let q = unique_queue("orphans");
    for n in 1..=3 {
        enqueue(&mut con, &q, &job_id(n), &format!("job {n}"));
    }
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .arg(row_key(&q, &job_id(2)))
        .query(&mut con)
        .expect("del");
    let jobs = claim(&mut con, &q, &[]).expect("a reply");
    assert_eq!(jobs, vec![(job_id(3), b"job 3".to_vec(), 1)]);
    assert_eq!(set_len(&mut con, &q, "pending"), 0, "both orphans dropped");
    assert_eq!(dropped(&mut con), 2);

    // More orphans than one claim passes over: a blocking claim still gets the job behind
    // them, at once.
    let q = unique_queue("orphans");
    let total = 2_500u64;
    let mut batch = cmd("EMQ.MENQUEUE");
    batch.arg(&q);
    for n in 1..=total {
        batch.arg(job_id(n)).arg("x");
    }
    let _: Vec<i64> = batch.query(&mut con).expect("menqueue");
    let mut del = cmd("DEL");
    for n in 1..total {
        del.arg(row_key(&q, &job_id(n)));
    }
    let _: i64 = del.query(&mut con).expect("del");
    // Nothing else writes the queue, so a claim that waited would only time out (a null
    // reply): getting the job means the claim found it in its own call.
    let jobs = claim(&mut con, &q, &["BLOCK", "5000"]).expect("not timed out");
    assert_eq!(jobs, vec![(job_id(total), b"x".to_vec(), 1)]);
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    assert_eq!(dropped(&mut con), 2 + (total as i64 - 1));

    // A scheduled job whose row is gone is dropped when it comes due, not moved to pending.
    let q = unique_queue("orphans");
    enqueue_delayed(&mut con, &q, &job_id(1), "x", 50);
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("del");
    assert!(wait_until(Duration::from_secs(5), || {
        set_len(&mut con, &q, "schedule") == 0
    }));
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    assert_eq!(dropped(&mut con), 2 + total as i64);
}
