//! Flows over memory (docs/flows.md): a parent's side (adopt, receive, release, burial) and a
//! child's (the hand-overs it keeps, the outbox), each in a queue's own store, and that a
//! refusal writes nothing.

use super::*;
use crate::protocol::flow::{write_parents, Delivery, Outcome, ParentRef, Policy};
use crate::protocol::Store;
use crate::queue::enqueue::{enqueue_flow, Flow};
use crate::queue::flow::{adopt, children_page, delivered, outbox_page, park, receive, Received};

/// A parent of `n` children, job `p` of `m`.
fn parent(m: &Memory, p: u64, n: i64) {
    let (id, member) = id(p);
    let flow = Flow {
        children: Some(n),
        parents: None,
    };
    let job = Some(Job {
        id,
        member: &member,
    });
    let added = enqueue_flow(m, job, &b"cb".to_vec(), Placement::Ready, 0, None, &flow);
    assert_eq!(added, Ok(Added::New));
}

/// Child `c` of queue `cq` finished with `outcome`, on its way to parent `p` of queue `pq`.
fn delivery(cq: &[u8], c: u64, pq: &[u8], p: u64, outcome: Outcome, policy: Policy) -> Delivery {
    Delivery {
        child_queue: cq.to_vec(),
        child: id(c).0,
        parent: ParentRef {
            queue: pq.to_vec(),
            id: id(p).0,
            policy,
        },
        outcome,
        data: format!("data of {c}").into_bytes(),
    }
}

#[test]
fn a_parent_waits_out_of_pending_and_registers_each_child_once() {
    let m = Memory::named(b"albums", NOW);
    parent(&m, 1, 2);
    assert_eq!(m.members(Set::Waiting), vec![(name(1), 0.0)]);
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("waiting"));
    assert_eq!(m.field(&name(1), "children").as_deref(), Some("2"));
    assert!(m.members(Set::Pending).is_empty());
    let (a, b, c) = (id(2).0, id(3).0, id(4).0);
    assert_eq!(adopt(&m, &id(1).0, Some((b"thumbs", &a)), true), Ok(true));
    assert_eq!(
        adopt(&m, &id(1).0, Some((b"thumbs", &a)), true),
        Ok(false),
        "again"
    );
    assert_eq!(adopt(&m, &id(1).0, Some((b"thumbs", &b)), true), Ok(true));
    writes(&m);
    let full = adopt(&m, &id(1).0, Some((b"thumbs", &c)), true);
    assert!(
        matches!(full, Err(EmqError::Parent(ref why)) if why.contains("has all its 2 children"))
    );
    let missing = adopt(&m, &id(9).0, Some((b"thumbs", &c)), true);
    assert!(matches!(missing, Err(EmqError::Parent(ref why)) if why.contains("does not exist")));
    assert!(writes(&m).is_empty(), "a refusal writes nothing");
    assert_eq!(m.field(&name(1), "adopted").as_deref(), Some("2"));
}

#[test]
fn the_last_child_releases_its_parent_and_a_second_delivery_counts_nothing() {
    let m = Memory::named(b"albums", NOW);
    parent(&m, 1, 2);
    for c in [2, 3] {
        adopt(&m, &id(1).0, Some((b"thumbs", &id(c).0)), true).expect("adopted");
    }
    let first = delivery(b"thumbs", 2, b"albums", 1, Outcome::Acked, Policy::Fail);
    assert_eq!(receive(&m, &first), Ok(Received::Counted));
    writes(&m);
    assert_eq!(receive(&m, &first), Ok(Received::Duplicate));
    // The count is written again as it is (its replicas confirm it with the reply), and
    // nothing else.
    let again = writes(&m);
    assert_eq!(again.len(), 1, "{again:?}");
    assert!(
        again[0].starts_with("HSET ") && again[0].contains("child:thumbs:"),
        "{again:?}"
    );
    assert_eq!(m.field(&name(1), "finished").as_deref(), Some("1"));
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("waiting"));
    let second = delivery(b"thumbs", 3, b"albums", 1, Outcome::Dead, Policy::Ignore);
    assert_eq!(receive(&m, &second), Ok(Received::Counted));
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("pending"));
    assert_eq!(m.members(Set::Pending), vec![(name(1), 0.0)]);
    assert!(m.members(Set::Waiting).is_empty());
    assert_eq!(m.field(&name(1), "finished").as_deref(), Some("2"));
    let (next, kids) = children_page(&m, &id(1).0, 0, 10).expect("page");
    assert_eq!(next, 0);
    let kids: Vec<(Outcome, Vec<u8>)> = kids.into_iter().map(|k| (k.outcome, k.data)).collect();
    assert_eq!(
        kids,
        vec![
            (Outcome::Acked, b"data of 2".to_vec()),
            (Outcome::Dead, b"data of 3".to_vec())
        ]
    );
    // Once released, another child is an orphan; so is any child of a parent that is gone.
    let late = delivery(b"thumbs", 4, b"albums", 1, Outcome::Acked, Policy::Fail);
    assert_eq!(receive(&m, &late), Ok(Received::Orphan));
    let gone = delivery(b"thumbs", 4, b"albums", 7, Outcome::Acked, Policy::Fail);
    assert_eq!(receive(&m, &gone), Ok(Received::Orphan));
}

#[test]
fn a_failing_child_buries_its_parent_and_the_parent_hands_over_in_turn() {
    let m = Memory::named(b"albums", NOW);
    parent(&m, 1, 2);
    // The parent is a child too: its death is kept for its own parent.
    let parents = write_parents(&[ParentRef {
        queue: b"top".to_vec(),
        id: id(50).0,
        policy: Policy::Fail,
    }]);
    m.rows
        .borrow_mut()
        .get_mut(name(1).as_bytes())
        .expect("row")
        .0
        .push((b"parents".to_vec(), parents));
    let d = delivery(b"thumbs", 2, b"albums", 1, Outcome::Cancelled, Policy::Fail);
    assert_eq!(
        receive(&m, &d),
        Ok(Received::Counted),
        "registered at hand-over: room"
    );
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("dead"));
    assert_eq!(
        m.field(&name(1), "error"),
        Some(format!("child thumbs {} cancelled: data of 2", name(2)))
    );
    assert_eq!(m.members(Set::Dead), vec![(name(1), NOW as f64)]);
    let kept = m.take_deferred();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].parent.queue.as_slice(), kept[0].outcome),
        (&b"top"[..], Outcome::Dead)
    );
}

#[test]
fn an_acked_child_keeps_one_hand_over_per_parent_and_a_plain_job_none() {
    let m = Memory::named(b"thumbs", NOW);
    put(&m, 1, "plain");
    let (cid, member) = id(2);
    let flow = Flow {
        children: None,
        parents: Some(write_parents(&[
            ParentRef {
                queue: b"a".to_vec(),
                id: id(8).0,
                policy: Policy::Fail,
            },
            ParentRef {
                queue: b"b".to_vec(),
                id: id(9).0,
                policy: Policy::Ignore,
            },
        ])),
    };
    let job = Some(Job {
        id: cid,
        member: &member,
    });
    enqueue_flow(&m, job, &b"c".to_vec(), Placement::Ready, 0, None, &flow).expect("child");
    let jobs = claim(&m, 2, 1_000).expect("claimed").claimed;
    assert_eq!(jobs.len(), 2);
    for (n, member) in [(1, id(1).1), (2, member)] {
        let t = target(&m, n, &member).expect("allowed");
        ack(&m, &t, 1, Some(b"r")).expect("acked");
    }
    let kept = m.take_deferred();
    let to: Vec<(&[u8], Policy, &[u8])> = kept
        .iter()
        .map(|d| {
            (
                d.parent.queue.as_slice(),
                d.parent.policy,
                d.data.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        to,
        vec![
            (&b"a"[..], Policy::Fail, &b"r"[..]),
            (&b"b"[..], Policy::Ignore, &b"r"[..])
        ]
    );
    // Parked, paged and delivered: the outbox is the child queue's own.
    for d in &kept {
        park(&m, d).expect("parked");
    }
    let (next, page) = outbox_page(&m, 0, 100).expect("page");
    assert_eq!((next, page.len()), (0, 2));
    assert_eq!(delivered(&m, &kept[0], false), Ok(true));
    assert_eq!(delivered(&m, &kept[0], false), Ok(false), "once");
    assert_eq!(
        outbox_page(&m, 0, 100).expect("page").1,
        vec![kept[1].clone()]
    );
}
