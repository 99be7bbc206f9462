//! The names of a queue's keys as one call's store asks for them, each made once: sets and
//! tables from the name cache, so the hot paths create no string for them.

use std::cell::OnceCell;

use valkey_module::Context;

use crate::protocol::{EmqError, KeyBuf, KeyType, Queue, Set, Table};

use super::super::string::OwnedString;

/// The names of a queue's keys (its four sets, `meta` and `events`), each made when first
/// asked for.
pub struct QueueNames<'q> {
    ctx: &'q Context,
    pub(super) queue: Queue<'q>,
    names: [OnceCell<OwnedString>; Set::COUNT + 2 + Table::COUNT],
}

impl<'q> QueueNames<'q> {
    #[inline]
    pub fn new(ctx: &'q Context, queue: Queue<'q>) -> Self {
        Self {
            ctx,
            queue,
            names: Default::default(),
        }
    }

    #[inline]
    pub fn get(&self, set: Set) -> Result<&OwnedString, EmqError> {
        self.named(set.index(), set.key_type())
    }

    #[inline]
    pub(super) fn meta(&self) -> Result<&OwnedString, EmqError> {
        self.named(Set::COUNT, KeyType::Meta)
    }

    #[inline(always)]
    pub(super) fn events(&self) -> Result<&OwnedString, EmqError> {
        self.named(Set::COUNT + 1, KeyType::Events)
    }

    /// The name of one of the queue's tables.
    pub fn table(&self, table: Table) -> Result<&OwnedString, EmqError> {
        self.named(Set::COUNT + 2 + table as usize, table.key_type())
    }

    #[inline]
    fn named(&self, i: usize, ty: KeyType) -> Result<&OwnedString, EmqError> {
        let cell = &self.names[i];
        if let Some(name) = cell.get() {
            return Ok(name);
        }
        let name = OwnedString::cached(self.ctx, KeyBuf::queue(self.queue, ty).as_bytes())?;
        Ok(cell.get_or_init(|| name))
    }
}
