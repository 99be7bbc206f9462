//! The lease holder's transitions (SPEC §6): renew, ack and fail. The token is the `attempts`
//! value the claim returned; a wrong, stale or missing one is `EMQLEASE` and changes nothing.

use crate::protocol::counters::{self, ACKED, DEAD, RENEWED, RETRIED};
use crate::protocol::{settings, EmqError, Event, Field, Holds, Set, State, Store, Value};

use super::job::Target;
use super::limit::{self, room_freed};
use super::promote::bury;
use super::{attempts, record, set_state};

/// The job is active, in the active set, and its attempts equal `token`: its attempts.
fn check_lease<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    token: i64,
) -> Result<i64, EmqError> {
    let active = store.holds(row) == Holds::Hash
        && store
            .field(row, Field::State)
            .is_some_and(|s| store.bytes(&s) == State::Active.as_bytes())
        && store.score(Set::Active, member).is_some();
    let attempts = attempts(store, row);
    if !active || attempts != token {
        return Err(EmqError::Lease);
    }
    Ok(attempts)
}

/// `EMQ.RENEW`: the lease runs until now + `ms`, and the row keeps `progress` when the worker
/// sent one; the new deadline (unix ms).
pub fn renew<S: Store>(
    store: &S,
    target: &Target<'_, S>,
    token: i64,
    ms: i64,
    progress: Option<&[u8]>,
) -> Result<i64, EmqError> {
    let row = target.open(store)?;
    check_lease(store, &row, target.job.member, token)?;
    let deadline = store.now_ms() + ms;
    store.add(Set::Active, deadline, target.job.member)?;
    if let Some(progress) = progress {
        store.set_fields(&row, &[(Field::Progress, Value::Bytes(progress))])?;
    }
    counters::count(&RENEWED, 1);
    Ok(deadline)
}

/// `EMQ.ACK`: active -> done; the row, with `result` when the worker sent one, stays
/// `emq.done-ttl-ms` (deleted at once, result and all, for 0).
pub fn ack<S: Store>(
    store: &S,
    target: &Target<'_, S>,
    token: i64,
    result: Option<&[u8]>,
) -> Result<(), EmqError> {
    let row = target.open(store)?;
    check_lease(store, &row, target.job.member, token)?;
    let limits = limit::limits(store)?;
    store.remove(Set::Active, target.job.member)?;
    let ttl = settings::done_ttl_ms();
    if ttl == 0 {
        store.delete_row(&row)?;
    } else {
        match result {
            Some(result) => store.set_fields(
                &row,
                &[
                    (Field::State, Value::State(State::Done)),
                    (Field::Result, Value::Bytes(result)),
                ],
            )?,
            None => set_state(store, &row, State::Done, None)?,
        }
        store.expire_row(&row, store.now_ms() + ttl)?;
    }
    record(store, Event::Acked, Some(target.job.member), || token)?;
    room_freed(store, &limits)?;
    counters::count(&ACKED, 1);
    Ok(())
}

/// Where a failed job went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// To `schedule`, for a retry.
    Scheduled,
    /// To `dead`: that was its last attempt.
    Dead,
}

/// `EMQ.FAIL`: `scheduled` for a retry after `retry_in` or the exponential backoff, or `dead`
/// after the last attempt; `error` is kept in the row.
pub fn fail<S: Store>(
    store: &S,
    target: &Target<'_, S>,
    token: i64,
    error: Option<&[u8]>,
    retry_in: Option<i64>,
) -> Result<Failed, EmqError> {
    let row = target.open(store)?;
    let member = target.job.member;
    let attempts = check_lease(store, &row, member, token)?;
    let limits = limit::limits(store)?;
    let now = store.now_ms();
    let failed = if attempts < settings::max_attempts() {
        let due = now + retry_in.unwrap_or_else(|| settings::backoff_ms(attempts));
        store.remove(Set::Active, member)?;
        set_state(store, &row, State::Scheduled, error)?;
        store.add(Set::Schedule, due, member)?;
        record(store, Event::Retrying, Some(member), || attempts)?;
        counters::count(&RETRIED, 1);
        Failed::Scheduled
    } else {
        bury(store, Set::Active, member, &row, now, error)?;
        counters::count(&DEAD, 1);
        Failed::Dead
    };
    room_freed(store, &limits)?;
    Ok(failed)
}
