//! Groups' limits (docs/groups.md): how many jobs of one group may be active at once and how
//! many claims of it any window may hold, a default for every group (`meta`
//! `group-concurrency`, `group-rate`, `group-rate-per`) and a group's own (`quotas`). In a
//! grouped queue `tally` counts each group's active jobs whatever its limits, so a concurrency
//! limit set later is exact; a group under a rate limit has its claims in `windows` (scored by
//! when each leaves its window) and their count in `tally`. A group at a limit leaves `turns`
//! for `held`; the job that frees a place, or the claim that leaves the window, brings it back.
//! Claims read the limits as the queue's settings; the counts are the queue's own bookkeeping,
//! written by every transition out of `active` without a permission check of their own.

use crate::protocol::limits::{rate_member, Rate};
use crate::protocol::{BrandedId, EmqError, KeyRef, Meta, Set, Store, Table};

use crate::protocol::metrics::Ended;

use super::tally::{self, add_active};
use super::{ready, timing};

pub use super::tally::{any, GroupLimits};

/// Most held groups one change of a limit brings back at once; the others come back as their
/// active jobs finish or their claims leave the window.
pub const READMIT_BUDGET: usize = 1000;

/// Marks a queue that is not grouped yet grouped (`meta` `groups`), counting the jobs active
/// then as the default group's. The caller checked `meta` and `active`, and opened `active`.
pub fn mark_grouped<S: Store>(store: &S) -> Result<(), EmqError> {
    store.set_meta(Meta::Groups, b"1")?;
    match store.len(Set::Active) {
        0 => Ok(()),
        n => store.table_set(Table::Tally, b"active:", n.to_string().as_bytes()),
    }
}

/// Opens what [`left_active`] writes in a grouped queue for the jobs of `rows` (`tally`,
/// `quotas`, `held`, `pauses`, `groups`, `turns`, and each job's group key): called before a
/// job leaves `active`, so a key of the wrong type refuses the call before its first write
/// rather than after the job left the set.
pub fn ready_to_leave<S: Store>(store: &S, rows: &[&S::Row<'_>]) -> Result<(), EmqError> {
    if !ready::grouped(store)? {
        return Ok(());
    }
    store.open_sets(&[Set::Held, Set::Pauses, Set::Groups, Set::Turns])?;
    store.table_len(Table::Tally)?;
    store.table_len(Table::Quotas)?;
    for &row in rows {
        if let Some(group) = ready::group_of(store, true, row) {
            store.group_len(store.bytes(&group))?;
        }
    }
    Ok(())
}

/// A job left `active`, its attempt `ended` (acked, failed, expired, timed out, cancelled): the
/// metrics are told (`id`: the member's id where the caller parsed it), and in a grouped queue
/// its group has one active job fewer, and a group held back by its limits takes its turn
/// again once they leave it room.
pub fn left_active<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    id: Option<BrandedId>,
    ended: Ended,
) -> Result<(), EmqError> {
    timing::ended(store, member, id, ended);
    if !ready::grouped(store)? {
        return Ok(());
    }
    let group = ready::group_of(store, true, row);
    let name = group.as_ref().map_or(&b""[..], |g| store.bytes(g));
    let left = add_active(store, name, -1)?;
    store.open_sets(&[Set::Held, Set::Pauses, Set::Groups])?;
    let group = match group {
        Some(g) => g,
        None => store.text(b"")?,
    };
    if left == 0 {
        ready::forget_if_idle(store, &group)?;
    }
    readmit_if_room(store, &group, &GroupLimits::read_defaults(store)?)
}

/// A held group whose limits leave it room takes its turn again.
fn readmit_if_room<S: Store>(
    store: &S,
    group: &S::Text,
    defaults: &GroupLimits,
) -> Result<(), EmqError> {
    if store.score(Set::Held, group).is_none() {
        return Ok(());
    }
    let name = store.bytes(group);
    if defaults.of(store, name)?.room(store, name)? > 0 {
        readmit(store, group)?;
    }
    Ok(())
}

/// A held group takes its turn again, behind the others (unless it is paused), and the
/// claimers are woken.
pub fn readmit<S: Store>(store: &S, group: &S::Text) -> Result<(), EmqError> {
    store.open_sets(&[Set::Held, Set::Turns, Set::Pauses])?;
    store.remove(Set::Held, group)?;
    if store.score(Set::Pauses, group).is_none() {
        ready::take_turn(store, group)?;
    }
    store.wake_claimers()
}

/// A limit changed: up to [`READMIT_BUDGET`] held groups take their turns again (a claim holds
/// back those still at their limit); how many.
pub fn readmit_held<S: Store>(store: &S) -> Result<usize, EmqError> {
    store.check_access(&[
        KeyRef::Set(Set::Held),
        KeyRef::Set(Set::Turns),
        KeyRef::Set(Set::Pauses),
    ])?;
    store.open_sets(&[Set::Held, Set::Turns, Set::Pauses])?;
    let held = store.range(Set::Held, f64::NEG_INFINITY, f64::INFINITY, READMIT_BUDGET)?;
    for (group, _) in &held {
        store.remove(Set::Held, group)?;
        if store.score(Set::Pauses, group).is_none() {
            ready::take_turn(store, group)?;
        }
    }
    if !held.is_empty() {
        store.wake_claimers()?;
    }
    Ok(held.len())
}

/// A claim's jobs of `group` enter its rate window at `now`, for `rate.per_ms`.
pub fn record_claims<'c, S: Store>(
    store: &S,
    group: &[u8],
    rate: Rate,
    now: i64,
    claims: impl Iterator<Item = (&'c [u8], i64)>,
) -> Result<(), EmqError> {
    let mut members = Vec::new();
    for (id, attempt) in claims {
        // `<group> <id>:<attempt>@<now>`: a row made again under the same id takes the same
        // tokens again, so the claim's time keeps each member its own.
        let mut member = group.to_vec();
        member.push(b' ');
        member.extend_from_slice(&rate_member(id, attempt));
        member.extend_from_slice(format!("@{now}").as_bytes());
        members.push(store.text(&member)?);
    }
    let leaves = now.saturating_add(rate.per_ms);
    let scored: Vec<(i64, &S::Text)> = members.iter().map(|m| (leaves, m)).collect();
    store.add_many(Set::Windows, &scored)?;
    tally::add_in_window(store, group, members.len() as i64).map(drop)
}

/// Takes out of the windows up to `budget` claims that left them by `now`; each group held
/// back that this leaves room takes its turn again. When the next claim leaves its window
/// (`None`: none is left).
pub fn trim_windows<S: Store>(store: &S, now: i64, budget: usize) -> Result<Option<i64>, EmqError> {
    store.open_sets(&[Set::Windows])?;
    if store.len(Set::Windows) == 0 {
        return Ok(None);
    }
    store.open_sets(&[Set::Held, Set::Turns, Set::Pauses])?;
    // The counts and limits it reads and writes, before its first write.
    store.table_len(Table::Tally)?;
    store.table_len(Table::Quotas)?;
    let left = store.range(Set::Windows, f64::NEG_INFINITY, now as f64, budget)?;
    let members: Vec<&S::Text> = left.iter().map(|(m, _)| m).collect();
    store.remove_many(Set::Windows, &members)?;
    let mut groups: Vec<(Vec<u8>, i64)> = Vec::new();
    for (member, _) in &left {
        let bytes = store.bytes(member);
        let group = bytes.split(|b| *b == b' ').next().unwrap_or_default();
        match groups.iter_mut().find(|(g, _)| g == group) {
            Some((_, n)) => *n += 1,
            None => groups.push((group.to_vec(), 1)),
        }
    }
    let defaults = GroupLimits::read_defaults(store)?;
    for (group, n) in &groups {
        tally::add_in_window(store, group, -n)?;
        readmit_if_room(store, &store.text(group)?, &defaults)?;
    }
    if left.len() >= budget {
        return Ok(Some(now));
    }
    Ok(store
        .range(Set::Windows, f64::NEG_INFINITY, f64::INFINITY, 1)?
        .first()
        .map(|(_, at)| *at as i64))
}
