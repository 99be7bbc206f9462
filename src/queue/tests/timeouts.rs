//! Timeouts: a deadline a claim sets, a renewal cannot pass, and the timer enforces.

use super::*;
use crate::queue::enqueue::{enqueue_extras, Extras};
use crate::queue::limit::{self, Change};

const LEASE: i64 = 30_000;

/// Enqueues job `n` with its own limit on one attempt, `timeout` ms (`None`: the queue's).
fn put_timed(m: &Memory, n: u64, timeout: Option<i64>) {
    let (id, member) = id(n);
    let extras = Extras {
        timeout,
        ..Extras::default()
    };
    let job = Some(Job {
        id,
        member: &member,
    });
    let added = enqueue_extras(m, job, &b"p".to_vec(), Placement::Ready, 0, None, &extras);
    assert_eq!(added, Ok(Added::New));
}

fn queue_timeout(m: &Memory, timeout: Option<i64>) {
    let change = Change {
        timeout: Some(timeout),
        ..Change::default()
    };
    limit::set(m, change).expect("limit set");
}

/// Claims one job; its token.
fn claim_one(m: &Memory) -> i64 {
    let out = claim(m, 1, LEASE).expect("claimed");
    let token = out.claimed.iter().next().expect("a job").token;
    token
}

fn meta(m: &Memory, field: &str) -> Option<String> {
    let meta = m.meta.borrow();
    let value = meta.get(field.as_bytes())?;
    Some(String::from_utf8(value.clone()).expect("utf-8"))
}

#[test]
fn a_timed_job_marks_its_queue_and_its_claim_sets_the_deadline() {
    let m = Memory::at(NOW);
    put(&m, 1, "plain");
    assert_eq!(meta(&m, "timed"), None, "a plain job marks nothing");
    put_timed(&m, 2, Some(5_000));
    assert_eq!(m.field(&name(2), "timeout").as_deref(), Some("5000"));
    assert_eq!(meta(&m, "timed").as_deref(), Some("1"));
    claim_one(&m);
    claim_one(&m);
    assert_eq!(m.field(&name(1), "deadline"), None, "no limit, no deadline");
    let deadline = format!("{}:1", NOW + 5_000);
    assert_eq!(
        m.field(&name(2), "deadline"),
        Some(deadline),
        "the deadline and its attempt"
    );
    assert_eq!(
        m.members(Set::Active),
        [
            (name(2), (NOW + 5_000) as f64),
            (name(1), (NOW + LEASE) as f64)
        ],
        "a timed lease ends at the deadline at the latest"
    );
}

#[test]
fn a_renewal_stops_at_the_deadline_and_past_it_is_refused() {
    let m = Memory::at(NOW);
    put_timed(&m, 1, Some(5_000));
    let token = claim_one(&m);
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    assert_eq!(renew(&m, &t, token, 1_000, None), Ok(NOW + 1_000));
    assert_eq!(
        renew(&m, &t, token, 60_000, None),
        Ok(NOW + 5_000),
        "no renewal extends the attempt past its deadline"
    );
    m.now.set(NOW + 5_000);
    writes(&m);
    assert_eq!(renew(&m, &t, token, 1_000, None), Err(EmqError::Timeout));
    assert_eq!(ack(&m, &t, token, None), Err(EmqError::Lease));
    assert_eq!(fail(&m, &t, token, None, None), Err(EmqError::Lease));
    assert!(writes(&m).is_empty(), "refusals write nothing");
}

#[test]
fn the_timer_fails_an_attempt_at_its_deadline_with_a_retry() {
    let m = Memory::at(NOW);
    put_timed(&m, 1, Some(5_000));
    let token = claim_one(&m);
    m.now.set(NOW + 5_000);
    let (moved, _) = visit(&m, NOW + 5_000, 100).expect("visited");
    assert_eq!((moved.retrying, moved.to_pending), (1, 0));
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("scheduled"));
    assert_eq!(m.field(&name(1), "error").as_deref(), Some("timeout"));
    assert_eq!(m.field(&name(1), "timedout"), Some(token.to_string()));
    let due = NOW + 5_000 + settings::backoff_ms(1);
    assert_eq!(m.members(Set::Schedule), [(name(1), due as f64)]);
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    assert_eq!(
        renew(&m, &t, token, 1_000, None),
        Err(EmqError::Timeout),
        "the ended attempt's renewal is told why"
    );
    assert_eq!(ack(&m, &t, token, None), Err(EmqError::Lease));
    // Its next attempt has a deadline of its own.
    m.now.set(due);
    let next = claim_one(&m);
    assert_eq!(next, token + 1);
    assert_eq!(
        m.field(&name(1), "deadline"),
        Some(format!("{}:{next}", due + 5_000))
    );
    assert_eq!(renew(&m, &t, next, 1_000, None), Ok(due + 1_000));
}

#[test]
fn the_last_attempt_past_its_deadline_is_dead_with_the_error_timeout() {
    let m = Memory::at(NOW);
    let last = settings::max_attempts();
    m.meta.borrow_mut().insert(b"timed".to_vec(), b"1".to_vec());
    m.put(
        Set::Active,
        &name(1),
        (NOW + 100) as f64,
        &[
            ("state", "active"),
            ("attempts", &last.to_string()),
            ("deadline", &format!("{}:{last}", NOW + 100)),
        ],
    );
    let (moved, _) = visit(&m, NOW + 100, 100).expect("visited");
    assert_eq!((moved.timed_out_dead, moved.buried), (1, 0));
    assert_eq!(m.members(Set::Dead), [(name(1), (NOW + 100) as f64)]);
    assert_eq!(m.field(&name(1), "error").as_deref(), Some("timeout"));
}

#[test]
fn a_lease_that_runs_out_before_the_deadline_is_not_a_timeout() {
    let m = Memory::at(NOW);
    put_timed(&m, 1, Some(LEASE * 2));
    claim_one(&m);
    // Visited late, past the deadline too: the lease ran out first, so the job is retried at
    // once, as any expired lease is.
    let (moved, _) = visit(&m, NOW + LEASE * 3, 100).expect("visited");
    assert_eq!((moved.to_pending, moved.retrying), (1, 0));
    assert_eq!(m.field(&name(1), "error"), None);
}

#[test]
fn the_queue_timeout_times_jobs_without_their_own_until_it_is_removed() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    put_timed(&m, 2, Some(9_000));
    put(&m, 3, "p");
    queue_timeout(&m, Some(2_000));
    assert_eq!(meta(&m, "timeout").as_deref(), Some("2000"));
    claim_one(&m);
    claim_one(&m);
    assert_eq!(
        m.field(&name(1), "deadline"),
        Some(format!("{}:1", NOW + 2_000))
    );
    assert_eq!(
        m.field(&name(2), "deadline"),
        Some(format!("{}:1", NOW + 9_000)),
        "a job's own timeout comes before the queue's"
    );
    // The queue's timeout removed: a job claimed after it has no deadline, and an earlier
    // attempt's, left in the row, is not the new attempt's.
    queue_timeout(&m, None);
    assert_eq!(meta(&m, "timed").as_deref(), Some("1"), "the mark stays");
    claim_one(&m);
    assert_eq!(m.field(&name(3), "deadline"), None);
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    assert_eq!(fail(&m, &t, 1, None, Some(0)), Ok(Failed::Scheduled));
    visit(&m, NOW, 100).expect("visited");
    assert_eq!(claim_one(&m), 2);
    let stale = format!("{}:1", NOW + 2_000);
    assert_eq!(m.field(&name(1), "deadline"), Some(stale), "left as it was");
    assert_eq!(
        renew(&m, &t, 2, LEASE, None),
        Ok(NOW + LEASE),
        "not capped by the earlier attempt's deadline"
    );
    let (moved, _) = visit(&m, NOW + LEASE, 100).expect("visited");
    assert_eq!(
        (moved.to_pending, moved.retrying),
        (2, 1),
        "jobs 1 and 3 ran out of lease, job 2 out of its own time"
    );
    assert_eq!(m.field(&name(1), "timedout"), None);
    assert_eq!(m.field(&name(2), "timedout").as_deref(), Some("1"));
}

#[test]
fn a_plain_queue_claims_and_renews_as_before() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    writes(&m);
    let token = claim_one(&m);
    let claim_writes = writes(&m);
    assert!(
        claim_writes.iter().all(|w| !w.contains("deadline")),
        "{claim_writes:?}"
    );
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    assert_eq!(renew(&m, &t, token, 1_000, None), Ok(NOW + 1_000));
    assert_eq!(meta(&m, "timed"), None);
}
