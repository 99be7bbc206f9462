//! The lease holder's transitions (protocol.md §6): renew, ack and fail. The token is the one the
//! claim returned (the job's `attempts` after its `fence`); a wrong, stale or missing one is
//! `EMQLEASE` (`EMQCANCELLED` for the attempt a cancel ended, and for a renewal `EMQTIMEOUT`
//! for one past its deadline) and changes nothing.

use std::collections::HashSet;

use crate::protocol::counters::{self, ACKED, DEAD, RENEWED, RETRIED, TIMED_OUT};
use crate::protocol::flow::Outcome;
use crate::protocol::metrics::Ended;
use crate::protocol::{settings, EmqError, Event, Field, Holds, KeyRef, Set, State, Store, Value};

use super::finished;
use super::finished::entomb;
use super::job::Target;
use super::limit::{self, room_freed};
use super::{count_of, lease_token, leased_fields, quota, record, set_state, Job};

/// The job is active, in the active set, its current attempt's token is `token` and its
/// deadline, if it has one, has not passed (`EMQTIMEOUT`): its attempts.
fn check_lease<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    token: i64,
) -> Result<i64, EmqError> {
    let attempts = check_token(store, row, token)?;
    match store.score(Set::Active, member) {
        Some(ends) => {
            // The deadline is read only once the lease has run out: an active job's score is
            // its deadline at the latest.
            let now = store.now_ms();
            if ends <= now as f64 && deadline(store, row).is_some_and(|d| d <= now) {
                return Err(EmqError::Timeout);
            }
            Ok(attempts)
        }
        None => Err(EmqError::Lease),
    }
}

/// The deadline (unix ms) of the row's current attempt, where it has one: the row's `deadline`,
/// `<unix-ms>:<token>` as the claim wrote it, when its token is the attempt's (an earlier
/// attempt's, left in the row, is not).
pub fn deadline<S: Store>(store: &S, row: &S::Row<'_>) -> Option<i64> {
    let (attempts, fence, text) = leased_fields(store, row, Field::Deadline);
    let text = text?;
    let (ms, token) = std::str::from_utf8(store.bytes(&text))
        .ok()?
        .split_once(':')?;
    match token.parse::<i64>() {
        Ok(token) if token == lease_token(fence, attempts) => ms.parse().ok(),
        _ => None,
    }
}

/// A settle's refusal: an attempt past its deadline is stale like any other (`EMQLEASE`);
/// only a renewal is told `EMQTIMEOUT`.
fn settle_refusal(refused: EmqError) -> EmqError {
    match refused {
        EmqError::Timeout => EmqError::Lease,
        other => other,
    }
}

/// What the row says of a lease: the job is active and its current attempt's token is
/// `token`; its attempts. That it is in the active set too is the caller's to check. A token
/// that is not the lease's is `EMQCANCELLED` when `EMQ.CANCEL` ended its attempt while it ran,
/// `EMQTIMEOUT` when its deadline did, `EMQLEASE` otherwise.
fn check_token<S: Store>(store: &S, row: &S::Row<'_>, token: i64) -> Result<i64, EmqError> {
    let (attempts, fence, state) = leased_fields(store, row, Field::State);
    let active = store.holds(row) == Holds::Hash
        && state.is_some_and(|s| store.bytes(&s) == State::Active.as_bytes());
    if !active || lease_token(fence, attempts) != token {
        let ended = |field| store.field(row, field).map(|t| count_of(store, Some(t)));
        if ended(Field::Cancelled) == Some(token) {
            return Err(EmqError::Cancelled);
        }
        if ended(Field::TimedOut) == Some(token) {
            return Err(EmqError::Timeout);
        }
        return Err(EmqError::Lease);
    }
    Ok(attempts)
}

/// `EMQ.RENEW`: the lease runs until now + `ms`, or the attempt's deadline if that is sooner
/// (one past it is `EMQTIMEOUT`), and the row keeps `progress` when the worker sent one; when
/// the lease now ends (unix ms).
pub fn renew<S: Store>(
    store: &S,
    target: &Target<'_, S>,
    token: i64,
    ms: i64,
    progress: Option<&[u8]>,
) -> Result<i64, EmqError> {
    let row = target.open(store)?;
    check_lease(store, &row, target.job.member, token)?;
    let now = store.now_ms();
    // Only a `timed` queue's jobs have deadlines: no other queue reads one.
    let timed = limit::limits(store)?.timed;
    let ends = match timed.then(|| deadline(store, &row)).flatten() {
        Some(d) if d <= now => return Err(EmqError::Timeout),
        Some(d) => d.min(now + ms),
        None => now + ms,
    };
    store.add(Set::Active, ends, target.job.member)?;
    if let Some(progress) = progress {
        store.set_fields(&row, &[(Field::Progress, Value::Bytes(progress))])?;
    }
    counters::count(&RENEWED, 1);
    Ok(ends)
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
    check_lease(store, &row, target.job.member, token).map_err(settle_refusal)?;
    let parents = finished::parents(store, &row)?;
    let limits = limit::limits(store)?;
    done(store, &row, &target.job, token, result, parents.as_ref())?;
    room_freed(store, &limits)?;
    counters::count(&ACKED, 1);
    Ok(())
}

/// An ack's writes, once its lease checked out: out of `active`, and the row done for
/// `emq.done-ttl-ms` (deleted at once for 0).
fn done<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    job: &Job<'_, S>,
    token: i64,
    result: Option<&[u8]>,
    parents: Option<&S::Text>,
) -> Result<(), EmqError> {
    quota::ready_to_leave(store, &[row])?;
    store.remove(Set::Active, job.member)?;
    quota::left_active(store, row, job.member, Some(job.id), Ended::Acked)?;
    finish(store, row, job.member, token, result, parents)
}

/// The rest of an acknowledgement once the job is out of `active`: the row done (or deleted),
/// its expiry, the event.
fn finish<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    token: i64,
    result: Option<&[u8]>,
    parents: Option<&S::Text>,
) -> Result<(), EmqError> {
    finished::keep_hand_overs(
        store,
        parents,
        member,
        Outcome::Acked,
        result.unwrap_or_default(),
    );
    let ttl = settings::done_ttl_ms();
    if ttl == 0 {
        store.delete_row(row)?;
    } else {
        match result {
            Some(result) => store.set_fields(
                row,
                &[
                    (Field::State, Value::State(State::Done)),
                    (Field::Result, Value::Bytes(result)),
                ],
            )?,
            None => set_state(store, row, State::Done, None)?,
        }
        store.expire_row(row, store.now_ms() + ttl)?;
    }
    record(store, Event::Acked, Some(member), || token)
}

/// Most jobs one batched settle (`EMQ.MACK`) names.
pub const MAX_SETTLE: usize = 1000;

/// One job of a batched settle: the job, the token its worker holds (`None`: what it sent is
/// no token at all) and the result it sent.
pub struct Settle<'j, S: Store> {
    pub job: Job<'j, S>,
    pub token: Option<i64>,
    pub result: Option<&'j [u8]>,
}

/// `EMQ.MACK`: each job acknowledged as by [`ack`], on its own: `Ok`, or `EMQLEASE` in its
/// place for a token that is stale, wrong or missing (`EMQCANCELLED` for one a cancel ended), which leaves that job as it was and the
/// others settled. A job named twice is settled by its first mention; the second is stale.
/// One permission check covers the queue's sets and every row, and a row of another type
/// refuses the whole batch, both before any write.
pub fn ack_many<S: Store>(
    store: &S,
    jobs: &[Settle<'_, S>],
) -> Result<Vec<Result<(), EmqError>>, EmqError> {
    let names = jobs
        .iter()
        .map(|s| store.row_name(&s.job.id, s.job.member))
        .collect::<Result<Vec<_>, _>>()?;
    let mut keys: Vec<KeyRef<'_, S::Name>> = [Set::Pending, Set::Active, Set::Schedule, Set::Dead]
        .into_iter()
        .map(KeyRef::Set)
        .collect();
    keys.extend(names.iter().map(KeyRef::Row));
    store.check_access(&keys)?;
    drop(keys);
    store.open_sets(&Set::ALL)?;
    // Each row opened once, however often the batch names it. A batch in ascending order (as
    // claims hand jobs out) names none twice, which one pass over it shows.
    let ascending = jobs
        .windows(2)
        .all(|w| store.bytes(w[0].job.member) < store.bytes(w[1].job.member));
    let mut seen = HashSet::with_capacity(if ascending { 0 } else { jobs.len() });
    let mut rows = Vec::with_capacity(jobs.len());
    for (s, name) in jobs.iter().zip(&names) {
        if !ascending && !seen.insert(store.bytes(s.job.member)) {
            rows.push(None);
            continue;
        }
        let row = store.open_row(name)?;
        if !matches!(store.holds(&row), Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
        rows.push(Some(row));
    }
    store.events()?;
    let limits = limit::limits(store)?;
    // In a queue whose jobs may carry a deadline (`timed`), each job's lease is looked at too,
    // as [`check_lease`] does; no other queue reads a score.
    let now = store.now_ms();
    let timed_out = |s: &Settle<'_, S>, row| {
        limits.timed
            && store
                .score(Set::Active, s.job.member)
                .is_some_and(|ends| ends <= now as f64)
            && deadline(store, row).is_some_and(|d| d <= now)
    };
    // Each job's row first, reading only: the jobs whose lease it shows.
    let mut outcomes = Vec::with_capacity(jobs.len());
    let mut leased = Vec::with_capacity(jobs.len());
    for (at, (s, row)) in jobs.iter().zip(&rows).enumerate() {
        let (Some(row), Some(token)) = (row, s.token) else {
            outcomes.push(Err(EmqError::Lease));
            continue;
        };
        match check_token(store, row, token) {
            Ok(_) if timed_out(s, row) => outcomes.push(Err(EmqError::Lease)),
            Ok(_) => {
                outcomes.push(Ok(()));
                leased.push((at, row, s, token, finished::parents(store, row)?));
            }
            Err(refused) => outcomes.push(Err(settle_refusal(refused))),
        }
    }
    // Then out of `active` together, as a single ack leaves it before its row changes: one
    // `ZREM`, one event, one effect. Its removal is the check that a job is there: one that
    // is not is refused and its row left as it was.
    let members: Vec<&S::Text> = leased.iter().map(|(_, _, s, _, _)| s.job.member).collect();
    let leaving: Vec<&S::Row<'_>> = leased.iter().map(|(_, row, _, _, _)| *row).collect();
    quota::ready_to_leave(store, &leaving)?;
    drop(leaving);
    let there = store.remove_many(Set::Active, &members)?;
    let mut acked = 0u64;
    for ((at, row, s, token, parents), there) in leased.into_iter().zip(there) {
        if !there {
            outcomes[at] = Err(EmqError::Lease);
            continue;
        }
        quota::left_active(store, row, s.job.member, Some(s.job.id), Ended::Acked)?;
        finish(store, row, s.job.member, token, s.result, parents.as_ref())?;
        acked += 1;
    }
    if acked > 0 {
        room_freed(store, &limits)?;
        counters::count(&ACKED, acked);
    }
    Ok(outcomes)
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
    let attempts = check_lease(store, &row, member, token).map_err(settle_refusal)?;
    let last = attempts >= settings::max_attempts();
    // A death hands over to the job's parents: checked before the first write.
    let parents = match last {
        true => finished::parents(store, &row)?,
        false => None,
    };
    let limits = limit::limits(store)?;
    let now = store.now_ms();
    let failed = retry_or_bury(
        store, &row, member, attempts, now, error, retry_in, parents, None,
    )?;
    room_freed(store, &limits)?;
    Ok(failed)
}

/// A failed attempt's writes, once checked: `schedule` for a retry after `retry_in` or the
/// exponential backoff, or `dead` after the last attempt, handing over to `parents`. The row's
/// state, `error` and, for an attempt its deadline ended, `timedout` in one `HSET`.
#[allow(clippy::too_many_arguments)]
fn retry_or_bury<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    attempts: i64,
    now: i64,
    error: Option<&[u8]>,
    retry_in: Option<i64>,
    parents: Option<S::Text>,
    timed_out: Option<i64>,
) -> Result<Failed, EmqError> {
    let last = attempts >= settings::max_attempts();
    let state = if last { State::Dead } else { State::Scheduled };
    let mut fields = [(Field::State, Value::State(state)); 3];
    let mut n = 1;
    if let Some(error) = error {
        fields[n] = (Field::Error, Value::Bytes(error));
        n += 1;
    }
    if let Some(token) = timed_out {
        fields[n] = (Field::TimedOut, Value::Int(token));
        n += 1;
    }
    quota::ready_to_leave(store, &[row])?;
    store.remove(Set::Active, member)?;
    let ended = match (timed_out, last) {
        (Some(_), _) => Ended::TimedOut,
        (None, true) => Ended::Dead,
        (None, false) => Ended::Failed,
    };
    quota::left_active(store, row, member, None, ended)?;
    store.set_fields(row, &fields[..n])?;
    if last {
        entomb(store, member, row, now, error, parents.as_ref())?;
        counters::count(&DEAD, 1);
        return Ok(Failed::Dead);
    }
    let due = now + retry_in.unwrap_or_else(|| settings::backoff_ms(attempts));
    store.add(Set::Schedule, due, member)?;
    record(store, Event::Retrying, Some(member), || attempts)?;
    counters::count(&RETRIED, 1);
    Ok(Failed::Scheduled)
}

/// The error an attempt its deadline ended leaves in the row.
pub const TIMEOUT_ERROR: &[u8] = b"timeout";

/// The server's end of an attempt whose deadline passed (the timer's, or a claim's, visit of
/// its lease): the job fails with the error `timeout`, as by [`fail`], and the row keeps the
/// attempt's token in `timedout`. Not refused: a hand-over it cannot keep is counted
/// (`handovers_lost`), as for an expired lease.
pub fn time_out<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    now: i64,
) -> Result<Failed, EmqError> {
    let (attempts, fence, parents) = leased_fields(store, row, Field::Parents);
    let token = lease_token(fence, attempts);
    counters::count(&TIMED_OUT, 1);
    let error = Some(TIMEOUT_ERROR);
    retry_or_bury(
        store,
        row,
        member,
        attempts,
        now,
        error,
        None,
        parents,
        Some(token),
    )
}
