//! Flows over memory (docs/flows.md): a parent's side (adopt, receive, release, burial) and a
//! child's (the hand-overs it keeps, the outbox), each in a queue's own store, and that a
//! refusal writes nothing.

use super::*;
use crate::protocol::flow::{write_parents, Delivery, Outcome, ParentRef, Policy};
use crate::protocol::Store;
use crate::queue::enqueue::{enqueue_extras, Extras};
use crate::queue::flow::{
    adopt, children_page, delivered, first_parked, outbox_page, park, receive, unpark, Received,
};

/// A parent of `n` children, job `p` of `m`.
fn parent(m: &Memory, p: u64, n: i64) {
    let (id, member) = id(p);
    let flow = Extras {
        children: Some(n),
        parents: None,
        ..Extras::default()
    };
    let job = Some(Job {
        id,
        member: &member,
    });
    let added = enqueue_extras(m, job, &b"cb".to_vec(), Placement::Ready, 0, None, &flow);
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
    assert_eq!(adopt(&m, &id(1).0, b"thumbs", &a), Ok(true));
    assert_eq!(adopt(&m, &id(1).0, b"thumbs", &a), Ok(false), "again");
    assert_eq!(adopt(&m, &id(1).0, b"thumbs", &b), Ok(true));
    writes(&m);
    let full = adopt(&m, &id(1).0, b"thumbs", &c);
    assert!(
        matches!(full, Err(EmqError::Parent(ref why)) if why.contains("has all its 2 children"))
    );
    let missing = adopt(&m, &id(9).0, b"thumbs", &c);
    assert!(matches!(missing, Err(EmqError::Parent(ref why)) if why.contains("does not exist")));
    assert!(writes(&m).is_empty(), "a refusal writes nothing");
    assert_eq!(m.field(&name(1), "adopted").as_deref(), Some("2"));
}

#[test]
fn the_last_child_releases_its_parent_and_a_second_delivery_counts_nothing() {
    let m = Memory::named(b"albums", NOW);
    parent(&m, 1, 2);
    for c in [2, 3] {
        adopt(&m, &id(1).0, b"thumbs", &id(c).0).expect("adopted");
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
fn a_child_the_parent_never_registered_is_an_orphan_and_writes_nothing() {
    let m = Memory::named(b"albums", NOW);
    parent(&m, 1, 2);
    adopt(&m, &id(1).0, b"thumbs", &id(2).0).expect("adopted");
    writes(&m);
    // The parent has room for another child, but never registered this one: a forged hand-over.
    let forged = delivery(b"thumbs", 3, b"albums", 1, Outcome::Acked, Policy::Fail);
    assert_eq!(receive(&m, &forged), Ok(Received::Orphan));
    assert!(writes(&m).is_empty(), "an orphan writes nothing");
    assert_eq!(m.field(&name(1), "finished").as_deref(), Some("0"));
    assert_eq!(m.field(&name(1), "adopted").as_deref(), Some("1"));
    let registered = delivery(b"thumbs", 2, b"albums", 1, Outcome::Acked, Policy::Fail);
    assert_eq!(receive(&m, &registered), Ok(Received::Counted));
    assert_eq!(m.field(&name(1), "finished").as_deref(), Some("1"));
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
    adopt(&m, &id(1).0, b"thumbs", &id(2).0).expect("adopted");
    let d = delivery(b"thumbs", 2, b"albums", 1, Outcome::Cancelled, Policy::Fail);
    assert_eq!(receive(&m, &d), Ok(Received::Counted));
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
    let flow = Extras {
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
        ..Extras::default()
    };
    let job = Some(Job {
        id: cid,
        member: &member,
    });
    enqueue_extras(&m, job, &b"c".to_vec(), Placement::Ready, 0, None, &flow).expect("child");
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

#[test]
fn an_outbox_entry_keeps_the_first_outcome_of_its_child() {
    let m = Memory::named(b"thumbs", NOW);
    let dead = delivery(b"thumbs", 2, b"albums", 1, Outcome::Dead, Policy::Fail);
    park(&m, &dead).expect("parked");
    // The child, requeued and acked before its death was delivered, parks again: the death stays.
    let acked = delivery(b"thumbs", 2, b"albums", 1, Outcome::Acked, Policy::Fail);
    writes(&m);
    park(&m, &acked).expect("parked");
    assert!(writes(&m).is_empty(), "the second outcome writes nothing");
    assert_eq!(outbox_page(&m, 0, 100).expect("page").1, vec![dead]);
}

#[test]
fn a_child_is_not_finished_while_its_outbox_is_another_type() {
    let m = Memory::named(b"thumbs", NOW);
    let child = |n: u64, parent: &[u8]| {
        let (cid, member) = id(n);
        let flow = Extras {
            children: None,
            parents: Some(write_parents(&[ParentRef {
                queue: parent.to_vec(),
                id: id(50).0,
                policy: Policy::Fail,
            }])),
            ..Extras::default()
        };
        let job = Some(Job {
            id: cid,
            member: &member,
        });
        enqueue_extras(&m, job, &b"c".to_vec(), Placement::Ready, 0, None, &flow).expect("child");
    };
    child(1, b"away");
    child(2, b"near");
    m.other
        .borrow_mut()
        .push(MemKey::Table(crate::protocol::Table::Outbox));
    assert_eq!(claim(&m, 2, 1_000).expect("claimed").claimed.len(), 2);
    child(3, b"away");
    writes(&m);
    // Its hand-over could not be kept: refused before any write, in each transition that
    // finishes it.
    let (one, two) = (id(1).1, id(2).1);
    let t = target(&m, 1, &one).expect("allowed");
    assert_eq!(ack(&m, &t, 1, Some(b"r")), Err(EmqError::WrongType));
    let three = id(3).1;
    let pending = target(&m, 3, &three).expect("allowed");
    assert_eq!(cancel(&m, &pending), Err(EmqError::WrongType));
    // Its last attempt failing (its row says so, the lease under that token) kills it.
    let last = settings::max_attempts();
    for (f, v) in m
        .rows
        .borrow_mut()
        .get_mut(name(1).as_bytes())
        .expect("row")
        .0
        .iter_mut()
    {
        if f == b"attempts" {
            *v = last.to_string().into_bytes();
        }
    }
    writes(&m);
    assert_eq!(
        fail(&m, &t, last, Some(b"e"), None),
        Err(EmqError::WrongType)
    );
    assert!(writes(&m).is_empty(), "nothing written");
    assert!(m.take_deferred().is_empty());
    // A job whose parents are all in reach may need it too (a parent that refuses, a chain
    // back to a queue open in the call): refused as well.
    let t = target(&m, 2, &two).expect("allowed");
    assert_eq!(ack(&m, &t, 1, Some(b"r")), Err(EmqError::WrongType));
    assert!(writes(&m).is_empty(), "nothing written");
    m.other.borrow_mut().clear();
    assert_eq!(ack(&m, &t, 1, Some(b"r")), Ok(()));
    assert_eq!(m.take_deferred().len(), 1);
}

#[test]
fn a_hand_over_in_reach_takes_the_first_outcome_parked_for_it() {
    let m = Memory::named(b"thumbs", NOW);
    let acked = delivery(b"thumbs", 2, b"albums", 1, Outcome::Acked, Policy::Fail);
    // An empty outbox: the hand-over goes as it is.
    assert_eq!(first_parked(&m, acked.clone()), (acked.clone(), false));
    let dead = delivery(b"thumbs", 2, b"albums", 1, Outcome::Dead, Policy::Fail);
    park(&m, &dead).expect("parked");
    // Another child's or parent's entry is not this one's.
    let other = delivery(b"thumbs", 3, b"albums", 1, Outcome::Acked, Policy::Fail);
    assert_eq!(first_parked(&m, other.clone()), (other, false));
    // The parked death goes instead of the ack, and its entry goes once answered.
    assert_eq!(first_parked(&m, acked), (dead.clone(), true));
    unpark(&m, &dead).expect("unparked");
    assert!(outbox_page(&m, 0, 100).expect("page").1.is_empty());
}
