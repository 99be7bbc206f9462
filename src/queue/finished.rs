//! A finished job's side of a flow (docs/flows.md): the hand-overs it keeps for the parents its
//! row names, for the call to deliver once its transitions end (`runtime::flows`), and its
//! burial in `dead`. Apart from `queue::flow`, so the transitions that finish a job (`lease`,
//! `promote`, `job`) and the parent's side that buries a parent (`flow`) import it without a
//! cycle.

use crate::protocol::flow::{read_parents, Delivery, Outcome};
use crate::protocol::{BrandedId, EmqError, Event, Field, Set, State, Store, Table};

use super::{attempts, record, set_state};

/// A finishing job's `parents` field, read before its transition's first write (`None` for a
/// job that is no child: one field read). Any hand-over of a child may need the queue's outbox
/// (a parent out of reach, its queue open already, a chain too deep, a parent that refuses):
/// a key of another type there refuses the transition (`WRONGTYPE`), nothing written.
pub fn parents<S: Store>(store: &S, row: &S::Row<'_>) -> Result<Option<S::Text>, EmqError> {
    let parents = store.field(row, Field::Parents);
    if parents.is_some() {
        store.table_len(Table::Outbox)?;
    }
    Ok(parents)
}

/// The child's side, as its last transition writes it (ack, death, cancel): one hand-over
/// kept per parent in `parents` (its row's field, read by [`parents`]), to be delivered once
/// the call's transitions end (`Store::defer`).
pub fn keep_hand_overs<S: Store>(
    store: &S,
    parents: Option<&S::Text>,
    member: &S::Text,
    outcome: Outcome,
    data: &[u8],
) {
    let Some(parents) = parents else {
        return;
    };
    let Some(child) = BrandedId::parse(store.bytes(member)) else {
        return;
    };
    for parent in read_parents(store.bytes(parents)) {
        store.defer(Delivery {
            child_queue: store.queue_name().to_vec(),
            child,
            parent,
            outcome,
            data: data.to_vec(),
        });
    }
}

/// Moves a job from `from` to `dead` at `now`, with `state dead` and its last error; its
/// hand-overs are kept for the `parents` its row names (`finished::parents`).
pub fn bury<S: Store>(
    store: &S,
    from: Set,
    member: &S::Text,
    row: &S::Row<'_>,
    now: i64,
    error: Option<&[u8]>,
    parents: Option<&S::Text>,
) -> Result<(), EmqError> {
    if from == Set::Active {
        super::quota::ready_to_leave(store, &[row])?;
    }
    store.remove(from, member)?;
    if from == Set::Active {
        let dead = crate::protocol::metrics::Ended::Dead;
        super::quota::left_active(store, row, member, None, dead)?;
    }
    set_state(store, row, State::Dead, error)?;
    entomb(store, member, row, now, error, parents)
}

/// The rest of a burial once the job left its set and its row says `dead`: into `dead` at
/// `now`, with its event and its hand-overs.
pub fn entomb<S: Store>(
    store: &S,
    member: &S::Text,
    row: &S::Row<'_>,
    now: i64,
    error: Option<&[u8]>,
    parents: Option<&S::Text>,
) -> Result<(), EmqError> {
    store.add(Set::Dead, now, member)?;
    record(store, Event::Dead, Some(member), || attempts(store, row))?;
    let error = error.unwrap_or_default();
    keep_hand_overs(store, parents, member, Outcome::Dead, error);
    Ok(())
}
