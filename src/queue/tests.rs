//! Every transition over the in-memory store: what it writes, in which order, and that a
//! refusal writes nothing.

use super::claim::{claim, ORPHAN_BUDGET};
use super::enqueue::{check_new, enqueue, enqueue_many, Added, BatchJob, Placement};
use super::job::{cancel, requeue, Target};
use super::lease::{ack, fail, renew, Failed};
use super::memory::{MemKey, Memory};
use super::promote::{next_due, visit};
use super::stats::stats;
use super::Job;
use crate::protocol::{settings, BrandedId, EmqError, Set};

const NOW: i64 = 1_800_000_000_000;

fn id(n: u64) -> (BrandedId, Vec<u8>) {
    let id = BrandedId::new(*b"JOB", n).expect("a valid id");
    (id, id.encode().to_vec())
}

fn name(n: u64) -> String {
    String::from_utf8(id(n).1).expect("ascii")
}

/// One job of a batch: `job` by its id, or one to mint (`None`), with `payload` at `priority`.
fn batch_job<'j>(
    job: Option<&'j (BrandedId, Vec<u8>)>,
    payload: &'j Vec<u8>,
    priority: i64,
) -> BatchJob<'j, Memory> {
    BatchJob {
        job: job.map(|(id, member)| Job { id: *id, member }),
        payload,
        priority,
    }
}

/// Enqueues job `n` with `payload`, now.
fn put(m: &Memory, n: u64, payload: &str) -> Added {
    let (id, member) = id(n);
    enqueue(
        m,
        Some(Job {
            id,
            member: &member,
        }),
        &payload.as_bytes().to_vec(),
        Placement::Ready,
        0,
    )
    .expect("enqueued")
}

fn target<'j>(m: &Memory, n: u64, member: &'j Vec<u8>) -> Result<Target<'j, Memory>, EmqError> {
    Target::check(
        m,
        Job {
            id: id(n).0,
            member,
        },
    )
}

fn writes(m: &Memory) -> Vec<String> {
    std::mem::take(&mut *m.writes.borrow_mut())
}

#[test]
fn an_enqueue_writes_the_reference_row_then_the_pending_set_and_a_duplicate_nothing() {
    let m = Memory::at(NOW);
    assert_eq!(put(&m, 1, "hello"), Added::New);
    let j = name(1);
    assert_eq!(
        writes(&m),
        [
            format!("HSET {j} state pending attempts 0 payload hello"),
            format!("ZADD Pending 0 {j}"),
        ]
    );
    assert_eq!(put(&m, 1, "again"), Added::Duplicate);
    assert!(writes(&m).is_empty(), "a duplicate writes nothing");
    assert_eq!(m.field(&j, "payload").as_deref(), Some("hello"));
}

#[test]
fn a_delayed_enqueue_parks_the_job_in_schedule_at_its_due_time() {
    let m = Memory::at(NOW);
    let (id, member) = id(2);
    let due = NOW + 5_000;
    let added = enqueue(
        &m,
        Some(Job {
            id,
            member: &member,
        }),
        &b"p".to_vec(),
        Placement::at(due, NOW),
        0,
    );
    assert_eq!(added, Ok(Added::New));
    assert_eq!(m.members(Set::Schedule), [(name(2), due as f64)]);
    assert_eq!(m.field(&name(2), "state").as_deref(), Some("scheduled"));
    assert_eq!(
        Placement::at(NOW, NOW),
        Placement::Ready,
        "a time come is now"
    );
}

#[test]
fn a_minted_enqueue_gets_a_fresh_job_id() {
    let m = Memory::at(NOW);
    let Ok(Added::Minted(minted)) = enqueue(&m, None, &b"p".to_vec(), Placement::Ready, 0) else {
        panic!("minted");
    };
    assert!(minted.is_job());
    let text = String::from_utf8(minted.encode().to_vec()).expect("ascii");
    assert_eq!(m.members(Set::Pending), [(text, 0.0)]);
}

#[test]
fn only_job_ids_and_payloads_within_the_limit_are_accepted() {
    let order = BrandedId::new(*b"ORD", 1).expect("an id");
    assert_eq!(check_new(Some(&order), b"p"), Err(EmqError::Kind));
    assert_eq!(check_new(Some(&id(1).0), b"p"), Ok(()));
    let big = vec![0u8; settings::max_payload_bytes() as usize + 1];
    assert!(matches!(
        check_new(None, &big),
        Err(EmqError::Payload { .. })
    ));
}

#[test]
fn a_refused_enqueue_writes_nothing() {
    let m = Memory::at(NOW);
    m.denied.borrow_mut().push(MemKey::Set(Set::Pending));
    let (id1, member) = id(1);
    let job = Job {
        id: id1,
        member: &member,
    };
    assert_eq!(
        enqueue(&m, Some(job), &b"p".to_vec(), Placement::Ready, 0),
        Err(EmqError::NoPerm)
    );
    m.denied.borrow_mut().clear();
    m.other.borrow_mut().push(MemKey::Set(Set::Pending));
    let job = Job {
        id: id1,
        member: &member,
    };
    assert_eq!(
        enqueue(&m, Some(job), &b"p".to_vec(), Placement::Ready, 0),
        Err(EmqError::WrongType)
    );
    assert!(writes(&m).is_empty());
}

#[test]
fn a_batch_is_all_or_nothing_and_marks_its_own_duplicates() {
    let m = Memory::at(NOW);
    let (a, b) = (id(1), id(2));
    let payload = b"p".to_vec();
    let jobs = [
        batch_job(Some(&a), &payload, 0),
        batch_job(Some(&a), &payload, 0),
        batch_job(None, &payload, 0),
    ];
    let added = enqueue_many(&m, &jobs).expect("enqueued");
    assert_eq!(added[..2], [Added::New, Added::Duplicate]);
    assert!(matches!(added[2], Added::Minted(_)));
    let w = writes(&m);
    assert_eq!(w.len(), 3, "two rows and one variadic ZADD: {w:?}");
    assert!(w[2].starts_with(&format!("ZADD Pending 0 {} 0 JOB", name(1))));

    m.denied.borrow_mut().push(MemKey::Row(b.1.clone()));
    let jobs = [
        batch_job(None, &payload, 0),
        batch_job(Some(&b), &payload, 0),
    ];
    assert_eq!(enqueue_many(&m, &jobs), Err(EmqError::NoPerm));
    assert!(writes(&m).is_empty(), "one refusal refuses the batch");
}

#[test]
fn a_claim_takes_the_lowest_ids_in_order_under_a_lease() {
    let m = Memory::at(NOW);
    for n in [3, 1, 2] {
        put(&m, n, &format!("job{n}"));
    }
    writes(&m);
    let out = claim(&m, 2, 1_000).expect("claimed");
    let got: Vec<(String, String, i64)> = out
        .claimed
        .iter()
        .map(|c| {
            (
                String::from_utf8_lossy(c.id).into_owned(),
                String::from_utf8_lossy(c.payload).into_owned(),
                c.token,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (name(1), "job1".to_string(), 1),
            (name(2), "job2".to_string(), 1)
        ]
    );
    assert_eq!(
        m.members(Set::Active),
        [
            (name(1), (NOW + 1_000) as f64),
            (name(2), (NOW + 1_000) as f64)
        ]
    );
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("active"));
    // The sets change once for the batch: one ZREM out of pending, one ZADD into active.
    let at = NOW + 1_000;
    assert_eq!(
        writes(&m)[..4],
        [
            format!("ZREM Pending {} {}", name(1), name(2)),
            format!("HSET {} state active attempts 1", name(1)),
            format!("HSET {} state active attempts 1", name(2)),
            format!("ZADD Active {at} {} {at} {}", name(1), name(2)),
        ]
    );
    assert!(!out.more_behind);
}

#[test]
fn a_claim_drops_members_whose_row_is_gone_and_hands_out_the_job_behind_them() {
    let m = Memory::at(NOW);
    m.sets.borrow_mut()[Set::Pending.index()].insert(id(1).1, 0.0); // no row
    put(&m, 2, "live");
    let out = claim(&m, 1, 1_000).expect("claimed");
    assert_eq!(out.claimed.len(), 1);
    assert_eq!(out.claimed.iter().next().expect("a job").id, id(2).1);
    assert!(m.members(Set::Pending).is_empty());
}

#[test]
fn a_claim_over_rowless_members_stops_at_its_budget_and_says_more_are_behind() {
    let m = Memory::at(NOW);
    // One claim of one job reads at most 1 + ORPHAN_BUDGET members.
    for n in 1..=(ORPHAN_BUDGET as u64 + 5) {
        m.sets.borrow_mut()[Set::Pending.index()].insert(id(n).1, 0.0);
    }
    let out = claim(&m, 1, 1_000).expect("claimed");
    assert!(out.claimed.is_empty());
    assert!(out.more_behind);
    assert_eq!(m.members(Set::Pending).len(), 4);
}

#[test]
fn a_claim_meeting_a_row_of_another_type_refuses_before_writing() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    writes(&m);
    m.other.borrow_mut().push(MemKey::Row(id(1).1));
    assert_eq!(claim(&m, 1, 1_000).err(), Some(EmqError::WrongType));
    assert!(writes(&m).is_empty());
}

#[test]
fn a_claim_promotes_due_jobs_first() {
    let m = Memory::at(NOW);
    m.put(
        Set::Schedule,
        &name(1),
        (NOW - 1) as f64,
        &[
            ("state", "scheduled"),
            ("attempts", "0"),
            ("payload", "due"),
        ],
    );
    let out = claim(&m, 1, 1_000).expect("claimed");
    assert_eq!(out.claimed.iter().next().expect("a job").id, id(1).1);
    assert!(m.members(Set::Schedule).is_empty());
}

#[test]
fn an_ack_with_a_stale_token_is_refused_and_the_right_one_settles_the_job() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    claim(&m, 1, 1_000).expect("claimed");
    writes(&m);
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    assert_eq!(ack(&m, &t, 2, None), Err(EmqError::Lease));
    assert!(writes(&m).is_empty());
    assert_eq!(ack(&m, &t, 1, None), Ok(()));
    assert!(m.members(Set::Active).is_empty());
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("done"));
    assert_eq!(m.expiry(&name(1)), Some(NOW + settings::done_ttl_ms()));
    assert_eq!(ack(&m, &t, 1, None), Err(EmqError::Lease), "once");
}

#[test]
fn a_renew_moves_the_deadline_for_the_holder_only() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    m.now.set(NOW + 500);
    assert_eq!(renew(&m, &t, 1, 2_000, None), Ok(NOW + 2_500));
    assert_eq!(m.members(Set::Active), [(name(1), (NOW + 2_500) as f64)]);
    assert_eq!(renew(&m, &t, 7, 2_000, None), Err(EmqError::Lease));
}

#[test]
fn a_failure_retries_with_backoff_and_the_last_attempt_buries_the_job() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    assert_eq!(fail(&m, &t, 1, Some(b"boom"), None), Ok(Failed::Scheduled));
    assert_eq!(
        m.members(Set::Schedule),
        [(name(1), (NOW + settings::backoff_ms(1)) as f64)]
    );
    assert_eq!(m.field(&name(1), "error").as_deref(), Some("boom"));

    // The last attempt: the row says attempts = max, the job active under that token.
    let last = settings::max_attempts();
    m.put(
        Set::Active,
        &name(2),
        (NOW + 1_000) as f64,
        &[
            ("state", "active"),
            ("attempts", &last.to_string()),
            ("payload", "p"),
        ],
    );
    let member = id(2).1;
    let t = target(&m, 2, &member).expect("allowed");
    assert_eq!(
        fail(&m, &t, last, Some(b"again"), Some(0)),
        Ok(Failed::Dead)
    );
    assert_eq!(m.members(Set::Dead), [(name(2), NOW as f64)]);
    assert_eq!(m.field(&name(2), "state").as_deref(), Some("dead"));
}

#[test]
fn a_cancel_removes_only_waiting_jobs() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    put(&m, 2, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let (m1, m2) = (id(1).1, id(2).1);
    assert_eq!(
        cancel(&m, &target(&m, 1, &m1).expect("allowed")),
        Ok(false),
        "active"
    );
    assert_eq!(cancel(&m, &target(&m, 2, &m2).expect("allowed")), Ok(true));
    assert!(m.field(&name(2), "state").is_none(), "its row is gone");
    assert!(m.members(Set::Pending).is_empty());
}

#[test]
fn a_requeue_brings_a_dead_job_back_with_its_attempts_reset() {
    let m = Memory::at(NOW);
    m.put(
        Set::Dead,
        &name(1),
        NOW as f64,
        &[("state", "dead"), ("attempts", "25"), ("payload", "p")],
    );
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    assert_eq!(requeue(&m, &t), Ok(true));
    assert_eq!(m.members(Set::Pending), [(name(1), 0.0)]);
    assert_eq!(m.field(&name(1), "attempts").as_deref(), Some("0"));
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("pending"));
    assert_eq!(requeue(&m, &t), Ok(false), "not dead any more");
}

#[test]
fn a_target_needs_permission_on_every_set_and_the_row() {
    let m = Memory::at(NOW);
    m.denied.borrow_mut().push(MemKey::Set(Set::Dead));
    let member = id(1).1;
    assert_eq!(target(&m, 1, &member).err(), Some(EmqError::NoPerm));
}

#[test]
fn the_timer_returns_expired_leases_and_buries_those_on_their_last_attempt() {
    let m = Memory::at(NOW);
    let last = settings::max_attempts().to_string();
    m.put(
        Set::Active,
        &name(1),
        (NOW - 1) as f64,
        &[("state", "active"), ("attempts", "1")],
    );
    m.put(
        Set::Active,
        &name(2),
        (NOW - 1) as f64,
        &[("state", "active"), ("attempts", &last)],
    );
    m.put(
        Set::Schedule,
        &name(3),
        (NOW + 60_000) as f64,
        &[("state", "scheduled")],
    );
    let (moved, next) = visit(&m, NOW, 100).expect("visited");
    assert_eq!((moved.to_pending, moved.buried), (1, 1));
    assert_eq!(m.members(Set::Pending), [(name(1), 0.0)]);
    assert_eq!(m.members(Set::Dead), [(name(2), NOW as f64)]);
    assert_eq!(m.field(&name(2), "error").as_deref(), Some("lease expired"));
    assert_eq!(next, Some(NOW + 60_000), "the next due time");
    assert_eq!(next_due(&m), Ok(Some(NOW + 60_000)));
}

#[test]
fn a_visit_with_more_due_than_its_budget_comes_back_at_once() {
    let m = Memory::at(NOW);
    for n in 1..=3 {
        m.put(
            Set::Schedule,
            &name(n),
            (NOW - 10) as f64,
            &[("state", "scheduled")],
        );
    }
    let (moved, next) = visit(&m, NOW, 2).expect("visited");
    assert_eq!(moved.to_pending, 2);
    assert_eq!(next, Some(NOW));
}

#[test]
fn stats_count_each_set() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    put(&m, 2, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let s = stats(&m).expect("stats");
    assert_eq!((s.sets, s.paused), ([1, 1, 0, 0], false));
}

#[test]
fn a_paused_queue_hands_out_nothing_until_it_is_resumed() {
    use super::operate::{pause, resume};
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
    use super::operate::purge;
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
    use super::operate::requeue_dead;
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
    use super::operate::{pause, resume, set_events};
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
    use super::operate::set_events;
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

/// Enqueues job `n` at `priority`, now or at `due`.
fn put_at(m: &Memory, n: u64, priority: i64, due: Option<i64>) {
    let (id, member) = id(n);
    let placement = due.map_or(Placement::Ready, |at| Placement::at(at, NOW));
    let job = Job {
        id,
        member: &member,
    };
    enqueue(m, Some(job), &b"p".to_vec(), placement, priority).expect("enqueued");
}

#[test]
fn claims_take_the_lowest_priority_first_then_mint_order() {
    let m = Memory::at(NOW);
    put_at(&m, 1, 5, None);
    put_at(&m, 2, 0, None);
    put_at(&m, 3, -5, None);
    put_at(&m, 4, 0, None);
    let w = writes(&m);
    assert!(w.contains(&format!(
        "HSET {} state pending attempts 0 payload p priority -5",
        name(3)
    )));
    assert!(
        w.contains(&format!(
            "HSET {} state pending attempts 0 payload p",
            name(2)
        )),
        "priority 0 writes the reference row: {w:?}"
    );
    let claimed = claim(&m, 4, 1_000).expect("claimed").claimed;
    let order: Vec<Vec<u8>> = claimed.iter().map(|c| c.id.to_vec()).collect();
    assert_eq!(order, [id(3).1, id(2).1, id(4).1, id(1).1]);
}

#[test]
fn a_job_keeps_its_priority_on_every_way_back_to_pending() {
    let m = Memory::at(NOW);
    put_at(&m, 1, 7, Some(NOW + 100));
    assert_eq!(m.members(Set::Schedule), [(name(1), (NOW + 100) as f64)]);
    visit(&m, NOW + 100, 100).expect("promoted");
    assert_eq!(
        m.members(Set::Pending),
        [(name(1), 7.0)],
        "due: at its priority"
    );
    claim(&m, 1, 1_000).expect("claimed");
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("allowed");
    fail(&m, &t, 1, None, Some(0)).expect("failed");
    visit(&m, NOW + 100, 100).expect("promoted");
    assert_eq!(m.members(Set::Pending), [(name(1), 7.0)], "retried");
    claim(&m, 1, 1).expect("claimed");
    visit(&m, NOW + 200, 100).expect("lease expired");
    assert_eq!(m.members(Set::Pending), [(name(1), 7.0)], "lease expired");
    m.put(
        Set::Dead,
        &name(2),
        NOW as f64,
        &[("state", "dead"), ("attempts", "3"), ("priority", "-2")],
    );
    m.put(
        Set::Dead,
        &name(3),
        NOW as f64,
        &[("state", "dead"), ("attempts", "3"), ("priority", "4")],
    );
    let member = id(2).1;
    assert_eq!(
        requeue(&m, &target(&m, 2, &member).expect("allowed")),
        Ok(true)
    );
    assert_eq!(super::operate::requeue_dead(&m, 10), Ok(1));
    assert_eq!(
        m.members(Set::Pending),
        [(name(2), -2.0), (name(3), 4.0), (name(1), 7.0)],
        "requeued, one by one and in bulk"
    );
}

#[test]
fn a_batch_gives_each_job_its_own_priority() {
    let m = Memory::at(NOW);
    let (a, b) = (id(1), id(2));
    let payload = b"p".to_vec();
    let jobs = [
        batch_job(Some(&a), &payload, 3),
        batch_job(Some(&b), &payload, 0),
    ];
    enqueue_many(&m, &jobs).expect("enqueued");
    assert_eq!(m.members(Set::Pending), [(name(2), 0.0), (name(1), 3.0)]);
    assert_eq!(m.field(&name(1), "priority").as_deref(), Some("3"));
    assert_eq!(m.field(&name(2), "priority"), None);
}

// ---- claim limits ---------------------------------------------------------------------------

fn limit_to(m: &Memory, change: super::limit::Change) -> super::limit::Usage {
    super::limit::set(m, change).expect("limits set")
}

/// Sets a rate limit of `n` claims per `per_ms` (and no concurrency limit).
fn rate_limit(m: &Memory, n: i64, per_ms: i64) {
    limit_to(
        m,
        super::limit::Change {
            concurrency: None,
            rate: Some(Some(crate::protocol::limits::Rate { n, per_ms })),
        },
    );
}

#[test]
fn a_concurrency_limit_caps_active_jobs_and_a_settle_wakes_the_waiters() {
    use super::limit::Change;
    let m = Memory::at(NOW);
    for n in 1..=5 {
        put(&m, n, "p");
    }
    let usage = limit_to(
        &m,
        Change {
            concurrency: Some(Some(3)),
            rate: None,
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
    use super::limit::Change;
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

// ---- unique keys ----------------------------------------------------------------------------

/// Enqueues job `n` (or a minted one, for 0) holding `key`, for `for_ms` or until it is done.
fn put_unique(m: &Memory, n: u64, key: &str, for_ms: Option<i64>) -> Result<Added, EmqError> {
    use super::enqueue::enqueue_with;
    use super::unique::Unique;
    let (id, member) = id(n);
    let unique = Unique {
        key: key.as_bytes(),
        for_ms,
    };
    let job = (n != 0).then_some(Job {
        id,
        member: &member,
    });
    enqueue_with(m, job, &b"p".to_vec(), Placement::Ready, 0, Some(&unique))
}

#[test]
fn a_unique_key_is_held_until_its_job_is_done_and_a_held_one_writes_nothing() {
    let m = Memory::at(NOW);
    assert_eq!(put_unique(&m, 1, "order-7", None), Ok(Added::New));
    let j = name(1);
    assert_eq!(
        writes(&m),
        [
            format!("HSET {j} state pending attempts 0 payload p unique order-7"),
            format!("ZADD Pending 0 {j}"),
            format!("HSET Unique order-7 {j}"),
        ]
    );
    assert_eq!(put_unique(&m, 2, "order-7", None), Ok(Added::Held(id(1).0)));
    assert_eq!(put_unique(&m, 0, "order-7", None), Ok(Added::Held(id(1).0)));
    assert_eq!(put_unique(&m, 1, "order-7", None), Ok(Added::Duplicate));
    assert!(writes(&m).is_empty(), "a held key writes nothing");
    let out = claim(&m, 1, 1_000).expect("claimed");
    assert_eq!(put_unique(&m, 2, "order-7", None), Ok(Added::Held(id(1).0)));
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    ack(
        &m,
        &t,
        out.claimed.iter().next().expect("a job").token,
        None,
    )
    .expect("acked");
    assert_eq!(
        put_unique(&m, 2, "order-7", None),
        Ok(Added::New),
        "done frees it"
    );
    assert_eq!(
        m.table_fields(crate::protocol::Table::Unique),
        [(b"order-7".to_vec(), id(2).1)]
    );
}

#[test]
fn a_window_holds_its_key_for_its_time_whatever_becomes_of_the_job() {
    let m = Memory::at(NOW);
    assert_eq!(put_unique(&m, 1, "k", Some(1_000)), Ok(Added::New));
    assert_eq!(
        m.table_fields(crate::protocol::Table::Unique),
        [(
            b"k".to_vec(),
            format!("{}:{}", name(1), NOW + 1_000).into_bytes()
        )]
    );
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    claim(&m, 1, 1_000).expect("claimed");
    ack(&m, &t, 1, None).expect("acked");
    m.now.set(NOW + 999);
    assert_eq!(
        put_unique(&m, 2, "k", Some(1_000)),
        Ok(Added::Held(id(1).0))
    );
    m.now.set(NOW + 1_000);
    assert_eq!(put_unique(&m, 2, "k", Some(1_000)), Ok(Added::New));
}

#[test]
fn the_sweep_deletes_only_entries_that_hold_nothing() {
    use super::unique::{sweep, visit_table, SWEEP_ROUND_MS};
    use crate::protocol::Table;
    let m = Memory::at(NOW);
    put_unique(&m, 1, "ended", Some(10)).expect("put");
    put_unique(&m, 2, "live", Some(60_000)).expect("put");
    put_unique(&m, 3, "pending", None).expect("put");
    put_unique(&m, 4, "gone", None).expect("put");
    m.rows.borrow_mut().remove(&id(4).1);
    m.tables
        .borrow_mut()
        .insert((Table::Unique as u8, b"garbage".to_vec()), b"x".to_vec());
    writes(&m);
    m.now.set(NOW + 10);
    assert_eq!(sweep(&m, 0, NOW + 10), Ok((0, 3)));
    let left: Vec<Vec<u8>> = m
        .table_fields(Table::Unique)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(left, [b"live".to_vec(), b"pending".to_vec()]);
    assert_eq!(writes(&m).len(), 3, "one HDEL each");
    assert_eq!(
        visit_table(&m, 0, NOW + 10),
        Ok((0, Some(NOW + 10 + SWEEP_ROUND_MS)))
    );
}

#[test]
fn a_unique_table_of_another_type_or_out_of_reach_refuses_before_writing() {
    use crate::protocol::Table;
    let m = Memory::at(NOW);
    m.other.borrow_mut().push(MemKey::Table(Table::Unique));
    assert_eq!(put_unique(&m, 1, "k", None), Err(EmqError::WrongType));
    assert!(writes(&m).is_empty());
    m.other.borrow_mut().clear();
    m.denied.borrow_mut().push(MemKey::Table(Table::Unique));
    assert_eq!(put_unique(&m, 1, "k", None), Err(EmqError::NoPerm));
    assert!(writes(&m).is_empty());
    assert_eq!(put(&m, 1, "no key, no table"), Added::New);
}

#[test]
fn a_job_enqueued_again_under_the_holders_id_without_the_key_holds_nothing() {
    let m = Memory::at(NOW);
    put_unique(&m, 1, "k", None).expect("put");
    claim(&m, 1, 1_000).expect("claimed");
    let member = id(1).1;
    let t = target(&m, 1, &member).expect("target");
    ack(&m, &t, 1, None).expect("acked");
    m.rows.borrow_mut().clear(); // the done row went
    put(&m, 1, "again, without the key");
    assert_eq!(put_unique(&m, 2, "k", None), Ok(Added::New));
}

// ---- repeating jobs -------------------------------------------------------------------------

#[test]
fn a_due_schedule_fires_one_job_and_moves_its_next_firing_in_the_same_step() {
    use super::cron::{fire, list, remove, set};
    use crate::protocol::cron::Spec;
    let m = Memory::at(NOW);
    let next = set(&m, b"tick", Spec::Every(1_000), b"hello", 3).expect("set");
    assert_eq!(next, NOW + 1_000);
    assert_eq!(fire(&m, NOW + 999), Ok(Some(NOW + 1_000)), "not due yet");
    assert!(m.members(Set::Pending).is_empty());
    writes(&m);
    assert_eq!(fire(&m, NOW + 1_000), Ok(Some(NOW + 2_000)));
    let pending = m.members(Set::Pending);
    assert_eq!(pending.len(), 1);
    let (job, score) = &pending[0];
    assert_eq!(*score, 3.0, "the schedule's priority");
    assert_eq!(m.field(job, "payload").as_deref(), Some("hello"));
    assert_eq!(m.field(job, "cron").as_deref(), Some("tick"));
    let w = writes(&m);
    assert!(
        w.last().is_some_and(|l| l.starts_with("HSET Cron tick")),
        "{w:?}"
    );
    let (_, schedule) = list(&m).expect("list").remove(0);
    assert_eq!(
        (schedule.last, schedule.next),
        (Some(NOW + 1_000), Some(NOW + 2_000))
    );
    // Down over five firings: one job on return, and the grid kept.
    assert_eq!(fire(&m, NOW + 6_500), Ok(Some(NOW + 7_000)));
    assert_eq!(m.members(Set::Pending).len(), 2);
    assert_eq!(remove(&m, b"tick"), Ok(true));
    assert_eq!(fire(&m, NOW + 9_000), Ok(None));
    assert_eq!(m.members(Set::Pending).len(), 2);
}

#[test]
fn schedules_are_bounded_and_a_refused_one_writes_nothing() {
    use super::cron::set;
    use crate::protocol::cron::{Spec, MAX_SCHEDULES};
    use crate::protocol::Table;
    let m = Memory::at(NOW);
    for n in 0..MAX_SCHEDULES {
        set(&m, format!("s{n}").as_bytes(), Spec::Every(60_000), b"p", 0).expect("set");
    }
    writes(&m);
    let full = set(&m, b"one-more", Spec::Every(60_000), b"p", 0);
    assert!(matches!(full, Err(EmqError::Cron(_))), "{full:?}");
    assert!(writes(&m).is_empty());
    assert!(
        set(&m, b"s1", Spec::Every(1_000), b"replaced", 0).is_ok(),
        "a replacement fits"
    );
    let never = Spec::cron(b"0 0 30 2 *").expect("parses");
    assert!(matches!(
        set(&m, b"s2", never, b"p", 0),
        Err(EmqError::Cron(_))
    ));
    m.other.borrow_mut().push(MemKey::Table(Table::Cron));
    assert_eq!(
        set(&m, b"x", Spec::Every(1_000), b"p", 0),
        Err(EmqError::WrongType)
    );
    assert!(writes(&m).len() == 1, "only the replacement wrote");
}
