//! `EMQ.STATS`: how many jobs each set of a queue holds, whether it is paused, and its claim
//! limits and their use (a read; no transition).

use crate::protocol::{EmqError, KeyRef, Set, Store, Table};

use super::limit::{usage, Usage};
use super::operate::paused;
use super::ready;

pub struct Stats {
    /// The ready jobs (`pending`'s and the named groups'), and the sizes of `active`,
    /// `schedule` and `dead`, in that order.
    pub sets: [u64; 4],
    /// How many named groups the queue knows: with ready or active jobs, a limit of their own
    /// or a pause (0 in a queue that never had a grouped job).
    pub groups: u64,
    /// The size of `waiting`: parents waiting for their children.
    pub waiting: u64,
    pub paused: bool,
    /// The claim limits and their use.
    pub usage: Usage,
}

/// What the queue holds, after checking the caller may read it.
pub fn stats<S: Store>(store: &S) -> Result<Stats, EmqError> {
    store.check_access(&[
        KeyRef::Set(Set::Pending),
        KeyRef::Set(Set::Active),
        KeyRef::Set(Set::Schedule),
        KeyRef::Set(Set::Dead),
        KeyRef::Set(Set::Waiting),
        KeyRef::ReadMeta,
    ])?;
    store.open_sets(&Set::ALL)?;
    store.open_sets(&[Set::Waiting])?;
    let mut sets = Set::ALL.map(|set| store.len(set));
    let mut groups = 0;
    if ready::grouped(store)? {
        store.check_access(&[KeyRef::Set(Set::Groups), KeyRef::Table(Table::Tally)])?;
        store.open_sets(&[Set::Groups])?;
        sets[0] = ready::ready_len(store, true)?;
        groups = store.len(Set::Groups);
    }
    Ok(Stats {
        sets,
        groups,
        waiting: store.len(Set::Waiting),
        paused: paused(store)?,
        usage: usage(store)?,
    })
}
