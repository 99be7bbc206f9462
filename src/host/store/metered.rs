//! The queue's entry in the server's metrics (`host::metrics`), found once a call.

use super::super::metrics::{entry, Shared};
use super::ServerStore;
use crate::protocol::Store;

impl ServerStore<'_, '_> {
    /// The queue's metrics, found at the call's first use.
    pub(super) fn metrics(&self) -> Option<&Shared> {
        self.metrics
            .get_or_init(|| entry(self.queue_name()))
            .as_ref()
    }
}
