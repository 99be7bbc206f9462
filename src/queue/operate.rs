//! Operating a queue (protocol.md §9): pausing and resuming it, its event stream, purging a set, and
//! bringing dead jobs back in bulk. Every bulk transition is bounded per call and replies how
//! many jobs it moved, so a client loops until 0 and the server never stalls on a large set.

use crate::protocol::counters::{self, PURGED, REQUEUED};
use crate::protocol::{EmqError, Event, Holds, KeyRef, Meta, Set, Store};

use super::job::revive;
use super::promote::{count_dropped, purge_one, with_rows};
use super::{check_row_types, flow, record};

/// The default and the largest count of `EMQ.PURGE` and `EMQ.REQUEUE ... DEAD`.
pub const BULK_DEFAULT: i64 = 1_000;
pub const BULK_MAX: i64 = 10_000;

/// Whether the queue is paused (its `meta` hash says so).
pub fn paused<S: Store>(store: &S) -> Result<bool, EmqError> {
    Ok(store.meta(Meta::Paused)?.is_some())
}

/// `EMQ.PAUSE`: no claim takes a job until `EMQ.RESUME` (enqueues and the timer go on);
/// whether it was not paused already.
pub fn pause<S: Store>(store: &S) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Meta])?;
    if paused(store)? {
        return Ok(false);
    }
    store.events()?;
    store.set_meta(Meta::Paused, b"1")?;
    record(store, Event::Paused, None, || 0)?;
    Ok(true)
}

/// `EMQ.RESUME`: claims take jobs again, and the claimers waiting on the queue are served in
/// the order they came; whether it was paused.
pub fn resume<S: Store>(store: &S) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Meta])?;
    if !paused(store)? {
        return Ok(false);
    }
    store.events()?;
    store.del_meta(Meta::Paused)?;
    record(store, Event::Resumed, None, || 0)?;
    store.wake_claimers()?;
    Ok(true)
}

/// `EMQ.EVENTS ... ON [MAXLEN cap]` (`Some(cap)`) or `OFF` (`None`): every transition appends to
/// the queue's `events` stream while it is on, capped near `cap` entries. Whether the setting
/// changed.
pub fn set_events<S: Store>(store: &S, cap: Option<u64>) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Meta, KeyRef::Events])?;
    let now = store.meta(Meta::Events)?;
    match cap {
        Some(cap) => {
            let text = cap.to_string();
            if now.as_deref() == Some(text.as_bytes()) {
                return Ok(false);
            }
            store.set_meta(Meta::Events, text.as_bytes())?;
            Ok(true)
        }
        None => store.del_meta(Meta::Events),
    }
}

/// `EMQ.PURGE`: deletes up to `count` jobs of `set` (pending, scheduled or dead; an active job
/// is leased to a worker and cannot be), oldest first, rows and members; how many.
pub fn purge<S: Store>(store: &S, set: Set, count: usize) -> Result<usize, EmqError> {
    if set == Set::Active {
        return Err(EmqError::Leased);
    }
    store.check_access(&[KeyRef::Set(set)])?;
    store.open_sets(&[set])?;
    let members = with_rows(
        store,
        store.range(set, f64::NEG_INFINITY, f64::INFINITY, count)?,
    )?;
    let rows: Vec<&S::Name> = members.iter().filter_map(|m| m.row.as_ref()).collect();
    store.check_access(&rows.iter().map(|r| KeyRef::Row(*r)).collect::<Vec<_>>())?;
    check_row_types(store, &rows)?;
    store.events()?;
    for member in &members {
        purge_one(store, set, member)?;
    }
    counters::count(&PURGED, members.len() as u64);
    Ok(members.len())
}

/// `EMQ.REQUEUE <queue> DEAD [COUNT n]`: moves up to `count` of the oldest dead jobs back to
/// pending with their attempts reset; how many moved (a dead member whose row is gone is
/// dropped, and not counted).
pub fn requeue_dead<S: Store>(store: &S, count: usize) -> Result<usize, EmqError> {
    store.check_access(&[KeyRef::Set(Set::Dead), KeyRef::Set(Set::Pending)])?;
    store.open_sets(&[Set::Dead, Set::Pending])?;
    let members = with_rows(
        store,
        store.range(Set::Dead, f64::NEG_INFINITY, f64::INFINITY, count)?,
    )?;
    let rows: Vec<&S::Name> = members.iter().filter_map(|m| m.row.as_ref()).collect();
    store.check_access(&rows.iter().map(|r| KeyRef::Row(*r)).collect::<Vec<_>>())?;
    check_row_types(store, &rows)?;
    store.events()?;
    // Where each goes (`None`: its row is gone), read before the first write: a parent
    // that goes back to `waiting` needs that set too.
    let mut places = Vec::with_capacity(members.len());
    for member in &members {
        let place = match &member.row {
            Some(name) => {
                let row = store.open_row(name)?;
                (store.holds(&row) == Holds::Hash).then(|| flow::requeued_to(store, &row))
            }
            None => None,
        };
        places.push(place);
    }
    if places.contains(&Some(Set::Waiting)) {
        store.check_access(&[KeyRef::Set(Set::Waiting)])?;
        store.open_sets(&[Set::Waiting])?;
    }
    let mut moved = 0;
    for (member, place) in members.iter().zip(places) {
        let (Some(name), Some(to)) = (&member.row, place) else {
            store.remove(Set::Dead, &member.text)?;
            count_dropped();
            continue;
        };
        let row = store.open_row(name)?;
        revive(store, &row, &member.text, to)?;
        moved += 1;
    }
    counters::count(&REQUEUED, moved as u64);
    Ok(moved)
}
