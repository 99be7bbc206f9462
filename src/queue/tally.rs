//! A grouped queue's counts and a group's own limit (docs/groups.md): `tally`'s `pending` (the
//! named groups' ready jobs) and `active:<g>` (each group's active jobs, `active:` the default
//! group's), and `quotas`' `concurrency:<g>`. Each field is there only while it is not 0 (or
//! set).

use crate::protocol::limits::{bounded, Rate, MAX_CONCURRENCY};
use crate::protocol::{EmqError, Store, Table};

/// The `tally` field counting the named groups' ready jobs.
pub const PENDING: &[u8] = b"pending";

/// A count of `tally` (0 where the field is missing or not a number).
fn read<S: Store>(store: &S, field: &[u8]) -> Result<u64, EmqError> {
    let text = store.table_get(Table::Tally, field)?;
    Ok(text
        .as_ref()
        .and_then(|t| {
            std::str::from_utf8(store.bytes(t))
                .ok()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0))
}

/// Adds `delta` to a count of `tally` (the field goes at 0); the new count.
fn add<S: Store>(store: &S, field: &[u8], delta: i64) -> Result<u64, EmqError> {
    let now = (read(store, field)? as i64).saturating_add(delta).max(0);
    match now {
        0 => store.table_del(Table::Tally, field).map(drop)?,
        n => store.table_set(Table::Tally, field, n.to_string().as_bytes())?,
    }
    Ok(now as u64)
}

fn field(prefix: &[u8], group: &[u8]) -> Vec<u8> {
    [prefix, group].concat()
}

/// How many ready jobs the named groups have.
pub fn grouped_len<S: Store>(store: &S) -> Result<u64, EmqError> {
    read(store, PENDING)
}

/// Adds `delta` to the named groups' count of ready jobs.
pub fn count<S: Store>(store: &S, delta: i64) -> Result<(), EmqError> {
    add(store, PENDING, delta).map(drop)
}

/// How many jobs of `group` (`""`: the default group) are active.
pub fn active<S: Store>(store: &S, group: &[u8]) -> Result<u64, EmqError> {
    read(store, &field(b"active:", group))
}

/// Adds `delta` to the count of `group`'s active jobs; the new count.
pub fn add_active<S: Store>(store: &S, group: &[u8], delta: i64) -> Result<u64, EmqError> {
    add(store, &field(b"active:", group), delta)
}

/// A named group's own limit (`quotas`).
pub fn own<S: Store>(store: &S, group: &[u8]) -> Result<Option<i64>, EmqError> {
    if group.is_empty() {
        return Ok(None);
    }
    let text = store.table_get(Table::Quotas, &field(b"concurrency:", group))?;
    Ok(bounded(
        text.as_ref().map(|t| store.bytes(t)),
        MAX_CONCURRENCY,
    ))
}

/// Sets (`Some`) or removes a named group's own limit.
pub fn set_own<S: Store>(store: &S, group: &[u8], n: Option<i64>) -> Result<(), EmqError> {
    let name = field(b"concurrency:", group);
    match n {
        Some(n) => store.table_set(Table::Quotas, &name, n.to_string().as_bytes()),
        None => store.table_del(Table::Quotas, &name).map(drop),
    }
}

/// How many claims of `group` its rate window holds now (the timer and the claims trim it).
pub fn in_window<S: Store>(store: &S, group: &[u8]) -> Result<u64, EmqError> {
    read(store, &field(b"window:", group))
}

/// Adds `delta` to the count of `group`'s claims in its rate window.
pub fn add_in_window<S: Store>(store: &S, group: &[u8], delta: i64) -> Result<u64, EmqError> {
    add(store, &field(b"window:", group), delta)
}

/// A named group's own rate limit (`quotas` `rate:<g>`, `<n>:<per-ms>`).
pub fn own_rate<S: Store>(store: &S, group: &[u8]) -> Result<Option<Rate>, EmqError> {
    if group.is_empty() {
        return Ok(None);
    }
    let text = store.table_get(Table::Quotas, &field(b"rate:", group))?;
    Ok(text.as_ref().and_then(|t| {
        let (n, per) = std::str::from_utf8(store.bytes(t)).ok()?.split_once(':')?;
        Rate::from_meta(Some(n.as_bytes()), Some(per.as_bytes()))
    }))
}

/// Sets (`Some`) or removes a named group's own rate limit.
pub fn set_own_rate<S: Store>(store: &S, group: &[u8], rate: Option<Rate>) -> Result<(), EmqError> {
    let name = field(b"rate:", group);
    match rate {
        Some(r) => store.table_set(
            Table::Quotas,
            &name,
            format!("{}:{}", r.n, r.per_ms).as_bytes(),
        ),
        None => store.table_del(Table::Quotas, &name).map(drop),
    }
}
