//! Unique keys: held while their job lives, or for a window, and the sweep of the table.

use super::*;

/// Enqueues job `n` (or a minted one, for 0) holding `key`, for `for_ms` or until it is done.
fn put_unique(m: &Memory, n: u64, key: &str, for_ms: Option<i64>) -> Result<Added, EmqError> {
    use crate::queue::enqueue::enqueue_with;
    use crate::queue::unique::Unique;
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
    use crate::protocol::Table;
    use crate::queue::unique::{sweep, visit_table, SWEEP_ROUND_MS};
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

#[test]
fn a_dead_holders_entry_outlives_the_sweep_so_a_requeue_holds_its_key_whenever_the_sweep_ran() {
    use crate::queue::unique::sweep;
    let m = Memory::at(NOW);
    put_unique(&m, 1, "k", None).expect("put");
    let member = id(1).1;
    cancel(&m, &target(&m, 1, &member).expect("allowed")).expect("cancelled");
    // Pending, so the cancel deleted the row: the entry holds nothing, ever again.
    assert_eq!(sweep(&m, 0, NOW), Ok((0, 1)));
    put_unique(&m, 1, "k", None).expect("put");
    claim(&m, 1, 1_000).expect("claimed");
    cancel(&m, &target(&m, 1, &member).expect("allowed")).expect("cancelled");
    assert_eq!(m.field(&name(1), "state").as_deref(), Some("dead"));
    // Dead: the key is free now, but the sweep keeps the entry while the dead row is there.
    assert_eq!(sweep(&m, 0, NOW), Ok((0, 0)));
    assert_eq!(
        requeue(&m, &target(&m, 1, &member).expect("allowed")),
        Ok(true)
    );
    assert_eq!(put_unique(&m, 2, "k", None), Ok(Added::Held(id(1).0)));
}
