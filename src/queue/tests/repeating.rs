//! Repeating jobs: schedules set, fired on time and removed.

use super::*;

#[test]
fn a_due_schedule_fires_one_job_and_moves_its_next_firing_in_the_same_step() {
    use crate::protocol::cron::Spec;
    use crate::queue::cron::{fire, list, remove, set};
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
    use crate::protocol::cron::{Spec, MAX_SCHEDULES};
    use crate::protocol::Table;
    use crate::queue::cron::set;
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
