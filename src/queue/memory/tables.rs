//! [`Memory`]'s tables (`unique`, `cron`, `outbox`): their type, and their fields for a test
//! to read.

use crate::protocol::{EmqError, Table};

use super::{MemKey, Memory};

impl Memory {
    pub(super) fn table_type(&self, table: Table) -> Result<(), EmqError> {
        match self.other.borrow().contains(&MemKey::Table(table)) {
            true => Err(EmqError::WrongType),
            false => Ok(()),
        }
    }

    /// The table's fields and values, in field order.
    pub fn table_fields(&self, table: Table) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.tables
            .borrow()
            .iter()
            .filter(|((t, _), _)| *t == table as u8)
            .map(|((_, f), v)| (f.clone(), v.clone()))
            .collect()
    }
}
