//! One job named by a client (`<queue> <id>`): its keys checked before anything is opened,
//! and the operator's transitions on it, cancel and requeue (protocol.md §6).

use crate::protocol::counters::{self, CANCELLED, REQUEUED};
use crate::protocol::flow::Outcome;
use crate::protocol::{BrandedId, EmqError, Event, Field, Holds, KeyRef, Set, State, Store, Value};

use super::{attempts, fence_for_new_life, finished, flow, priority, record, Job};

/// One job's keys, named and permission-checked; nothing opened yet.
pub struct Target<'j, S: Store> {
    pub job: Job<'j, S>,
    pub row: S::Name,
}

impl<'j, S: Store> Target<'j, S> {
    /// Names the job's row and checks the caller's permission on the queue's four sets and
    /// the row.
    pub fn check(store: &S, job: Job<'j, S>) -> Result<Self, EmqError> {
        let row = store.row_name(&job.id, job.member)?;
        store.check_access(&[
            KeyRef::Set(Set::Pending),
            KeyRef::Set(Set::Active),
            KeyRef::Set(Set::Schedule),
            KeyRef::Set(Set::Dead),
            KeyRef::Row(&row),
        ])?;
        Ok(Self { job, row })
    }

    /// Opens the sets and the row, refusing wrong types before any write.
    pub fn open<'n>(&'n self, store: &'n S) -> Result<S::Row<'n>, EmqError> {
        store.open_sets(&Set::ALL)?;
        let row = store.open_row(&self.row)?;
        if !matches!(store.holds(&row), Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
        store.events()?;
        Ok(row)
    }
}

/// Most children of a cancelled parent one call cancels with it.
pub const MAX_CANCELLED_CHILDREN: usize = 1000;

/// `EMQ.CANCEL`: removes a pending, scheduled or waiting job and its row; whether it did. Any
/// other job, or none, is left alone.
pub fn cancel<S: Store>(store: &S, target: &Target<'_, S>) -> Result<bool, EmqError> {
    Ok(cancel_job(store, target)?.is_some())
}

/// Children of a cancelled parent, by queue and id, for the caller to cancel too.
pub type Children = Vec<(Vec<u8>, BrandedId)>;

/// [`cancel`], and for a waiting parent, the children it leaves that have not finished (at
/// most [`MAX_CANCELLED_CHILDREN`]), for the caller to cancel too: `None` when nothing was
/// cancelled.
pub fn cancel_job<S: Store>(
    store: &S,
    target: &Target<'_, S>,
) -> Result<Option<Children>, EmqError> {
    store.check_access(&[KeyRef::Set(Set::Waiting)])?;
    let row = target.open(store)?;
    store.open_sets(&[Set::Waiting])?;
    let member = target.job.member;
    let from = if store.score(Set::Pending, member).is_some() {
        Set::Pending
    } else if store.score(Set::Schedule, member).is_some() {
        Set::Schedule
    } else if store.score(Set::Waiting, member).is_some() {
        Set::Waiting
    } else {
        return Ok(None);
    };
    let children = match (from, store.holds(&row)) {
        (Set::Waiting, Holds::Hash) => {
            flow::unfinished_children(store, &target.row, MAX_CANCELLED_CHILDREN)?
        }
        _ => Vec::new(),
    };
    let parents = match store.holds(&row) {
        Holds::Nothing => None,
        _ => finished::parents(store, &row)?,
    };
    store.remove(from, member)?;
    record(store, Event::Cancelled, Some(member), || {
        attempts(store, &row)
    })?;
    if store.holds(&row) != Holds::Nothing {
        finished::keep_hand_overs(store, parents.as_ref(), member, Outcome::Cancelled, b"");
        store.delete_row(&row)?;
    }
    counters::count(&CANCELLED, 1);
    Ok(Some(children))
}

/// `EMQ.REQUEUE`: moves a dead job back to pending with its attempts reset; whether it did.
/// A job that is not dead is left alone. A parent whose children have not all finished goes
/// back to `waiting` instead (`flow::requeued_to`).
pub fn requeue<S: Store>(store: &S, target: &Target<'_, S>) -> Result<bool, EmqError> {
    let row = target.open(store)?;
    let member = target.job.member;
    if store.score(Set::Dead, member).is_none() || store.holds(&row) != Holds::Hash {
        return Ok(false);
    }
    let to = flow::requeued_to(store, &row);
    if to == Set::Waiting {
        store.check_access(&[KeyRef::Set(Set::Waiting)])?;
        store.open_sets(&[Set::Waiting])?;
    }
    revive(store, &row, member, to)?;
    counters::count(&REQUEUED, 1);
    Ok(true)
}

/// A dead job's new life, its attempts reset: out of `dead` into `to`, `pending` at its
/// priority or `waiting` (a parent, with no due time). The sets are open and checked.
pub(crate) fn revive<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    to: Set,
) -> Result<(), EmqError> {
    store.remove(Set::Dead, member)?;
    let fence = fence_for_new_life(store, row);
    let (state, score) = match to {
        Set::Waiting => (State::Waiting, 0),
        _ => (State::Pending, priority(store, row)),
    };
    store.set_fields(
        row,
        &[
            (Field::State, Value::State(state)),
            (Field::Attempts, Value::Int(0)),
            (Field::Fence, Value::Int(fence)),
        ],
    )?;
    store.add(to, score, member)?;
    record(store, Event::Requeued, Some(member), || 0)
}
