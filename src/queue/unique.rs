//! Deduplication windows (protocol.md §9): `EMQ.ENQUEUE ... UNIQUE <key> [FOR <ms>]`. The queue's
//! `unique` table maps each key to the job that holds it: `<id>` while that job is pending,
//! scheduled or active (the window lasts until it is done or dead), or `<id>:<until>` for a
//! window that ends at `until` (unix ms) whatever becomes of the job.
//!
//! A lookup decides from the entry and the holder's row alone, so it is exact whatever the
//! table still holds: the timer's sweep only deletes what no lookup would honour any more,
//! a bounded step at a time.

use crate::protocol::{BrandedId, EmqError, Field, Holds, KeyRef, State, Store, Table};

/// Longest unique key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Most entries one sweep step of the timer reads.
pub const SWEEP_BUDGET: usize = 100;

/// `UNIQUE <key> [FOR <ms>]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unique<'u> {
    pub key: &'u [u8],
    pub for_ms: Option<i64>,
}

/// An entry of the table: the holder's id, and when its window ends (`None`: when the job is
/// done or dead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub holder: BrandedId,
    pub until: Option<i64>,
}

impl Entry {
    /// Reads an entry back; `None` for a value EchoMQ did not write (then no one holds the key).
    pub fn parse(value: &[u8]) -> Option<Entry> {
        let (id, until) = match value.iter().position(|&b| b == b':') {
            Some(at) => {
                let until = std::str::from_utf8(&value[at + 1..]).ok()?.parse().ok()?;
                (&value[..at], Some(until))
            }
            None => (value, None),
        };
        Some(Entry {
            holder: BrandedId::parse(id)?,
            until,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.holder.encode().to_vec();
        if let Some(until) = self.until {
            v.push(b':');
            v.extend_from_slice(until.to_string().as_bytes());
        }
        v
    }
}

/// The job that holds `key` at `now`, if one does; read without writing. The caller has the
/// right to the table (`check`).
pub fn holder<S: Store>(store: &S, key: &[u8], now: i64) -> Result<Option<BrandedId>, EmqError> {
    let Some(value) = store.table_get(Table::Unique, key)? else {
        return Ok(None);
    };
    let Some(entry) = Entry::parse(store.bytes(&value)) else {
        return Ok(None);
    };
    Ok(honoured(store, key, &entry, now)?.then_some(entry.holder))
}

/// Whether an entry still holds `key`: its window has not ended, or, without one, its job is
/// still pending, scheduled or active, and is the job that took the key (its row says so: a
/// job enqueued again under that id, after the row went, holds nothing).
fn honoured<S: Store>(store: &S, key: &[u8], entry: &Entry, now: i64) -> Result<bool, EmqError> {
    if let Some(until) = entry.until {
        return Ok(until > now);
    }
    holder_in(
        store,
        key,
        entry,
        &[State::Pending, State::Scheduled, State::Active],
    )
}

/// Whether the entry's holder has a row in one of `states` that names `key`.
fn holder_in<S: Store>(
    store: &S,
    key: &[u8],
    entry: &Entry,
    states: &[State],
) -> Result<bool, EmqError> {
    let member = store.text(&entry.holder.encode())?;
    let name = store.row_name(&entry.holder, &member)?;
    if store.probe(&name)? != Holds::Hash {
        return Ok(false);
    }
    let row = store.open_row(&name)?;
    let is = |field, matches: &dyn Fn(&[u8]) -> bool| {
        store
            .field(&row, field)
            .is_some_and(|v| matches(store.bytes(&v)))
    };
    let in_states = |v: &[u8]| states.iter().any(|s| s.as_bytes() == v);
    Ok(is(Field::State, &in_states) && is(Field::Unique, &|v| v == key))
}

/// Whether the sweep may delete an entry: no lookup honours it now, nor can one later. A dead
/// holder's entry (no window) holds nothing now, but `EMQ.REQUEUE` brings the job back with its
/// key, and then the entry holds again: it stays until the dead row goes (the dead set's
/// retention, a purge), so whether a requeued job holds its key never depends on when the
/// sweep ran.
fn spent<S: Store>(store: &S, key: &[u8], entry: &Entry, now: i64) -> Result<bool, EmqError> {
    if honoured(store, key, entry, now)? {
        return Ok(false);
    }
    Ok(entry.until.is_some() || !holder_in(store, key, entry, &[State::Dead])?)
}

/// The caller's right to the table, checked before a lookup.
pub fn check<S: Store>(store: &S) -> Result<(), EmqError> {
    store.check_access(&[KeyRef::Table(Table::Unique)])
}

/// Records that `holder` holds `key` from `now` (for `for_ms`, or until it is done or dead).
pub fn take<S: Store>(
    store: &S,
    unique: &Unique<'_>,
    holder: BrandedId,
    now: i64,
) -> Result<(), EmqError> {
    let entry = Entry {
        holder,
        until: unique.for_ms.map(|ms| now.saturating_add(ms)),
    };
    store.table_set(Table::Unique, unique.key, &entry.encode())
}

/// One step of the timer's sweep from `cursor`: deletes the entries that hold their key no
/// more and never will again (a window that ended, a job done or gone, a value EchoMQ did not
/// write; a dead job's entry stays while its row does, as a requeue makes it hold again), at most
/// [`SWEEP_BUDGET`] read. The next cursor (0: the sweep went round) and how many it deleted.
pub fn sweep<S: Store>(store: &S, cursor: u64, now: i64) -> Result<(u64, usize), EmqError> {
    let (next, entries) = store.table_scan(Table::Unique, cursor, SWEEP_BUDGET)?;
    let mut stale = Vec::new();
    for (key, value) in entries.into_iter().take(SWEEP_BUDGET * 2) {
        let gone = match Entry::parse(&value) {
            Some(entry) => spent(store, &key, &entry, now)?,
            None => true,
        };
        if gone {
            stale.push(key);
        }
    }
    for key in &stale {
        store.table_del(Table::Unique, key)?;
    }
    Ok((next, stale.len()))
}

/// How soon the sweep takes its next step while it goes round the table.
pub const SWEEP_STEP_MS: i64 = 100;
/// How soon a sweep that went round starts again, while the table has entries.
pub const SWEEP_ROUND_MS: i64 = 1_000;

/// The timer's part (a visit): one sweep step from `cursor` when the queue has a table. The
/// next cursor, and when to step again (`None`: the queue has no table).
pub fn visit_table<S: Store>(
    store: &S,
    cursor: u64,
    now: i64,
) -> Result<(u64, Option<i64>), EmqError> {
    if store.table_len(Table::Unique)? == 0 {
        return Ok((0, None));
    }
    let (next, _) = sweep(store, cursor, now)?;
    let again = match (next, store.table_len(Table::Unique)?) {
        (_, 0) => None,
        (0, _) => Some(now + SWEEP_ROUND_MS),
        _ => Some(now + SWEEP_STEP_MS),
    };
    Ok((next, again))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_foreign_values_hold_nothing() {
        let id = BrandedId::new(*b"JOB", 7).expect("id");
        for until in [None, Some(1_800_000_000_000)] {
            let e = Entry { holder: id, until };
            assert_eq!(Entry::parse(&e.encode()), Some(e));
        }
        assert_eq!(Entry::parse(b"not an id"), None);
        assert_eq!(Entry::parse(b"JOB0000000000H:soon"), None);
    }
}
