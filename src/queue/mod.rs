//! Every protocol.md §6 transition, in one place: enqueue, claim, renew, ack, fail, cancel, requeue,
//! and the timer's promote and bury. Each runs over the protocol's [`Store`] trait, checks
//! names, permissions and types before its first write, and counts what it did in `INFO emq`.
//! The host implements the store over the server's keys; the tests here over memory.

#![forbid(unsafe_code)]

pub mod claim;
pub mod cron;
pub mod enqueue;
pub mod finished;
pub mod flow;
pub mod group_limit;
pub mod inspect;
pub mod job;
pub mod lease;
pub mod limit;
pub mod listing;
pub mod operate;
pub mod pauses;
pub mod promote;
pub mod quota;
pub mod ready;
pub mod rounds;
pub mod span;
pub mod stats;
pub mod take;
pub mod tally;
pub mod timing;
pub mod unique;

#[cfg(test)]
mod memory;
#[cfg(test)]
mod tests;

use crate::protocol::{BrandedId, EmqError, Event, Field, Holds, KeyRef, State, Store, Value};

/// A job named by its id and its set member (the id's canonical text, as the store holds it).
pub struct Job<'j, S: Store> {
    pub id: BrandedId,
    pub member: &'j S::Text,
}

/// The row name of a set member; `None` for a member outside the grammar.
pub fn row_of<S: Store>(store: &S, member: &S::Text) -> Result<Option<S::Name>, EmqError> {
    Ok(id_row_of(store, member)?.map(|(_, name)| name))
}

/// A set member's id and its row's name; `None` for a member outside the grammar.
pub type IdRow<S> = Option<(BrandedId, <S as Store>::Name)>;

/// The id of a set member and its row's name.
pub fn id_row_of<S: Store>(store: &S, member: &S::Text) -> Result<IdRow<S>, EmqError> {
    match BrandedId::parse(store.bytes(member)) {
        Some(id) => Ok(Some((id, store.row_name(&id, member)?))),
        None => Ok(None),
    }
}

/// The ids and row names of `members` (`None` for one outside the grammar), once the
/// caller's permission on all of them is checked.
pub fn checked_rows<S: Store>(
    store: &S,
    members: &[(S::Text, f64)],
) -> Result<Vec<IdRow<S>>, EmqError> {
    let names = members
        .iter()
        .map(|(member, _)| id_row_of(store, member))
        .collect::<Result<Vec<_>, _>>()?;
    let keys: Vec<KeyRef<'_, S::Name>> = names
        .iter()
        .flatten()
        .map(|(_, name)| KeyRef::Row(name))
        .collect();
    store.check_access(&keys)?;
    Ok(names)
}

/// A count field's value as read (see `protocol::job::attempts_from`).
fn count_of<S: Store>(store: &S, text: Option<S::Text>) -> i64 {
    crate::protocol::job::attempts_from(text.as_ref().map(|t| store.bytes(t)))
}

/// The row's `attempts`.
pub fn attempts<S: Store>(store: &S, row: &S::Row<'_>) -> i64 {
    count_of(store, store.field(row, Field::Attempts))
}

/// The row's `fence` (the tokens taken before its attempts were last reset), 0 where it has
/// none.
pub fn fence<S: Store>(store: &S, row: &S::Row<'_>) -> i64 {
    count_of(store, store.field(row, Field::Fence))
}

/// The row's `attempts` and `fence` (as [`attempts`] and [`fence`] read them) and the field
/// `other`, in one read: what a claim and a settle look at in every job's row.
pub fn leased_fields<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    other: Field,
) -> (i64, i64, Option<S::Text>) {
    let [attempts, fence, other] = store.fields3(row, [Field::Attempts, Field::Fence, other]);
    (count_of(store, attempts), count_of(store, fence), other)
}

/// The lease token of a job's attempt `attempts`: that many after its `fence`, so a job's
/// tokens only grow, across `EMQ.REQUEUE` too; equal to `attempts` for a job never requeued.
pub fn lease_token(fence: i64, attempts: i64) -> i64 {
    fence.saturating_add(attempts)
}

/// The `fence` a job given back its attempts for a new life (`EMQ.REQUEUE`) takes: past every
/// token its leases took, so no worker still holding one can settle the new life's attempts.
pub fn fence_for_new_life<S: Store>(store: &S, row: &S::Row<'_>) -> i64 {
    lease_token(fence(store, row), attempts(store, row))
}

/// The row's `priority` (its `pending` score), 0 where it has none.
pub fn priority<S: Store>(store: &S, row: &S::Row<'_>) -> i64 {
    let text = store.field(row, Field::Priority);
    crate::protocol::job::priority_from(text.as_ref().map(|t| store.bytes(t)))
}

/// `HSET row state <state> [error <error>]`.
pub fn set_state<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    state: State,
    error: Option<&[u8]>,
) -> Result<(), EmqError> {
    match error {
        Some(e) => store.set_fields(
            row,
            &[
                (Field::State, Value::State(state)),
                (Field::Error, Value::Bytes(e)),
            ],
        ),
        None => store.set_fields(row, &[(Field::State, Value::State(state))]),
    }
}

/// `WRONGTYPE` unless every row is a hash or gone: all before the first write.
pub fn check_row_types<S: Store>(store: &S, rows: &[&S::Name]) -> Result<(), EmqError> {
    for name in rows {
        if !matches!(store.probe(name)?, Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
    }
    Ok(())
}

/// Appends `event` to the queue's event stream while it is on: the job's id (none for the
/// queue's own events) and its attempt, `attempt()` being read only then. A transition has
/// called `Store::events` before its first write, so this finds the answer already read.
pub fn record<S: Store>(
    store: &S,
    event: Event,
    member: Option<&S::Text>,
    attempt: impl FnOnce() -> i64,
) -> Result<(), EmqError> {
    timing::event(store, event);
    let Some(cap) = store.events()? else {
        return Ok(());
    };
    match member {
        Some(member) => {
            let attempt = attempt().to_string();
            store.append_event(
                cap,
                &[
                    (b"event", event.as_bytes()),
                    (b"id", store.bytes(member)),
                    (b"attempt", attempt.as_bytes()),
                ],
            )
        }
        None => store.append_event(cap, &[(b"event", event.as_bytes())]),
    }
}
