//! Claim limits: concurrency, the sliding rate window, and the timer that wakes waiters.

use super::*;

fn limit_to(m: &Memory, change: crate::queue::limit::Change) -> crate::queue::limit::Usage {
    crate::queue::limit::set(m, change).expect("limits set")
}

/// Sets a rate limit of `n` claims per `per_ms` (and no concurrency limit).
fn rate_limit(m: &Memory, n: i64, per_ms: i64) {
    limit_to(
        m,
        crate::queue::limit::Change {
            concurrency: None,
            rate: Some(Some(crate::protocol::limits::Rate { n, per_ms })),
            ..Default::default()
        },
    );
}

#[test]
fn a_concurrency_limit_caps_active_jobs_and_a_settle_wakes_the_waiters() {
    use crate::queue::limit::Change;
    let m = Memory::at(NOW);
    for n in 1..=5 {
        put(&m, n, "p");
    }
    let usage = limit_to(
        &m,
        Change {
            concurrency: Some(Some(3)),
            rate: None,
            ..Default::default()
        },
    );
    assert_eq!(usage.limits.concurrency, Some(3));
    assert_eq!(claim(&m, 2, 1_000).expect("claimed").claimed.len(), 2);
    let out = claim(&m, 5, 1_000).expect("claimed");
    assert_eq!(out.claimed.len(), 1, "one place left of three");
    assert!(
        !out.more_behind,
        "held back by the limit, not by rowless members"
    );
    assert!(claim(&m, 5, 1_000).expect("claimed").claimed.is_empty());
    let wakes = m.wakes.get();
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    ack(&m, &t, 1, None).expect("acked");
    assert_eq!(m.wakes.get(), wakes + 1, "an ack makes room for a waiter");
    assert_eq!(claim(&m, 5, 1_000).expect("claimed").claimed.len(), 1);
    let member = id(2).1;
    let t = target(&m, 2, &member).expect("target");
    fail(&m, &t, 1, None, None).expect("failed");
    assert_eq!(m.wakes.get(), wakes + 2, "so does a failure");
    // Expired leases leave `active` before the claim counts it.
    m.now.set(NOW + 2_000);
    assert_eq!(claim(&m, 5, 1_000).expect("claimed").claimed.len(), 3);
    assert_eq!(m.members(Set::Active).len(), 3);
    let off = limit_to(&m, Change::OFF);
    assert!(off.limits.is_none());
    assert!(m.meta.borrow().is_empty(), "OFF leaves no limit field");
}

#[test]
fn a_rate_limit_is_a_sliding_window_with_no_burst_at_its_edge() {
    let m = Memory::at(NOW);
    for n in 1..=20 {
        put(&m, n, "p");
    }
    rate_limit(&m, 3, 1_000);
    assert_eq!(claim(&m, 2, 60_000).expect("claimed").claimed.len(), 2);
    m.now.set(NOW + 900);
    assert_eq!(claim(&m, 5, 60_000).expect("claimed").claimed.len(), 1);
    m.now.set(NOW + 999);
    assert!(
        claim(&m, 5, 60_000).expect("claimed").claimed.is_empty(),
        "a fixed window would have reset at its edge"
    );
    m.now.set(NOW + 1_000);
    assert_eq!(
        claim(&m, 5, 60_000).expect("claimed").claimed.len(),
        2,
        "the first two claims left the window; the third is still in it"
    );
    let in_window: Vec<String> = m.members(Set::Rate).into_iter().map(|(m, _)| m).collect();
    assert_eq!(in_window.len(), 3, "claims past the window were trimmed");
    assert!(in_window.iter().all(|m| m.ends_with(":1")));
    // The timer trims the window and says when it next frees.
    m.now.set(NOW + 1_950);
    let (_, next) = visit(&m, NOW + 1_950, 100).expect("visited");
    assert_eq!(m.members(Set::Rate).len(), 2);
    assert_eq!(next, Some(NOW + 2_000));
}

#[test]
fn the_timer_wakes_rate_limited_claimers_when_the_window_frees() {
    use crate::queue::limit::Change;
    let m = Memory::at(NOW);
    for n in 1..=3 {
        put(&m, n, "p");
    }
    rate_limit(&m, 1, 500);
    assert_eq!(claim(&m, 3, 60_000).expect("claimed").claimed.len(), 1);
    let wakes = m.wakes.get();
    let (_, next) = visit(&m, NOW + 100, 100).expect("visited");
    assert_eq!(m.wakes.get(), wakes, "nothing freed yet");
    assert_eq!(next, Some(NOW + 500));
    visit(&m, NOW + 500, 100).expect("visited");
    assert_eq!(
        m.wakes.get(),
        wakes + 1,
        "the window freed: the waiters are woken"
    );
    assert!(m.members(Set::Rate).is_empty());
    // Without a rate limit the timer empties what is left of the window.
    m.now.set(NOW + 600);
    assert_eq!(claim(&m, 1, 60_000).expect("claimed").claimed.len(), 1);
    limit_to(
        &m,
        Change {
            concurrency: None,
            rate: Some(None),
            ..Default::default()
        },
    );
    let (_, next) = visit(&m, NOW + 601, 100).expect("visited");
    assert!(m.members(Set::Rate).is_empty());
    assert_eq!(
        next,
        Some(NOW + 60_000),
        "only the leases are left to watch"
    );
}

#[test]
fn a_rate_window_of_another_type_refuses_the_claim_before_it_writes() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    rate_limit(&m, 5, 1_000);
    m.other.borrow_mut().push(MemKey::Set(Set::Rate));
    writes(&m);
    assert_eq!(claim(&m, 1, 1_000).err(), Some(EmqError::WrongType));
    assert!(writes(&m).is_empty());
    m.other.borrow_mut().clear();
    m.denied.borrow_mut().push(MemKey::Set(Set::Rate));
    assert_eq!(claim(&m, 1, 1_000).err(), Some(EmqError::NoPerm));
    assert!(writes(&m).is_empty());
}

#[test]
fn a_job_claimed_again_with_the_same_attempt_counts_twice_in_the_rate_window() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    rate_limit(&m, 5, 60_000);
    assert_eq!(claim(&m, 1, 1_000).expect("claimed").claimed.len(), 1);
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    ack(&m, &t, 1, None).expect("acked");
    m.rows.borrow_mut().clear(); // the done row went
    put(&m, 1, "again");
    assert_eq!(
        claim(&m, 1, 1_000)
            .expect("claimed")
            .claimed
            .iter()
            .next()
            .expect("a job")
            .token,
        1
    );
    let window: Vec<String> = m.members(Set::Rate).into_iter().map(|(m, _)| m).collect();
    assert_eq!(
        window,
        [format!("{}:1", name(1)), format!("{}:1:2", name(1))]
    );
}
