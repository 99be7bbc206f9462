//! `EMQ.GROUPS` (docs/groups.md): a page of a queue's named groups, the largest backlog first,
//! each with its ready and active jobs, its limits and their use, its pause and whether a limit
//! holds it back.

use crate::protocol::{EmqError, Group, KeyRef, Ranked, Set, Table};

use super::quota::GroupLimits;
use super::{limit, pauses, tally};

/// One group as a page shows it.
pub struct GroupView<T> {
    pub name: T,
    pub ready: u64,
    pub active: u64,
    /// Its limits: its own, or the queue's defaults for groups.
    pub limits: GroupLimits,
    /// Its claims in its rate window now.
    pub in_window: u64,
    /// While paused, when it resumes by itself (`None` inside: when resumed).
    pub paused: Option<Option<i64>>,
    pub held: bool,
}

/// A page's groups, and the rank of the next page (`None`: this page reached the end).
pub type Page<T> = (Option<u64>, Vec<GroupView<T>>);

/// The groups at ranks `start..start + count` of the index, and the rank of the next page
/// (`None`: this page reached the end).
pub fn page<S: Ranked>(store: &S, start: u64, count: usize) -> Result<Page<S::Text>, EmqError> {
    store.check_access(&[
        KeyRef::ReadMeta,
        KeyRef::Set(Set::Groups),
        KeyRef::Set(Set::Held),
        KeyRef::Set(Set::Pauses),
        KeyRef::Table(Table::Tally),
        KeyRef::Table(Table::Quotas),
    ])?;
    store.open_sets(&[Set::Groups, Set::Held, Set::Pauses])?;
    let defaults = GroupLimits::defaults(&limit::limits(store)?);
    let len = store.len(Set::Groups);
    if count == 0 || start >= len {
        return Ok((None, Vec::new()));
    }
    // A name outside the grammar (written by hand) is passed over.
    let names: Vec<(S::Text, f64)> = store
        .range_by_rank(Set::Groups, start, start + count as u64 - 1)?
        .into_iter()
        .filter(|(name, _)| Group::parse(store.bytes(name)).is_some())
        .collect();
    let keys: Vec<KeyRef<'_, S::Name>> = names
        .iter()
        .map(|(name, _)| KeyRef::Group(store.bytes(name)))
        .collect();
    store.check_access(&keys)?;
    drop(keys);
    let mut page = Vec::with_capacity(names.len());
    for (name, _) in names {
        let group = store.bytes(&name);
        page.push(GroupView {
            ready: store.group_len(group)?,
            active: tally::active(store, group)?,
            limits: defaults.of(store, group)?,
            in_window: tally::in_window(store, group)?,
            paused: store
                .score(Set::Pauses, &name)
                .map(|until| (until < pauses::FOREVER as f64).then_some(until as i64)),
            held: store.score(Set::Held, &name).is_some(),
            name,
        });
    }
    let next = start + count as u64;
    Ok(((next < len).then_some(next), page))
}
