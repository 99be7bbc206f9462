//! One job named by a client (`<queue> <id>`): its keys checked before anything is opened,
//! and the operator's transitions on it, cancel and requeue (protocol.md §6).

use crate::protocol::counters::{self, CANCELLED, REQUEUED};
use crate::protocol::flow::Outcome;
use crate::protocol::{BrandedId, EmqError, Event, Field, Holds, KeyRef, Set, State, Store, Value};

use super::limit::{self, room_freed};
use super::{
    attempts, fence_for_new_life, finished, flow, lease_token, leased_fields, priority, record, Job,
};
use super::{quota, ready};

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

/// `EMQ.CANCEL`: removes a pending, scheduled or waiting job and its row, or ends an active
/// job's attempt (to `dead`, [`cancel_running`]); whether it did. A dead or done job, or none,
/// is left alone.
pub fn cancel<S: Store>(store: &S, target: &Target<'_, S>) -> Result<bool, EmqError> {
    Ok(cancel_job(store, target, true)?.is_some())
}

/// Children of a cancelled parent, by queue and id, for the caller to cancel too.
pub type Children = Vec<(Vec<u8>, BrandedId)>;

/// [`cancel`] (an active job only with `running`), and for a waiting parent, the children it
/// leaves that have not finished (at most [`MAX_CANCELLED_CHILDREN`]), for the caller to cancel
/// too, those that have not started: `None` when nothing was cancelled.
pub fn cancel_job<S: Store>(
    store: &S,
    target: &Target<'_, S>,
    running: bool,
) -> Result<Option<Children>, EmqError> {
    store.check_access(&[KeyRef::Set(Set::Waiting)])?;
    let row = target.open(store)?;
    store.open_sets(&[Set::Waiting])?;
    let member = target.job.member;
    // A ready job of a named group waits in the group's key.
    let group = match store.holds(&row) {
        Holds::Hash => ready::waits_in(store, &row, member)?.map(|(group, _)| group),
        _ => None,
    };
    let from = if group.is_some() || store.score(Set::Pending, member).is_some() {
        Set::Pending
    } else if store.score(Set::Schedule, member).is_some() {
        Set::Schedule
    } else if store.score(Set::Waiting, member).is_some() {
        Set::Waiting
    } else if running
        && store.holds(&row) == Holds::Hash
        && store.score(Set::Active, member).is_some()
    {
        cancel_running(store, &row, member)?;
        return Ok(Some(Vec::new()));
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
    match from {
        Set::Pending => ready::remove(store, group.as_ref(), member)?,
        _ => store.remove(from, member)?,
    };
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

/// Ends an active job's attempt for `EMQ.CANCEL`: the job goes to `dead` with the error
/// `cancelled` and the attempt's token in `cancelled`, so its worker's next renewal or settle
/// is told (`EMQCANCELLED`, `lease::check_token`); its parents take it as cancelled, and the
/// room it held under a concurrency limit is freed.
fn cancel_running<S: Store>(store: &S, row: &S::Row<'_>, member: &S::Text) -> Result<(), EmqError> {
    let (attempts, fence, _) = leased_fields(store, row, Field::State);
    let parents = finished::parents(store, row)?;
    let limits = limit::limits(store)?;
    quota::ready_to_leave(store, &[row])?;
    store.remove(Set::Active, member)?;
    quota::left_active(
        store,
        row,
        member,
        None,
        crate::protocol::metrics::Ended::Cancelled,
    )?;
    store.set_fields(
        row,
        &[
            (Field::State, Value::State(State::Dead)),
            (Field::Error, Value::Bytes(CANCELLED_ERROR)),
            (Field::Cancelled, Value::Int(lease_token(fence, attempts))),
        ],
    )?;
    store.add(Set::Dead, store.now_ms(), member)?;
    record(store, Event::Cancelled, Some(member), || attempts)?;
    finished::keep_hand_overs(store, parents.as_ref(), member, Outcome::Cancelled, b"");
    room_freed(store, &limits)?;
    counters::count(&CANCELLED, 1);
    Ok(())
}

/// The error a job whose attempt `EMQ.CANCEL` ended keeps.
pub const CANCELLED_ERROR: &[u8] = b"cancelled";

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
    // Its group's keys are checked before the first write.
    let group = match to {
        Set::Pending => ready::checked_group(store, row)?,
        _ => None,
    };
    store.remove(Set::Dead, member)?;
    let fence = fence_for_new_life(store, row);
    let (state, score) = match to {
        Set::Waiting => (State::Waiting, 0),
        _ => (State::Pending, priority(store, row)),
    };
    // A job back in `pending` became ready now, as the metrics count its wait.
    let fields = [
        (Field::State, Value::State(state)),
        (Field::Attempts, Value::Int(0)),
        (Field::Fence, Value::Int(fence)),
        (Field::Ready, Value::Int(store.now_ms())),
    ];
    // Written whether metrics are kept or not, so no older time stays behind.
    let ready = to == Set::Pending;
    if ready {
        super::timing::readied(store);
    }
    store.set_fields(row, &fields[..3 + usize::from(ready)])?;
    match to {
        Set::Pending => ready::add(store, group.as_ref(), score, member)?,
        _ => store.add(to, score, member)?,
    }
    record(store, Event::Requeued, Some(member), || 0)
}
