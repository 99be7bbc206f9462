//! Pausing one group (docs/groups.md): `EMQ.PAUSE <queue> GROUP <g> [FOR <ms>]` keeps claims off
//! its ready jobs until `EMQ.RESUME <queue> GROUP <g>`, or, with `FOR`, until the timer resumes
//! it. `pauses` holds the paused groups, scored by when each resumes; a paused group has no
//! turn.

use crate::protocol::settings::MAX_UNIX_MS;
use crate::protocol::{EmqError, KeyRef, Set, Store, Table};

use super::{quota, ready};

/// The score of a group paused until it is resumed.
pub const FOREVER: i64 = i64::MAX;

fn open<S: Store>(store: &S, group: &[u8]) -> Result<(), EmqError> {
    store.check_access(&[
        KeyRef::Set(Set::Pauses),
        KeyRef::Set(Set::Turns),
        KeyRef::Set(Set::Held),
        KeyRef::Set(Set::Groups),
        KeyRef::Group(group),
    ])?;
    store.open_sets(&[Set::Pauses, Set::Turns, Set::Held, Set::Groups])?;
    // What a resume reads (the group's counts and limits), before its first write.
    store.table_len(Table::Tally)?;
    store.table_len(Table::Quotas)?;
    store.group_len(group).map(drop)
}

/// `EMQ.PAUSE <queue> GROUP <g> [FOR <ms>]`: pauses the group until `until` (unix ms; `None`:
/// until resumed), or changes when it resumes; whether it was not paused already.
pub fn pause<S: Store>(store: &S, group: &[u8], until: Option<i64>) -> Result<bool, EmqError> {
    open(store, group)?;
    // A pause makes the queue grouped, as a group's first job or limit does: its timer then
    // resumes the group.
    let grouped = ready::grouped(store)?;
    if !grouped {
        store.check_access(&[KeyRef::Meta, KeyRef::Set(Set::Active)])?;
        store.open_sets(&[Set::Active])?;
        store.table_len(Table::Tally)?;
    }
    let name = store.text(group)?;
    if !grouped {
        quota::mark_grouped(store)?;
    }
    let was = store.score(Set::Pauses, &name).is_some();
    store.add(Set::Pauses, until.unwrap_or(FOREVER), &name)?;
    store.remove(Set::Turns, &name)?;
    ready::index(store, &name, 0)?;
    Ok(!was)
}

/// `EMQ.RESUME <queue> GROUP <g>`: the group takes its turn again; whether it was paused.
pub fn resume<S: Store>(store: &S, group: &[u8]) -> Result<bool, EmqError> {
    open(store, group)?;
    let name = store.text(group)?;
    if !store.remove(Set::Pauses, &name)? {
        return Ok(false);
    }
    back(store, &name)?;
    Ok(true)
}

/// A resumed group with ready jobs takes its turn, unless its limit holds it back; one with
/// nothing left is forgotten.
fn back<S: Store>(store: &S, group: &S::Text) -> Result<(), EmqError> {
    if store.group_len(store.bytes(group))? == 0 {
        return ready::forget_if_idle(store, group);
    }
    if store.score(Set::Held, group).is_some() {
        return Ok(());
    }
    ready::take_turn(store, group)?;
    store.wake_claimers()
}

/// The timer's part: resumes up to `budget` groups whose pause ended by `now`; when the next
/// one ends (`None`: no pause ends by itself).
pub fn resume_due<S: Store>(store: &S, now: i64, budget: usize) -> Result<Option<i64>, EmqError> {
    store.open_sets(&[Set::Pauses])?;
    if store.len(Set::Pauses) == 0 {
        return Ok(None);
    }
    store.open_sets(&[Set::Turns, Set::Held, Set::Groups])?;
    let due = store.range(Set::Pauses, f64::NEG_INFINITY, now as f64, budget)?;
    for (group, _) in &due {
        store.remove(Set::Pauses, group)?;
        back(store, group)?;
    }
    if due.len() >= budget {
        return Ok(Some(now));
    }
    Ok(store
        .range(Set::Pauses, f64::NEG_INFINITY, MAX_UNIX_MS as f64, 1)?
        .first()
        .map(|(_, at)| *at as i64))
}
