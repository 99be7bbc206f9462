//! A finished job's side of a flow (docs/flows.md): the hand-overs it keeps for the parents its
//! row names, for the call to deliver once its transitions end (`runtime::flows`). Apart from
//! `queue::flow`, so the transitions that finish a job (`lease`, `promote`, `job`) and the
//! parent's side that buries a parent (`flow`) import it without a cycle.

use crate::protocol::flow::{read_parents, Delivery, Outcome};
use crate::protocol::{BrandedId, EmqError, Field, Store};

/// The child's side, as its last transition writes it (ack, death, cancel): one hand-over
/// kept per parent its row names (`Store::defer`), to be delivered once the call's
/// transitions end. A job with no parents reads one field and keeps nothing.
pub fn keep_hand_overs<S: Store>(
    store: &S,
    row: &S::Row<'_>,
    member: &S::Text,
    outcome: Outcome,
    data: &[u8],
) -> Result<(), EmqError> {
    let Some(parents) = store.field(row, Field::Parents) else {
        return Ok(());
    };
    let Some(child) = BrandedId::parse(store.bytes(member)) else {
        return Ok(());
    };
    for parent in read_parents(store.bytes(&parents)) {
        store.defer(Delivery {
            child_queue: store.queue_name().to_vec(),
            child,
            parent,
            outcome,
            data: data.to_vec(),
        });
    }
    Ok(())
}
