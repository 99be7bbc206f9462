//! Taking ready jobs under a lease (protocol.md §6), whichever way a claim chose them: their
//! rows marked active with their attempts raised, each timed attempt's deadline written, and
//! the members added to `active` in one write. A job's headers go out with it.

use std::io::Write;

use crate::protocol::job::{Claimed, ClaimedJob};
use crate::protocol::limits::{bounded, Limits, MAX_TIMEOUT_MS};
use crate::protocol::{BrandedId, EmqError, Event, Field, Holds, Set, State, Store, Value};

use super::promote::count_dropped;
use super::{lease_token, leased_fields, record, timing};

/// Most pending members without a row (deleted by hand, evicted under an `allkeys-*` policy)
/// one claim passes over, so no call does unbounded work.
pub const ORPHAN_BUDGET: usize = 1000;

/// A pending member at the head of the queue, read without writing.
pub struct Head<S: Store> {
    pub member: S::Text,
    /// Its id; `None` for a member outside the grammar.
    pub id: Option<BrandedId>,
    /// Its row's name; `None` for a member outside the grammar.
    pub row: Option<S::Name>,
    /// What the row held when read: `Nothing` for a row that is gone.
    pub holds: Holds,
}

/// How long a claim's leases run: until `end`, and, in a queue whose jobs may carry a deadline
/// (`timed`), until the attempt's deadline if that comes first.
pub struct Lease {
    /// When the claim takes its jobs.
    now: i64,
    end: i64,
    /// `Some(now)` in a timed queue, with the queue's limit on one attempt.
    timed: Option<(i64, Option<i64>)>,
}

impl Lease {
    pub fn new(limits: &Limits, now: i64, lease_ms: i64) -> Self {
        Lease {
            now,
            end: now.saturating_add(lease_ms),
            timed: limits.timed.then_some((now, limits.timeout)),
        }
    }

    /// A job's attempt's deadline, where it has one: `now` + its own `timeout`, or the queue's.
    /// (A queue not `timed` reads no field for it.)
    fn deadline<S: Store>(&self, store: &S, row: &S::Row<'_>) -> Option<i64> {
        let (now, default) = self.timed?;
        let own = store.field(row, Field::Timeout);
        let limit = bounded(own.as_ref().map(|t| store.bytes(t)), MAX_TIMEOUT_MS).or(default);
        limit.map(|ms| now.saturating_add(ms))
    }
}

/// A job a claim takes: its member, its id, and its row, open (`None`: gone, dropped).
pub type Leasing<'h, 'r, S> = (
    &'h <S as Store>::Text,
    Option<BrandedId>,
    Option<<S as Store>::Row<'r>>,
);

/// The jobs of `head`, out of where they waited, to `active` under `lease`, as a claim's
/// take says: `state active`, attempts raised by one, members without a row dropped.
pub fn lease_all<S: Store>(
    store: &S,
    head: Vec<Leasing<'_, '_, S>>,
    lease: &Lease,
) -> Result<Claimed, EmqError> {
    let mut out = Claimed::with_capacity(head.len());
    let mut taken = Vec::with_capacity(head.len());
    let metrics = timing::on();
    for (member, id, row) in &head {
        let Some(row) = row else {
            count_dropped();
            continue;
        };
        let (attempts, fence, payload) = leased_fields(store, row, Field::Payload);
        // A row of the reference's three fields has no headers: only a longer one is read for
        // them.
        let headers = match store.row_len(row) > 3 {
            true => store.field(row, Field::Headers),
            false => None,
        };
        let attempts = attempts.saturating_add(1);
        let token = lease_token(fence, attempts);
        let deadline = lease.deadline(store, row);
        // `<deadline>:<token>`: an earlier attempt's deadline, left in the row, is not this one's.
        // Written on the stack: two i64s and a colon fit in 41 bytes.
        let mut buf = [0u8; 41];
        let tagged = deadline.map(|d| {
            let mut free = &mut buf[..];
            let _ = write!(free, "{d}:{token}");
            41 - free.len()
        });
        if metrics {
            // Its attempts before this one, or a requeue's fence: claimed before.
            let again = attempts > 1 || fence > 0;
            timing::claimed(store, row, *id, lease.now, again);
        }
        let fields = [
            (Field::State, Value::State(State::Active)),
            (Field::Attempts, Value::Int(attempts)),
            (
                Field::Deadline,
                Value::Bytes(&buf[..tagged.unwrap_or_default()]),
            ),
        ];
        store.set_fields(row, &fields[..2 + usize::from(tagged.is_some())])?;
        record(store, Event::Claimed, Some(*member), || attempts)?;
        taken.push((deadline.map_or(lease.end, |d| d.min(lease.end)), *member));
        out.push(ClaimedJob {
            id: store.bytes(member),
            payload: payload.as_ref().map_or(&[][..], |p| store.bytes(p)),
            headers: headers.as_ref().map_or(&[][..], |h| store.bytes(h)),
            token,
        });
    }
    store.add_many(Set::Active, &taken)?;
    Ok(out)
}
