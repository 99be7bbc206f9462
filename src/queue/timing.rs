//! What the transitions tell the queue's metrics (docs/observability.md): each event, and each
//! claim and attempt's end, which the store times once the call's writes are done (how long a
//! job waited ready before its claim, how long an attempt ran, how long a job took from its
//! id's minting to its ack). A job's ready time is the row's `ready` field, which a transition
//! that makes a job ready again writes while `emq.metrics` is on, or its id's minting.

use crate::protocol::metrics::{Ended, Observed, Timed};
use crate::protocol::{settings, BrandedId, EmqError, Event, Field, State, Store, Value};

/// Whether the server keeps metrics now: the transitions write and read their times only then.
pub fn on() -> bool {
    settings::metrics()
}

/// A time field of the row (unix ms).
fn time_field<S: Store>(store: &S, row: &S::Row<'_>, field: Field) -> Option<i64> {
    let text = store.field(row, field)?;
    std::str::from_utf8(store.bytes(&text)).ok()?.parse().ok()
}

/// An event happened to a job or to the queue: counted.
pub fn event<S: Store>(store: &S, event: Event) {
    if on() {
        store.observe(Observed::Event(event));
    }
}

/// A job is claimed at `now`: its wait runs from when it last became ready (its `ready`, or its
/// id's minting for a job ready since its enqueue). A job claimed before (`again`: its attempts
/// or its fence not 0) has a `ready`; another has one only in a queue where a transition wrote
/// one, as far as this server saw since it started (a delayed job or a released parent
/// promoted before a restart is counted from its id).
pub fn claimed<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    id: Option<BrandedId>,
    now: i64,
    again: bool,
) {
    let readied = (again || store.may_be_readied())
        .then(|| time_field(store, row, Field::Ready))
        .flatten();
    store.time(Timed::Claimed {
        id,
        at: now,
        readied,
    });
}

/// Job `member`'s attempt left `active`, ended as `ended`: its claim time is dropped, and
/// while metrics are on its run time is counted, and for an ack how long the job took. `id`:
/// the member's id where the caller parsed it.
pub fn ended<S: Store>(store: &S, member: &S::Text, id: Option<BrandedId>, ended: Ended) {
    if let Some(id) = id.or_else(|| BrandedId::parse(store.bytes(member))) {
        store.time(Timed::Ended { id, ended });
    }
}

/// `state pending`, and when the job became ready (`ready`): a promotion, an expired lease, a
/// released parent. Written whether metrics are kept or not, so no older time stays behind.
pub fn set_pending<S: Store>(store: &S, row: &S::Row<'_>) -> Result<(), EmqError> {
    readied(store);
    store.set_fields(
        row,
        &[
            (Field::State, Value::State(State::Pending)),
            (Field::Ready, Value::Int(store.now_ms())),
        ],
    )
}

/// A transition writes a row's `ready`: the queue's claims read it from now on.
pub fn readied<S: Store>(store: &S) {
    if on() {
        store.observe(Observed::Readied);
    }
}
