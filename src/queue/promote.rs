//! What the timer (and each claim, first) moves by itself (protocol.md §6): scheduled jobs whose time
//! came go to pending, and so do jobs whose lease expired, unless that was their last attempt,
//! when they are buried in `dead`.

use crate::protocol::counters::{self, DROPPED};
use crate::protocol::metrics::Ended;
use crate::protocol::{settings, EmqError, Event, Field, Holds, Set, Store};

use super::finished::bury;
use super::lease::{self, Failed};
use super::{attempts, priority, record, row_of};
use super::{quota, ready, timing};

/// Most jobs one call (or one timer tick per queue) promotes from each of `schedule` and
/// `active`, so no call does unbounded work.
pub const PROMOTE_BUDGET: usize = 1000;

/// A set member with its score and the name of its row (`None` for a member outside the
/// grammar).
pub struct Member<S: Store> {
    pub text: S::Text,
    pub score: f64,
    pub row: Option<S::Name>,
}

/// Set members with the names of their rows.
pub fn with_rows<S: Store>(
    store: &S,
    members: Vec<(S::Text, f64)>,
) -> Result<Vec<Member<S>>, EmqError> {
    members
        .into_iter()
        .map(|(text, score)| {
            let row = row_of(store, &text)?;
            Ok(Member { text, score, row })
        })
        .collect()
}

/// What a queue has due at `now`: scheduled jobs whose time came and leases that expired.
pub struct Due<S: Store> {
    pub scheduled: Vec<Member<S>>,
    pub expired: Vec<Member<S>>,
}

/// What [`Due::promote`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Jobs back in `pending`.
    pub to_pending: usize,
    /// Jobs whose lease expired on their last attempt, moved to `dead`.
    pub buried: usize,
    /// Attempts ended at their deadline and scheduled for a retry.
    pub retrying: usize,
    /// Attempts ended at their deadline that were their job's last, moved to `dead`.
    pub timed_out_dead: usize,
}

impl<S: Store> Due<S> {
    /// Reads (without writing) up to `budget` due members of each open set, with their rows.
    pub fn find(store: &S, now: i64, budget: usize) -> Result<Self, EmqError> {
        let horizon = now as f64;
        Ok(Self {
            scheduled: with_rows(
                store,
                store.range(Set::Schedule, f64::NEG_INFINITY, horizon, budget)?,
            )?,
            expired: with_rows(
                store,
                store.range(Set::Active, f64::NEG_INFINITY, horizon, budget)?,
            )?,
        })
    }

    pub fn rows(&self) -> impl Iterator<Item = &S::Name> {
        self.scheduled
            .iter()
            .chain(&self.expired)
            .filter_map(|m| m.row.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty() && self.expired.is_empty()
    }

    /// Whether a set gave all `budget` members it could: more may be due.
    pub fn is_full(&self, budget: usize) -> bool {
        self.scheduled.len() >= budget || self.expired.len() >= budget
    }

    /// Moves due scheduled jobs to pending; expired leases to pending, or to dead when their
    /// attempts are spent; in a `timed` queue, a lease that ended at its attempt's deadline
    /// fails the attempt with `timeout` ([`lease::time_out`]). Members without a row are
    /// dropped. Their rows' types were checked (`check_row_types`) before.
    pub fn promote(&self, store: &S, now: i64, timed: bool) -> Result<Moved, EmqError> {
        if ready::grouped(store)? {
            // Every job's group keys, and the groups' counts a lease's end writes, checked
            // before the first move: a refusal leaves each job where it was.
            if !self.expired.is_empty() {
                // (Each job's own group key is checked below, with its row.)
                quota::ready_to_leave(store, &[])?;
            }
            for name in self.rows() {
                let row = store.open_row(name)?;
                if store.holds(&row) == Holds::Hash {
                    ready::checked_group(store, &row)?;
                }
            }
        }
        let mut moved = Moved::default();
        for member in &self.scheduled {
            moved.to_pending += move_to_pending(store, Set::Schedule, member)? as usize;
        }
        for member in &self.expired {
            let row = match &member.row {
                Some(name) => Some(store.open_row(name)?),
                None => None,
            };
            let Some(row) = row else {
                moved.to_pending += move_to_pending(store, Set::Active, member)? as usize;
                continue;
            };
            // The lease's end is its deadline at the latest: one that ended sooner ran out.
            if timed && lease::deadline(store, &row).is_some_and(|d| d as f64 <= member.score) {
                match lease::time_out(store, &row, &member.text, now)? {
                    Failed::Scheduled => moved.retrying += 1,
                    Failed::Dead => moved.timed_out_dead += 1,
                }
                continue;
            }
            if attempts(store, &row) >= settings::max_attempts() {
                // Not `finished::parents`: the timer's burial is not refused. A hand-over it
                // cannot keep is counted (`handovers_lost`).
                let parents = store.field(&row, Field::Parents);
                bury(
                    store,
                    Set::Active,
                    &member.text,
                    &row,
                    now,
                    Some(b"lease expired"),
                    parents.as_ref(),
                )?;
                moved.buried += 1;
                continue;
            }
            moved.to_pending += move_to_pending(store, Set::Active, member)? as usize;
        }
        counters::count(&counters::DEAD, moved.buried as u64);
        // The room those left `active` is the waiting claimers' (under a concurrency limit).
        let left = moved.buried + moved.retrying + moved.timed_out_dead;
        if left > 0 && (store.len(Set::Pending) != 0 || ready::grouped(store)?) {
            store.wake_claimers()?;
        }
        Ok(moved)
    }
}

/// Moves one member from `from` to pending with `state pending`; a member whose row is gone
/// (or not a hash) is dropped instead. Whether it moved.
fn move_to_pending<S: Store>(store: &S, from: Set, member: &Member<S>) -> Result<bool, EmqError> {
    let row = match &member.row {
        Some(name) => Some(store.open_row(name)?),
        None => None,
    };
    let row = row.filter(|row| store.holds(row) == Holds::Hash);
    // Its group's keys are checked before the first write: a refusal leaves the job where it
    // was.
    let group = match &row {
        Some(row) => ready::checked_group(store, row)?,
        None => None,
    };
    if from == Set::Active {
        quota::ready_to_leave(store, &row.iter().collect::<Vec<_>>())?;
    }
    store.remove(from, &member.text)?;
    let Some(row) = row else {
        count_dropped();
        return Ok(false);
    };
    if from == Set::Active {
        quota::left_active(store, &row, &member.text, None, Ended::Failed)?;
    }
    timing::set_pending(store, &row)?;
    ready::add(store, group.as_ref(), priority(store, &row), &member.text)?;
    let event = match from {
        Set::Active => Event::Expired,
        _ => Event::Promoted,
    };
    record(store, event, Some(&member.text), || attempts(store, &row))?;
    Ok(true)
}

/// Counts a set member dropped because its row was gone.
pub(crate) fn count_dropped() {
    counters::count(&DROPPED, 1);
}

/// The earliest due time or lease deadline of the queue (unix ms), if it has any.
pub fn next_due<S: Store>(store: &S) -> Result<Option<i64>, EmqError> {
    let first = |set| -> Result<Option<f64>, EmqError> {
        Ok(store
            .range(set, f64::NEG_INFINITY, f64::INFINITY, 1)?
            .first()
            .map(|(_, s)| *s))
    };
    let earliest = match (first(Set::Schedule)?, first(Set::Active)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(earliest.map(|at| at as i64))
}

/// One visit of the timer to a queue: promotes up to `budget` due jobs of each timed set, trims
/// up to `budget` dead jobs past the dead set's retention (`emq.dead-ttl-ms`, then
/// `emq.dead-max-jobs`) and as many claims that left the rate window, and says when to look
/// again (`None`: the queue has no set left to watch).
pub fn visit<S: Store>(
    store: &S,
    now: i64,
    budget: usize,
) -> Result<(Moved, Option<i64>), EmqError> {
    store.open_sets(&Set::ALL)?;
    store.open_sets(&[Set::Rate])?;
    let limits = super::limit::limits(store)?;
    let due = Due::find(store, now, budget)?;
    let trimmed = past_retention(store, now, budget)?;
    let rows: Vec<&S::Name> = due
        .rows()
        .chain(trimmed.iter().filter_map(|m| m.row.as_ref()))
        .collect();
    super::check_row_types(store, &rows)?;
    store.events()?;
    let moved = due.promote(store, now, limits.timed)?;
    counters::count(&counters::PROMOTED, moved.to_pending as u64);
    for member in &trimmed {
        purge_one(store, Set::Dead, member)?;
    }
    counters::count(&counters::TRIMMED, trimmed.len() as u64);
    let window = match store.len(Set::Rate) {
        0 => None,
        _ => super::limit::visit_window(store, &limits, now, budget)?,
    };
    // Only a grouped queue has paused groups and groups' windows.
    let (resumes, windows) = match limits.grouped {
        true => (
            super::pauses::resume_due(store, now, budget)?,
            super::quota::trim_windows(store, now, budget)?,
        ),
        false => (None, None),
    };
    let next = if due.is_full(budget) || trimmed.len() >= budget {
        Some(now) // more was due than one visit moves
    } else {
        [
            next_due(store)?,
            next_trim(store, now)?,
            window,
            resumes,
            windows,
        ]
        .into_iter()
        .flatten()
        .min()
    };
    Ok((moved, next))
}

/// The oldest dead jobs past retention at `now`, at most `budget`: those that died more than
/// `emq.dead-ttl-ms` ago, and the oldest beyond `emq.dead-max-jobs` (0: no limit).
fn past_retention<S: Store>(
    store: &S,
    now: i64,
    budget: usize,
) -> Result<Vec<Member<S>>, EmqError> {
    let (ttl, max) = (settings::dead_ttl_ms(), settings::dead_max_jobs());
    let mut n = 0;
    if ttl > 0 {
        let cutoff = now.saturating_sub(ttl) as f64;
        n = store
            .range(Set::Dead, f64::NEG_INFINITY, cutoff, budget)?
            .iter()
            .filter(|(_, died)| *died < cutoff)
            .count();
    }
    if max > 0 {
        let over = store.len(Set::Dead).saturating_sub(max as u64);
        n = n.max(usize::try_from(over).unwrap_or(usize::MAX));
    }
    let n = n.min(budget);
    if n == 0 {
        return Ok(Vec::new());
    }
    with_rows(
        store,
        store.range(Set::Dead, f64::NEG_INFINITY, f64::INFINITY, n)?,
    )
}

/// When the dead set next has a job past retention: its oldest job's age reaching the TTL, or
/// now if it holds more than the limit. A dead set kept forever is watched all the same (at
/// the end of time), so that a retention set later reaches it.
fn next_trim<S: Store>(store: &S, now: i64) -> Result<Option<i64>, EmqError> {
    let Some(&(_, oldest)) = store
        .range(Set::Dead, f64::NEG_INFINITY, f64::INFINITY, 1)?
        .first()
        .map(|(m, s)| (m, *s))
        .as_ref()
    else {
        return Ok(None);
    };
    let (ttl, max) = (settings::dead_ttl_ms(), settings::dead_max_jobs());
    if max > 0 && store.len(Set::Dead) > max as u64 {
        return Ok(Some(now));
    }
    Ok(Some(if ttl > 0 {
        (oldest as i64).saturating_add(ttl)
    } else {
        i64::MAX
    }))
}

/// Deletes one job of `set`: its member and its row (a member whose row is gone is dropped).
pub(crate) fn purge_one<S: Store>(store: &S, set: Set, member: &Member<S>) -> Result<(), EmqError> {
    store.remove(set, &member.text)?;
    let Some(name) = &member.row else {
        count_dropped();
        return Ok(());
    };
    let row = store.open_row(name)?;
    record(store, Event::Purged, Some(&member.text), || {
        attempts(store, &row)
    })?;
    if store.holds(&row) != Holds::Nothing {
        store.delete_row(&row)?;
    }
    Ok(())
}
