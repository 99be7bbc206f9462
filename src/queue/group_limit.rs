//! `EMQ.LIMIT <queue> GROUP <g> ...` (docs/groups.md): one group's own limits, set, removed or
//! reported with their use.

use crate::protocol::limits::Rate;
use crate::protocol::{EmqError, KeyRef, Set, Store, Table};

use super::quota::{mark_grouped, readmit, GroupLimits};
use super::ready;
use super::tally::{active, in_window, own, own_rate, set_own, set_own_rate};

/// One group's limits and their use, as `EMQ.LIMIT <queue> GROUP <g>` reports them.
pub struct GroupUsage {
    /// The group's own limits.
    pub own: GroupLimits,
    /// The queue's defaults for groups.
    pub defaults: GroupLimits,
    pub active: u64,
    pub ready: u64,
    /// Its claims in its rate window now.
    pub in_window: u64,
    /// Whether its limits hold it back.
    pub held: bool,
}

/// A change of a group's own limits: each set (`Some(Some(..))`), removed (`Some(None)`) or
/// left as it is (`None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupChange {
    pub concurrency: Option<Option<i64>>,
    pub rate: Option<Option<Rate>>,
}

/// The limits and use of named group `group`, for a caller that may read them.
pub fn usage<S: Store>(store: &S, group: &[u8]) -> Result<GroupUsage, EmqError> {
    store.check_access(&[
        KeyRef::ReadMeta,
        KeyRef::Group(group),
        KeyRef::Set(Set::Held),
        KeyRef::Table(Table::Tally),
        KeyRef::Table(Table::Quotas),
    ])?;
    store.open_sets(&[Set::Held])?;
    let name = store.text(group)?;
    Ok(GroupUsage {
        own: GroupLimits {
            concurrency: own(store, group)?,
            rate: own_rate(store, group)?,
        },
        defaults: GroupLimits::read_defaults(store)?,
        active: active(store, group)?,
        ready: store.group_len(group)?,
        in_window: in_window(store, group)?,
        held: store.score(Set::Held, &name).is_some(),
    })
}

/// `EMQ.LIMIT <queue> GROUP <g> [CONCURRENCY <n>|OFF] [RATE <n> PER <ms>|RATE OFF]`: sets or
/// removes the group's own limits (marking the queue grouped); a group held back takes its turn
/// again, for the next claim to hold it back anew if it is still at a limit.
pub fn set<S: Store>(store: &S, group: &[u8], change: GroupChange) -> Result<GroupUsage, EmqError> {
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
    let grouped = ready::grouped(store)?;
    store.table_len(Table::Quotas)?;
    store.table_len(Table::Tally)?;
    store.group_len(group)?;
    if !grouped {
        mark_grouped(store)?;
    }
    if let Some(n) = change.concurrency {
        set_own(store, group, n)?;
    }
    if let Some(rate) = change.rate {
        set_own_rate(store, group, rate)?;
    }
    let name = store.text(group)?;
    ready::index(store, &name, 0)?;
    ready::forget_if_idle(store, &name)?;
    if store.score(Set::Held, &name).is_some() {
        readmit(store, &name)?;
    }
    usage(store, group)
}
