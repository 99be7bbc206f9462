//! Where a ready job waits (protocol.md §9, docs/groups.md): a job of the default group in
//! `pending`, a job of a named group in its `group:<g>`. `turns` orders the named groups with
//! ready jobs for the claims' round robin, `tally`'s `pending` counts their jobs, and `groups`
//! indexes the named groups by backlog while they have jobs or settings. A queue that never had
//! a grouped job (no `meta` `groups`) reads none of this.

use crate::protocol::{EmqError, Field, KeyRef, Meta, Set, Store, Table};

use super::tally;

/// Whether the queue routes ready jobs by group (`meta` `groups`).
pub fn grouped<S: Store>(store: &S) -> Result<bool, EmqError> {
    Ok(store.meta(Meta::Groups)?.is_some())
}

/// The named group of a job's row, in a grouped queue (`None`: the default group, or a queue
/// that is not grouped, whose rows are not read for it).
pub fn group_of<S: Store>(store: &S, grouped: bool, row: &S::Row<'_>) -> Option<S::Text> {
    // A name outside the grammar (written by hand) is no group: the job is the default group's.
    grouped
        .then(|| store.field(row, Field::Group))
        .flatten()
        .filter(|g| crate::protocol::Group::parse(store.bytes(g)).is_some())
}

/// Checks the caller may write what a ready job of `group` touches, and that each key is of
/// its type: the group's key, the groups' sets (opened) and tables. Before the first write.
pub fn check<S: Store>(store: &S, group: &[u8]) -> Result<(), EmqError> {
    store.check_access(&[
        KeyRef::Group(group),
        KeyRef::Set(Set::Turns),
        KeyRef::Set(Set::Held),
        KeyRef::Set(Set::Pauses),
        KeyRef::Set(Set::Groups),
        KeyRef::Table(Table::Tally),
        KeyRef::Table(Table::Quotas),
    ])?;
    store.open_sets(&[Set::Turns, Set::Held, Set::Pauses, Set::Groups])?;
    store.group_len(group)?;
    store.table_len(Table::Tally)?;
    store.table_len(Table::Quotas)?;
    Ok(())
}

/// The named group of the job of `row`, its keys checked ([`check`]): what a transition that
/// makes the job ready reads before its first write.
pub fn checked_group<S: Store>(store: &S, row: &S::Row<'_>) -> Result<Option<S::Text>, EmqError> {
    let group = group_of(store, grouped(store)?, row);
    if let Some(group) = &group {
        check(store, store.bytes(group))?;
    }
    Ok(group)
}

/// Makes a ready job wait at `score`: in `pending`, or in its named group (checked before the
/// caller's first write), which takes its turn behind the others if it had none (or is held
/// back if its limits leave it no room), and wakes the claimers.
pub fn add<S: Store>(
    store: &S,
    group: Option<&S::Text>,
    score: i64,
    member: &S::Text,
) -> Result<(), EmqError> {
    let Some(group) = group else {
        return store.add(Set::Pending, score, member);
    };
    let name = store.bytes(group);
    store.group_add(name, score, member)?;
    // A group held back by its limit waits for a place, and a paused one for its resume, not
    // for a turn; a group that reached its limit since it last had a turn is held back now,
    // so no claim has to pass over it.
    if store.score(Set::Held, group).is_none() && store.score(Set::Pauses, group).is_none() {
        match tally::has_room(store, name)? {
            true => take_turn(store, group)?,
            false => {
                store.remove(Set::Turns, group)?;
                store.add(Set::Held, store.now_ms(), group)?;
            }
        }
    }
    tally::count(store, 1)?;
    index(store, group, 1)?;
    store.wake_claimers()
}

/// The named group's backlog in `groups` changes by `delta` (it joins the index with 0).
/// `groups` is open.
pub fn index<S: Store>(store: &S, group: &S::Text, delta: i64) -> Result<(), EmqError> {
    let backlog = -store.score(Set::Groups, group).unwrap_or(0.0) as i64;
    store.add(Set::Groups, -backlog.saturating_add(delta).max(0), group)
}

/// Each named group's backlog in `groups` falls by its count, in one write.
pub fn index_less<S: Store>(store: &S, taken: &[(&S::Text, u64)]) -> Result<(), EmqError> {
    let scored: Vec<(i64, &S::Text)> = taken
        .iter()
        .map(|(group, n)| {
            let backlog = -store.score(Set::Groups, group).unwrap_or(0.0) as i64;
            (-backlog.saturating_sub(*n as i64).max(0), *group)
        })
        .collect();
    store.add_many(Set::Groups, &scored)
}

/// Forgets a named group that has nothing left: no ready or active job, no limit of its own
/// and no pause (`groups`, `pauses` and `quotas` open or checked).
pub fn forget_if_idle<S: Store>(store: &S, group: &S::Text) -> Result<(), EmqError> {
    let name = store.bytes(group);
    if name.is_empty()
        || store.group_len(name)? != 0
        || tally::active(store, name)? != 0
        || tally::own(store, name)?.is_some()
        || tally::own_rate(store, name)?.is_some()
        || store.score(Set::Pauses, group).is_some()
    {
        return Ok(());
    }
    store.remove(Set::Groups, group).map(drop)
}

/// `group` takes a turn behind the others, unless it has one. `turns` is open.
pub fn take_turn<S: Store>(store: &S, group: &S::Text) -> Result<(), EmqError> {
    if store.score(Set::Turns, group).is_some() {
        return Ok(());
    }
    let last = store.last_score(Set::Turns)?.unwrap_or(0.0) as i64;
    store.add(Set::Turns, last + 1, group)
}

/// The named group of the job of `row` whose ready jobs hold `member`, in a grouped queue.
pub fn waits_in<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
) -> Result<Option<(S::Text, f64)>, EmqError> {
    let Some(group) = group_of(store, grouped(store)?, row) else {
        return Ok(None);
    };
    let name = store.bytes(&group);
    store.check_access(&[KeyRef::Group(name)])?;
    Ok(store.group_score(name, member)?.map(|score| (group, score)))
}

/// Takes a ready job out of where it waits (its group's key, when `group` names one); whether
/// it was there.
pub fn remove<S: Store>(
    store: &S,
    group: Option<&S::Text>,
    member: &S::Text,
) -> Result<bool, EmqError> {
    let Some(group) = group else {
        return store.remove(Set::Pending, member);
    };
    let name = store.bytes(group);
    check(store, name)?;
    let (there, left) = store.group_remove(name, &[member])?;
    let there = there.first() == Some(&true);
    if there {
        tally::count(store, -1)?;
        index(store, group, -1)?;
        if left == 0 {
            store.remove(Set::Turns, group)?;
            store.remove(Set::Held, group)?;
            forget_if_idle(store, group)?;
        }
    }
    Ok(there)
}

/// How many ready jobs the queue has: `pending`'s and, in a grouped queue, the named groups'.
pub fn ready_len<S: Store>(store: &S, grouped: bool) -> Result<u64, EmqError> {
    let named = match grouped {
        true => tally::grouped_len(store)?,
        false => 0,
    };
    Ok(store.len(Set::Pending) + named)
}
