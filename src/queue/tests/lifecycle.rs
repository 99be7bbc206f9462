//! Enqueue, claim, renew, ack, fail, cancel, requeue, the timer and the counts.

use super::*;

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
fn a_cancel_removes_a_ready_job_and_ends_an_active_ones_attempt() {
    let m = Memory::at(NOW);
    put(&m, 1, "p");
    put(&m, 2, "p");
    claim(&m, 1, 1_000).expect("claimed");
    let (m1, m2) = (id(1).1, id(2).1);
    assert_eq!(
        cancel(&m, &target(&m, 1, &m1).expect("allowed")),
        Ok(true),
        "active"
    );
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("dead"));
    assert_eq!(m.field(&name(1), "error").as_deref(), Some("cancelled"));
    assert_eq!(m.field(&name(1), "cancelled").as_deref(), Some("1"));
    assert_eq!(m.members(Set::Dead), [(name(1), NOW as f64)]);
    assert!(m.members(Set::Active).is_empty());
    assert_eq!(
        cancel(&m, &target(&m, 1, &m1).expect("allowed")),
        Ok(false),
        "dead"
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
