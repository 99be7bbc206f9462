//! The hand-overs a call's transitions kept (`Store::defer`), delivered when its `with_queue`
//! ends, over the same store, by `runtime::flows`: installed at load, since the host does not
//! reach up to the runtime.

use std::sync::OnceLock;

use crate::protocol::flow::Delivery;
use crate::protocol::Store;

use super::ServerStore;

/// What delivers the hand-overs a transition kept once it ended, over the same store.
pub type HandOver = for<'s, 'a> fn(&ServerStore<'s, 'a>, Vec<Delivery>);

static HAND_OVER: OnceLock<HandOver> = OnceLock::new();

/// Installs the delivery of hand-overs (module load).
pub fn set_hand_over(f: HandOver) {
    let _ = HAND_OVER.set(f);
}

/// Delivers the hand-overs `store`'s transitions kept.
pub(super) fn deliver(store: &ServerStore<'_, '_>) {
    let deferred = store.take_deferred();
    if let Some(hand_over) = HAND_OVER.get() {
        hand_over(store, deferred);
    }
}
