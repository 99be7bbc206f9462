//! The ranks of [`Memory`]'s sets, as the inspection commands read them (`Ranked`), and a count
//! of the reads, for a test to see the work a page did.

use std::cell::Cell;
use std::cmp::Ordering;

use crate::protocol::{EmqError, Ranked, Set};

use super::Memory;

thread_local! {
    /// The rank reads this thread's stores answered: (probes, members returned).
    static RANK_READS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// How many rank reads (`count_below`, `range_by_rank`) this thread's stores have answered,
/// and how many members they returned: the work a page did, as a test counts it.
pub fn rank_reads() -> (u64, u64) {
    RANK_READS.with(Cell::get)
}

fn count_rank_read(members: usize) {
    RANK_READS.with(|reads| {
        let (probes, read) = reads.get();
        reads.set((probes + 1, read + members as u64));
    });
}

impl Ranked for Memory {
    fn count_below(&self, set: Set, score: f64, inclusive: bool) -> Result<u64, EmqError> {
        self.opened(set)?;
        count_rank_read(0);
        let below = self.sets.borrow()[set.index()]
            .values()
            .filter(|&&s| s < score || (inclusive && s == score))
            .count();
        Ok(below as u64)
    }

    fn range_by_rank(
        &self,
        set: Set,
        start: u64,
        stop: u64,
    ) -> Result<Vec<(Vec<u8>, f64)>, EmqError> {
        self.opened(set)?;
        if start > stop {
            count_rank_read(0);
            return Ok(Vec::new());
        }
        let sets = self.sets.borrow();
        // The server's order: by score (`-0` equal to `0`), then bytes.
        let mut all: Vec<(&Vec<u8>, f64)> =
            sets[set.index()].iter().map(|(m, s)| (m, *s)).collect();
        all.sort_by(|a, b| {
            a.1.partial_cmp(&b.1)
                .unwrap_or(Ordering::Equal)
                .then_with(|| a.0.cmp(b.0))
        });
        let out: Vec<(Vec<u8>, f64)> = all
            .into_iter()
            .skip(usize::try_from(start).unwrap_or(usize::MAX))
            .take(usize::try_from(stop - start).map_or(usize::MAX, |n| n.saturating_add(1)))
            .map(|(m, s)| (m.clone(), s))
            .collect();
        count_rank_read(out.len());
        Ok(out)
    }

    fn read_row<'n>(&'n self, row: &'n Vec<u8>) -> Result<&'n Vec<u8>, EmqError> {
        Ok(row)
    }
}
