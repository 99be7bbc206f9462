//! A grouped queue's counts and its groups' limits in force (docs/groups.md): `tally`'s `pending` (the
//! named groups' ready jobs) and `active:<g>` (each group's active jobs, `active:` the default
//! group's), and `quotas`' `concurrency:<g>`. Each field is there only while it is not 0 (or
//! set).

use crate::protocol::limits::{bounded, Limits, Rate, MAX_CONCURRENCY};
use crate::protocol::{EmqError, Meta, Store, Table};

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

/// Adds each positive delta to its group's count of active jobs, in one write.
pub fn add_active_many<S: Store>(store: &S, deltas: &[(&[u8], u64)]) -> Result<(), EmqError> {
    let names: Vec<Vec<u8>> = deltas.iter().map(|(g, _)| field(b"active:", g)).collect();
    let counts: Vec<(&[u8], u64)> = names
        .iter()
        .zip(deltas)
        .map(|(n, (_, d))| (&n[..], *d))
        .collect();
    store.table_add_many(Table::Tally, &counts)
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

/// A group's limits in force: its own, or the queue's defaults for groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupLimits {
    pub concurrency: Option<i64>,
    pub rate: Option<Rate>,
}

impl GroupLimits {
    /// The queue's defaults, as its limits were read.
    pub fn defaults(limits: &Limits) -> Self {
        GroupLimits {
            concurrency: limits.group_concurrency,
            rate: limits.group_rate,
        }
    }

    /// The queue's defaults, read from `meta`.
    pub fn read_defaults<S: Store>(store: &S) -> Result<Self, EmqError> {
        let meta = |m| store.meta(m);
        Ok(GroupLimits {
            concurrency: bounded(meta(Meta::GroupConcurrency)?.as_deref(), MAX_CONCURRENCY),
            rate: Rate::from_meta(
                meta(Meta::GroupRate)?.as_deref(),
                meta(Meta::GroupRatePer)?.as_deref(),
            ),
        })
    }

    /// `group`'s: its own where it has them, else these defaults.
    pub fn of<S: Store>(&self, store: &S, group: &[u8]) -> Result<Self, EmqError> {
        Ok(GroupLimits {
            concurrency: own(store, group)?.or(self.concurrency),
            rate: own_rate(store, group)?.or(self.rate),
        })
    }

    /// How many more jobs of `group` (whose limits these are) a claim may take.
    pub fn room<S: Store>(&self, store: &S, group: &[u8]) -> Result<usize, EmqError> {
        let left = |limit: i64, used: u64| {
            usize::try_from((limit as u64).saturating_sub(used)).unwrap_or(usize::MAX)
        };
        let by_concurrency = match self.concurrency {
            Some(n) => left(n, active(store, group)?),
            None => usize::MAX,
        };
        let by_rate = match self.rate {
            Some(r) => left(r.n, in_window(store, group)?),
            None => usize::MAX,
        };
        Ok(by_concurrency.min(by_rate))
    }
}

/// Whether any group of the queue has a limit (the defaults, or one of its own).
pub fn any<S: Store>(store: &S, defaults: &GroupLimits) -> Result<bool, EmqError> {
    Ok(*defaults != GroupLimits::default() || store.table_len(Table::Quotas)? != 0)
}

/// Whether `group`'s limits leave it room for one more job now.
pub fn has_room<S: Store>(store: &S, group: &[u8]) -> Result<bool, EmqError> {
    let defaults = GroupLimits::read_defaults(store)?;
    if !any(store, &defaults)? {
        return Ok(true);
    }
    Ok(defaults.of(store, group)?.room(store, group)? > 0)
}
