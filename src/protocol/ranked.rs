//! What the inspection commands read beyond [`Store`]: a set by rank, so a page resumes at
//! its place in O(log N) probes however many members share a score, and rows opened for
//! reading only. The host implements it over the server's zsets (`ZCOUNT`, `ZRANGE` by
//! rank); the queue layer's tests over memory, counting the probes.

use super::error::EmqError;
use super::store::{Set, Store};

pub trait Ranked: Store {
    /// How many members of an open set score below `score` (at most `score` when
    /// `inclusive`): `ZCOUNT set -inf (score`, or `-inf score`. 0 for a missing set.
    fn count_below(&self, set: Set, score: f64, inclusive: bool) -> Result<u64, EmqError>;

    /// The members at ranks `start..=stop` of an open set (rank 0 is the lowest: by score,
    /// then bytes), with their scores: `ZRANGE set start stop WITHSCORES`. Empty past the end.
    fn range_by_rank(
        &self,
        set: Set,
        start: u64,
        stop: u64,
    ) -> Result<Vec<(Self::Text, f64)>, EmqError>;

    /// A job's row opened for reading only, looked up as a read command looks a key up.
    fn read_row<'n>(&'n self, row: &'n Self::Name) -> Result<Self::Row<'n>, EmqError>;
}
