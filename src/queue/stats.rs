//! `EMQ.STATS`: how many jobs each set of a queue holds, whether it is paused, and its claim
//! limits and their use (a read; no transition).

use crate::protocol::{EmqError, KeyRef, Set, Store};

use super::limit::{usage, Usage};
use super::operate::paused;

pub struct Stats {
    /// The sizes of `pending`, `active`, `schedule` and `dead`, in that order.
    pub sets: [u64; 4],
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
    Ok(Stats {
        sets: Set::ALL.map(|set| store.len(set)),
        waiting: store.len(Set::Waiting),
        paused: paused(store)?,
        usage: usage(store)?,
    })
}
