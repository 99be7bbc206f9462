//! Operating a queue: pause, results and progress, purge, bulk requeue, the dead set's
//! retention, and the event stream.

use super::*;

#[test]
fn a_paused_queue_hands_out_nothing_until_it_is_resumed() {
    use crate::queue::operate::{pause, resume};
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    assert_eq!(pause(&m), Ok(true));
    assert_eq!(pause(&m), Ok(false), "paused already");
    writes(&m);
    let out = claim(&m, 1, 1_000).expect("claimed");
    assert!(out.claimed.is_empty() && !out.more_behind);
    assert!(writes(&m).is_empty(), "a paused claim writes nothing");
    put(&m, 2, "still accepted");
    assert_eq!(resume(&m), Ok(true));
    assert_eq!(m.wakes.get(), 1, "the waiting claimers are woken");
    assert_eq!(resume(&m), Ok(false));
    assert_eq!(claim(&m, 2, 1_000).expect("claimed").claimed.len(), 2);
}

#[test]
fn an_ack_keeps_its_result_and_a_renewal_its_progress() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    renew(&m, &t, 1, 1_000, Some(b"half")).expect("renewed");
    assert_eq!(m.field(&name(1), "progress").as_deref(), Some("half"));
    ack(&m, &t, 1, Some(b"42")).expect("acked");
    assert_eq!(m.field(&name(1), "result").as_deref(), Some("42"));
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("done"));
}

#[test]
fn a_purge_deletes_the_oldest_jobs_of_a_set_and_never_active_ones() {
    use crate::queue::operate::purge;
    let m = Memory::at(NOW);
    for n in 1..=5 {
        put(&m, n, "p");
    }
    assert_eq!(purge(&m, Set::Pending, 3), Ok(3));
    assert_eq!(
        m.members(Set::Pending),
        [(name(4), 0.0), (name(5), 0.0)],
        "the lowest went first"
    );
    assert!(m.field(&name(1), "state").is_none(), "rows and all");
    assert_eq!(purge(&m, Set::Active, 3), Err(EmqError::Leased));
    assert_eq!(purge(&m, Set::Dead, 3), Ok(0));
}

#[test]
fn dead_jobs_come_back_in_bulk_oldest_first() {
    use crate::queue::operate::requeue_dead;
    let m = Memory::at(NOW);
    for n in 1..=3 {
        m.put(
            Set::Dead,
            &name(n),
            (NOW - 10 + n as i64) as f64,
            &[("state", "dead"), ("attempts", "25")],
        );
    }
    assert_eq!(requeue_dead(&m, 2), Ok(2));
    assert_eq!(m.members(Set::Pending), [(name(1), 0.0), (name(2), 0.0)]);
    assert_eq!(m.field(&name(1), "attempts").as_deref(), Some("0"));
    assert_eq!(m.members(Set::Dead), [(name(3), (NOW - 7) as f64)]);
}

#[test]
fn the_timer_trims_dead_jobs_past_their_age() {
    let m = Memory::at(NOW);
    let ttl = settings::dead_ttl_ms();
    m.put(
        Set::Dead,
        &name(1),
        (NOW - ttl - 1) as f64,
        &[("state", "dead")],
    );
    m.put(Set::Dead, &name(2), (NOW - 1) as f64, &[("state", "dead")]);
    let (_, next) = visit(&m, NOW, 100).expect("visited");
    assert_eq!(m.members(Set::Dead), [(name(2), (NOW - 1) as f64)]);
    assert!(m.field(&name(1), "state").is_none(), "its row went too");
    assert_eq!(next, Some(NOW - 1 + ttl), "when the next one is due to go");
}

#[test]
fn the_timer_trims_the_oldest_dead_jobs_beyond_the_limit_a_visit_at_a_time() {
    let m = Memory::at(NOW);
    let max = settings::dead_max_jobs() as u64;
    for n in 1..=(max + 3) {
        m.sets.borrow_mut()[Set::Dead.index()].insert(id(n).1, (NOW - 1) as f64);
    }
    let (_, next) = visit(&m, NOW, 2).expect("visited");
    assert_eq!(m.members(Set::Dead).len() as u64, max + 1);
    assert_eq!(next, Some(NOW), "more to trim: at once");
    visit(&m, NOW, 2).expect("visited");
    assert_eq!(m.members(Set::Dead).len() as u64, max);
    assert_eq!(m.members(Set::Dead)[0].0, name(4), "the oldest went");
}

#[test]
fn with_events_on_every_transition_appends_its_entry() {
    use crate::queue::operate::{pause, resume, set_events};
    let m = Memory::at(NOW);
    assert_eq!(set_events(&m, Some(100)), Ok(true));
    assert_eq!(set_events(&m, Some(100)), Ok(false));
    put(&m, 1, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    fail(&m, &t, 1, None, Some(0)).expect("failed");
    m.now.set(NOW + 1);
    claim(&m, 1, 1_000).expect("promoted and claimed again");
    ack(&m, &target(&m, 1, &member).expect("allowed"), 2, None).expect("acked");
    pause(&m).expect("paused");
    resume(&m).expect("resumed");
    let j = name(1);
    assert_eq!(
        *m.stream.borrow(),
        [
            format!("event=enqueued id={j} attempt=0"),
            format!("event=claimed id={j} attempt=1"),
            format!("event=retrying id={j} attempt=1"),
            format!("event=promoted id={j} attempt=1"),
            format!("event=claimed id={j} attempt=2"),
            format!("event=acked id={j} attempt=2"),
            "event=paused".to_string(),
            "event=resumed".to_string(),
        ]
    );
    assert_eq!(set_events(&m, None), Ok(true));
}

#[test]
fn the_event_stream_of_another_type_refuses_the_transition_before_it_writes() {
    use crate::queue::operate::set_events;
    let m = Memory::at(NOW);
    set_events(&m, Some(10)).expect("on");
    writes(&m);
    m.other.borrow_mut().push(MemKey::Events);
    let (i, member) = id(1);
    let job = Job {
        id: i,
        member: &member,
    };
    assert_eq!(
        enqueue(&m, Some(job), &b"p".to_vec(), Placement::Ready, 0),
        Err(EmqError::WrongType)
    );
    assert!(writes(&m).is_empty());
}
