//! [`Memory`]'s tables (`unique`, `cron`, `outbox`, `tally`): their type, their writes, and
//! their fields for a test to read.

use crate::protocol::{EmqError, ScanStep, Table};

use super::{text, MemKey, Memory};

impl Memory {
    pub(super) fn mem_table_set(
        &self,
        table: Table,
        field: &[u8],
        value: &[u8],
    ) -> Result<(), EmqError> {
        self.table_type(table)?;
        self.tables
            .borrow_mut()
            .insert((table as u8, field.to_vec()), value.to_vec());
        self.log(format!("HSET {table:?} {} {}", text(field), text(value)));
        Ok(())
    }

    pub(super) fn mem_table_del(&self, table: Table, field: &[u8]) -> Result<bool, EmqError> {
        self.table_type(table)?;
        let was = self
            .tables
            .borrow_mut()
            .remove(&(table as u8, field.to_vec()))
            .is_some();
        if was {
            self.log(format!("HDEL {table:?} {}", text(field)));
        }
        Ok(was)
    }

    pub(super) fn mem_table_scan(
        &self,
        table: Table,
        cursor: u64,
        count: usize,
    ) -> Result<ScanStep, EmqError> {
        self.table_type(table)?;
        // The cursor is the place of the next field, in field order.
        let all = self.table_fields(table);
        let from = usize::try_from(cursor).unwrap_or(usize::MAX).min(all.len());
        let to = from.saturating_add(count.max(1)).min(all.len());
        let next = if to >= all.len() { 0 } else { to as u64 };
        Ok((next, all[from..to].to_vec()))
    }

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
