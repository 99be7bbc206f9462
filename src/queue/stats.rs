//! `EMQ.STATS`: how many jobs each set of a queue holds (a read; no transition).

use crate::protocol::{EmqError, KeyRef, Set, Store};

/// The sizes of `pending`, `active`, `schedule` and `dead`, in that order, after checking the
/// caller may read them.
pub fn counts<S: Store>(store: &S) -> Result<[u64; 4], EmqError> {
    store.check_access(&Set::ALL.map(KeyRef::Set))?;
    store.open_sets(&Set::ALL)?;
    Ok(Set::ALL.map(|set| store.len(set)))
}
