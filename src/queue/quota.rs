//! Groups' concurrency limits (docs/groups.md): how many jobs of one group may be active at
//! once, a default for every group (`meta` `group-concurrency`) and a group's own (`quotas`
//! `concurrency:<g>`). In a grouped queue `tally` counts each group's active jobs
//! (`active:<g>`, `active:` the default group's) whatever its limits, so a limit set later is
//! exact. A group at its limit leaves `turns` for `held`; the job that frees a place brings it
//! back. Claims read the limits as the queue's settings; the counts are the queue's own
//! bookkeeping, written by every transition out of `active` without a permission check of
//! their own.

use crate::protocol::limits::{bounded, Limits, MAX_CONCURRENCY};
use crate::protocol::{EmqError, Field, KeyRef, Meta, Set, Store, Table};

use super::ready;

/// Most held groups one change of a limit brings back at once; the others come back as their
/// active jobs finish.
pub const READMIT_BUDGET: usize = 1000;

fn field(prefix: &[u8], group: &[u8]) -> Vec<u8> {
    [prefix, group].concat()
}

/// How many jobs of `group` (`""`: the default group) are active.
pub fn active<S: Store>(store: &S, group: &[u8]) -> Result<u64, EmqError> {
    let text = store.table_get(Table::Tally, &field(b"active:", group))?;
    Ok(text
        .as_ref()
        .and_then(|t| {
            std::str::from_utf8(store.bytes(t))
                .ok()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0))
}

/// Adds `delta` to the count of `group`'s active jobs (the field goes at 0); the new count.
pub fn add_active<S: Store>(store: &S, group: &[u8], delta: i64) -> Result<u64, EmqError> {
    let name = field(b"active:", group);
    let now = (active(store, group)? as i64).saturating_add(delta).max(0);
    match now {
        0 => store.table_del(Table::Tally, &name).map(drop)?,
        n => store.table_set(Table::Tally, &name, n.to_string().as_bytes())?,
    }
    Ok(now as u64)
}

/// A named group's own limit (`quotas`).
pub fn own<S: Store>(store: &S, group: &[u8]) -> Result<Option<i64>, EmqError> {
    if group.is_empty() {
        return Ok(None);
    }
    let text = store.table_get(Table::Quotas, &field(b"concurrency:", group))?;
    Ok(bounded(
        text.as_ref().map(|t| store.bytes(t)),
        MAX_CONCURRENCY,
    ))
}

/// Sets (`Some`) or removes a named group's own limit.
pub fn set_own<S: Store>(store: &S, group: &[u8], n: Option<i64>) -> Result<(), EmqError> {
    let name = field(b"concurrency:", group);
    match n {
        Some(n) => store.table_set(Table::Quotas, &name, n.to_string().as_bytes()),
        None => store.table_del(Table::Quotas, &name).map(drop),
    }
}

/// Whether any group of the queue has a concurrency limit.
pub fn any<S: Store>(store: &S, limits: &Limits) -> Result<bool, EmqError> {
    Ok(limits.group_concurrency.is_some() || store.table_len(Table::Quotas)? != 0)
}

/// How many more jobs of `group` a claim may take (`usize::MAX` without a limit).
pub fn room<S: Store>(store: &S, limits: &Limits, group: &[u8]) -> Result<usize, EmqError> {
    let Some(limit) = own(store, group)?.or(limits.group_concurrency) else {
        return Ok(usize::MAX);
    };
    let used = active(store, group)?;
    Ok(usize::try_from((limit as u64).saturating_sub(used)).unwrap_or(usize::MAX))
}

/// Marks the queue grouped (`meta` `groups`), once, counting the jobs active then as the
/// default group's. The caller checked `meta` and `active`, and opened `active`.
pub fn mark_grouped<S: Store>(store: &S, limits: &Limits) -> Result<(), EmqError> {
    if limits.grouped {
        return Ok(());
    }
    store.set_meta(Meta::Groups, b"1")?;
    match store.len(Set::Active) {
        0 => Ok(()),
        n => store.table_set(Table::Tally, b"active:", n.to_string().as_bytes()),
    }
}

/// A job left `active` (acked, failed, expired, cancelled): in a grouped queue its group has
/// one active job fewer, and a group held back by its limit takes its turn again.
pub fn left_active<S: Store>(store: &S, row: &S::Row<'_>) -> Result<(), EmqError> {
    if !ready::grouped(store)? {
        return Ok(());
    }
    let group = store.field(row, Field::Group);
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
    if store.score(Set::Held, &group).is_none() {
        return Ok(());
    }
    let limits = super::limit::limits(store)?;
    let limit = own(store, store.bytes(&group))?.or(limits.group_concurrency);
    if limit.is_none_or(|l| left < l as u64) {
        readmit(store, &group)?;
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

/// One group's concurrency limit and its use, as `EMQ.LIMIT <queue> GROUP <g>` reports them.
pub struct GroupUsage {
    /// The group's own limit.
    pub own: Option<i64>,
    /// The queue's default for groups.
    pub default: Option<i64>,
    pub active: u64,
    pub ready: u64,
    /// Whether its limit holds it back.
    pub held: bool,
}

/// The limit and use of named group `group`, for a caller that may read them.
pub fn group_usage<S: Store>(store: &S, group: &[u8]) -> Result<GroupUsage, EmqError> {
    store.check_access(&[
        KeyRef::ReadMeta,
        KeyRef::Group(group),
        KeyRef::Set(Set::Held),
        KeyRef::Table(Table::Tally),
        KeyRef::Table(Table::Quotas),
    ])?;
    store.open_sets(&[Set::Held])?;
    let limits = super::limit::limits(store)?;
    let name = store.text(group)?;
    Ok(GroupUsage {
        own: own(store, group)?,
        default: limits.group_concurrency,
        active: active(store, group)?,
        ready: store.group_len(group)?,
        held: store.score(Set::Held, &name).is_some(),
    })
}

/// `EMQ.LIMIT <queue> GROUP <g> CONCURRENCY <n>|OFF`: sets or removes the group's own limit
/// (marking the queue grouped); a group held back takes its turn again, for the next claim to
/// hold it back anew if it is still at its limit.
pub fn set_group<S: Store>(
    store: &S,
    group: &[u8],
    n: Option<i64>,
) -> Result<GroupUsage, EmqError> {
    store.check_access(&[
        KeyRef::Meta,
        KeyRef::Set(Set::Active),
        KeyRef::Set(Set::Held),
        KeyRef::Set(Set::Turns),
        KeyRef::Set(Set::Groups),
        KeyRef::Group(group),
        KeyRef::Table(Table::Tally),
        KeyRef::Table(Table::Quotas),
    ])?;
    store.open_sets(&[Set::Active, Set::Held, Set::Turns, Set::Pauses, Set::Groups])?;
    let limits = super::limit::limits(store)?;
    store.table_len(Table::Quotas)?;
    store.group_len(group)?;
    mark_grouped(store, &limits)?;
    set_own(store, group, n)?;
    let name = store.text(group)?;
    match n {
        Some(_) => ready::index(store, &name, 0)?,
        None => ready::forget_if_idle(store, &name)?,
    }
    if store.score(Set::Held, &name).is_some() {
        readmit(store, &name)?;
    }
    group_usage(store, group)
}
