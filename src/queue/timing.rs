//! What the transitions tell the queue's metrics (docs/observability.md): each event, how long
//! a job waited ready before its claim, how long an attempt ran, how long a job took from its
//! id's minting to its ack. The times come from the id itself, from the row's `ready` field,
//! which a transition that makes a job ready again writes while `emq.metrics` is on, and from
//! the claim times the store keeps for the attempts in flight.

use crate::protocol::metrics::{Ended, Observed};
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

/// A job is claimed at `now`: how long it waited since it last became ready (its `ready`, or
/// its id's minting for a job ready since its enqueue). A job claimed before (`again`: its
/// attempts or its fence not 0) has a `ready`; another has one only in a queue where a
/// transition wrote one, as far as this server saw since it started (a delayed job or a
/// released parent promoted before a restart is counted from its id).
pub fn claimed<S: Store>(store: &S, row: &S::Row<'_>, member: &S::Text, now: i64, again: bool) {
    // A snowflake's time is its minting, as EchoMQ and its clients mint ids; a hand-chosen id
    // reads as a time in 2024, past what a histogram counts.
    let id = BrandedId::parse(store.bytes(member));
    if let Some(id) = &id {
        store.note_claim(id.value(), now);
    }
    let readied = || time_field(store, row, Field::Ready);
    let since = (again || store.may_be_readied())
        .then(readied)
        .flatten()
        .or_else(|| id.map(|id| id.minted_at_ms() as i64));
    if let Some(since) = since {
        store.observe(Observed::Wait(now - since));
    }
}

/// Job `member`'s attempt left `active`, ended as `ended`: how long it ran since its claim,
/// and for an ack how long the job took since its id's minting.
pub fn ended<S: Store>(store: &S, member: &S::Text, ended: Ended) {
    let Some(id) = BrandedId::parse(store.bytes(member)) else {
        return;
    };
    let claimed = store.take_claim(id.value());
    if !on() {
        return;
    }
    let now = store.now_ms();
    if let Some(claimed) = claimed.filter(|_| ended != Ended::Cancelled) {
        store.observe(Observed::Run(ended, now - claimed));
    }
    if ended == Ended::Acked {
        store.observe(Observed::EndToEnd(now - id.minted_at_ms() as i64));
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
