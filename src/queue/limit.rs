//! A queue's limits (protocol.md §9, `protocol::limits`): `EMQ.LIMIT` sets and reports them, a
//! claim takes no more than they leave room for, a settled job wakes the claimers waiting for
//! room, and the timer trims the rate window and wakes them when it frees.

use crate::protocol::limits::{rate_member, Limits, MetaLimits, Rate, MAX_RATE};
use crate::protocol::{EmqError, KeyRef, Meta, Set, Store, Table};

use super::{quota, ready};

/// The queue's limits, from its `meta` hash (none where it has no hash).
pub fn limits<S: Store>(store: &S) -> Result<Limits, EmqError> {
    let read = |field| store.meta(field);
    let concurrency = read(Meta::Concurrency)?;
    let rate = read(Meta::Rate)?;
    let per = match rate {
        Some(_) => read(Meta::RatePer)?,
        None => None,
    };
    let timed = read(Meta::Timed)?;
    let timeout = match timed {
        Some(_) => read(Meta::Timeout)?,
        None => None,
    };
    let groups = read(Meta::Groups)?;
    let (group_concurrency, group_rate, group_per) = match groups {
        Some(_) => (
            read(Meta::GroupConcurrency)?,
            read(Meta::GroupRate)?,
            read(Meta::GroupRatePer)?,
        ),
        None => (None, None, None),
    };
    Ok(Limits::from_meta(MetaLimits {
        concurrency: concurrency.as_deref(),
        rate: rate.as_deref(),
        per: per.as_deref(),
        timeout: timeout.as_deref(),
        timed: timed.as_deref(),
        groups: groups.as_deref(),
        group_concurrency: group_concurrency.as_deref(),
        group_rate: group_rate.as_deref(),
        group_per: group_per.as_deref(),
    }))
}

/// Marks the queue as one whose jobs may carry a deadline (`meta` `timed`), once: from then on
/// its claims read each job's `timeout` and keep its `deadline`. The caller checked its
/// permission on `meta`.
pub fn mark_timed<S: Store>(store: &S, limits: &Limits) -> Result<(), EmqError> {
    match limits.timed {
        true => Ok(()),
        false => store.set_meta(Meta::Timed, b"1"),
    }
}

/// A change `EMQ.LIMIT` makes: each limit set (`Some(Some(..))`), removed (`Some(None)`) or
/// left as it is (`None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub concurrency: Option<Option<i64>>,
    pub rate: Option<Option<Rate>>,
    pub timeout: Option<Option<i64>>,
    /// The default concurrency limit of each group.
    pub group_concurrency: Option<Option<i64>>,
    /// The default rate limit of each group.
    pub group_rate: Option<Option<Rate>>,
}

impl Change {
    /// `EMQ.LIMIT <queue> OFF`: every limit of the queue's own (a group's own stays).
    pub const OFF: Change = Change {
        concurrency: Some(None),
        rate: Some(None),
        timeout: Some(None),
        group_concurrency: Some(None),
        group_rate: Some(None),
    };
}

/// The limits and their use now: what `EMQ.LIMIT` and `EMQ.STATS` report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub limits: Limits,
    /// Jobs active now.
    pub active: u64,
    /// Claims in the rate window now (0 without a rate limit).
    pub in_window: u64,
}

/// The queue's limits and their use, for a caller that may read its `active` set (and its
/// rate window, under a rate limit).
pub fn usage<S: Store>(store: &S) -> Result<Usage, EmqError> {
    store.check_access(&[KeyRef::Set(Set::Active), KeyRef::ReadMeta])?;
    store.open_sets(&[Set::Active])?;
    let limits = limits(store)?;
    let in_window = match limits.rate {
        Some(rate) => {
            store.check_access(&[KeyRef::Set(Set::Rate)])?;
            store.open_sets(&[Set::Rate])?;
            Window::read(store, rate, store.now_ms())?.in_window
        }
        None => 0,
    };
    Ok(Usage {
        limits,
        active: store.len(Set::Active),
        in_window,
    })
}

/// `EMQ.LIMIT <queue> ...`: applies `change` to the `meta` hash, then wakes the claimers
/// waiting on the queue (a limit raised or removed leaves them room). What the queue has now.
pub fn set<S: Store>(store: &S, change: Change) -> Result<Usage, EmqError> {
    store.check_access(&[
        KeyRef::Meta,
        KeyRef::Set(Set::Active),
        KeyRef::Set(Set::Rate),
    ])?;
    store.open_sets(&[Set::Active, Set::Rate])?;
    let groups_change = change.group_concurrency.is_some() || change.group_rate.is_some();
    if groups_change {
        // Held groups take their turns again: checked before the first write.
        store.check_access(&[
            KeyRef::Set(Set::Held),
            KeyRef::Set(Set::Turns),
            KeyRef::Set(Set::Pauses),
            KeyRef::Table(Table::Tally),
        ])?;
        store.open_sets(&[Set::Held, Set::Turns, Set::Pauses])?;
    }
    // Read first: a `meta` key of another type refuses before any write.
    let before = limits(store)?;
    if let Some(concurrency) = change.concurrency {
        match concurrency {
            Some(n) => store.set_meta(Meta::Concurrency, n.to_string().as_bytes())?,
            None => store.del_meta(Meta::Concurrency).map(drop)?,
        }
    }
    if let Some(rate) = change.rate {
        match rate {
            Some(r) => {
                store.set_meta(Meta::Rate, r.n.to_string().as_bytes())?;
                store.set_meta(Meta::RatePer, r.per_ms.to_string().as_bytes())?;
            }
            None => {
                store.del_meta(Meta::Rate)?;
                store.del_meta(Meta::RatePer)?;
            }
        }
    }
    if let Some(timeout) = change.timeout {
        match timeout {
            Some(ms) => {
                mark_timed(store, &before)?;
                store.set_meta(Meta::Timeout, ms.to_string().as_bytes())?;
            }
            // The flag stays: jobs claimed under the timeout keep their deadlines.
            None => store.del_meta(Meta::Timeout).map(drop)?,
        }
    }
    if let Some(group_concurrency) = change.group_concurrency {
        match group_concurrency {
            Some(n) => {
                if !before.grouped {
                    quota::mark_grouped(store)?;
                }
                store.set_meta(Meta::GroupConcurrency, n.to_string().as_bytes())?;
            }
            None => store.del_meta(Meta::GroupConcurrency).map(drop)?,
        }
    }
    if let Some(group_rate) = change.group_rate {
        match group_rate {
            Some(r) => {
                if !ready::grouped(store)? {
                    quota::mark_grouped(store)?;
                }
                store.set_meta(Meta::GroupRate, r.n.to_string().as_bytes())?;
                store.set_meta(Meta::GroupRatePer, r.per_ms.to_string().as_bytes())?;
            }
            None => {
                store.del_meta(Meta::GroupRate)?;
                store.del_meta(Meta::GroupRatePer)?;
            }
        }
    }
    if groups_change {
        quota::readmit_held(store)?;
    }
    if may_be_ready(store, &before) || store.len(Set::Active) != 0 {
        store.wake_claimers()?;
    }
    usage(store)
}

/// The rate window at `now`: the claims that left it (at or before `now - per`), to trim, and
/// how many are in it.
pub struct Window<S: Store> {
    pub expired: Vec<S::Text>,
    /// `now - per`: the latest time of a claim that left the window.
    pub edge: i64,
    pub in_window: u64,
}

impl<S: Store> Window<S> {
    /// Reads the open rate window without writing.
    pub fn read(store: &S, rate: Rate, now: i64) -> Result<Self, EmqError> {
        let edge = now.saturating_sub(rate.per_ms);
        let expired: Vec<S::Text> = store
            .range(Set::Rate, f64::NEG_INFINITY, edge as f64, MAX_RATE as usize)?
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        let in_window = store.len(Set::Rate).saturating_sub(expired.len() as u64);
        Ok(Self {
            expired,
            edge,
            in_window,
        })
    }

    /// Removes the claims that left the window.
    pub fn trim(&self, store: &S) -> Result<(), EmqError> {
        trim(store, &self.expired, Some(self.edge), MAX_RATE as usize)
    }
}

/// Removes `expired`, the members of the window up to `edge` read with `limit`: all of them
/// when fewer than `limit` came (one `ZREMRANGEBYSCORE`), else one by one.
fn trim<S: Store>(
    store: &S,
    expired: &[S::Text],
    edge: Option<i64>,
    limit: usize,
) -> Result<(), EmqError> {
    if expired.len() < limit {
        return store.remove_upto(Set::Rate, edge, expired);
    }
    for member in expired {
        store.remove(Set::Rate, member)?;
    }
    Ok(())
}

/// Records `claims` (each job's id and attempt) in the rate window at `now`. A job claimed
/// again with the same attempt while its first claim is in the window (requeued, or enqueued
/// again after its row went) gets a member of its own, `<id>:<attempt>:<n>`.
pub fn record_claims<'c, S: Store>(
    store: &S,
    now: i64,
    claims: impl Iterator<Item = (&'c [u8], i64)>,
) -> Result<(), EmqError> {
    let mut members = Vec::new();
    for (id, attempt) in claims {
        let base = rate_member(id, attempt);
        let mut member = store.text(&base)?;
        let mut n = 1;
        while store.score(Set::Rate, &member).is_some() {
            // At most one member per claim in the window, so this ends within MAX_RATE.
            n += 1;
            if n > MAX_RATE + 1 {
                return Err(EmqError::Internal);
            }
            let mut again = base.clone();
            again.extend_from_slice(format!(":{n}").as_bytes());
            member = store.text(&again)?;
        }
        members.push(member);
    }
    let scored: Vec<(i64, &S::Text)> = members.iter().map(|m| (now, m)).collect();
    store.add_many(Set::Rate, &scored)
}

/// Whether the queue may have ready jobs, for waking its claimers: `pending` has some, or the
/// queue is grouped (its named groups' jobs are not counted here; a wake for nothing is cheap).
pub fn may_be_ready<S: Store>(store: &S, limits: &Limits) -> bool {
    limits.grouped || store.len(Set::Pending) != 0
}

/// A job left `active` (acked or failed): under a concurrency limit, the claimers waiting on
/// the queue may take its place. `limits` were read before the first write.
pub fn room_freed<S: Store>(store: &S, limits: &Limits) -> Result<(), EmqError> {
    if limits.concurrency.is_some() && may_be_ready(store, limits) {
        store.wake_claimers()?;
    }
    Ok(())
}

/// The timer's part (a visit): trims up to `budget` claims that left the rate window (all of
/// them when the queue has no rate limit any more), wakes the claimers waiting on the queue
/// when that made room, and says when the window next frees (`None`: it is empty).
pub fn visit_window<S: Store>(
    store: &S,
    limits: &Limits,
    now: i64,
    budget: usize,
) -> Result<Option<i64>, EmqError> {
    let edge = limits.rate.map(|rate| now.saturating_sub(rate.per_ms));
    let expired: Vec<S::Text> = store
        .range(
            Set::Rate,
            f64::NEG_INFINITY,
            edge.map_or(f64::INFINITY, |e| e as f64),
            budget,
        )?
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    trim(store, &expired, edge, budget)?;
    if expired.len() >= budget {
        return Ok(Some(now));
    }
    if !expired.is_empty() && limits.rate.is_some() && may_be_ready(store, limits) {
        store.wake_claimers()?;
    }
    let oldest = store
        .range(Set::Rate, f64::NEG_INFINITY, f64::INFINITY, 1)?
        .first()
        .map(|(_, at)| *at as i64);
    Ok(match (oldest, limits.rate) {
        (Some(at), Some(rate)) => Some(at.saturating_add(rate.per_ms)),
        (Some(_), None) => Some(now),
        (None, _) => None,
    })
}
