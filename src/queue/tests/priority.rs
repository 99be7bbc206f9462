//! Priorities: the claim's order, and a job's priority on every way back to pending.

use super::*;

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
    assert_eq!(crate::queue::operate::requeue_dead(&m, 10), Ok(1));
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
