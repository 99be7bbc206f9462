//! `EMQ.CLAIM`'s transition (protocol.md §6): promote what is due, then move up to `count` of the
//! lowest pending ids to `active` under a lease, `attempts` + 1 each (the lease token). A timed
//! attempt's lease ends at its deadline at the latest.

use crate::protocol::counters::{self, CLAIMED};
use crate::protocol::job::Claimed;
use crate::protocol::limits::Limits;
use crate::protocol::{EmqError, Holds, KeyRef, Set, Store};

use super::limit::{self, Window};
use super::operate::paused;
use super::promote::{Due, PROMOTE_BUDGET};
use super::rounds;
use super::span;
use super::take::{lease_all, Head, Lease, Leasing};
use super::{check_row_types, checked_rows, id_row_of};

pub use super::take::ORPHAN_BUDGET;

/// Most jobs one claim takes.
pub const MAX_COUNT: i64 = 1000;

/// What a claim did: the jobs it took, and whether it met only members without a row, as many
/// as one claim passes over, with more members waiting behind them.
pub struct Outcome {
    pub claimed: Claimed,
    pub more_behind: bool,
}

/// Promotes what is due, then claims up to `count` jobs leased for `lease_ms`: every check
/// first (permissions on the sets, then on every row it will touch, then types), then the
/// writes.
/// Whether a claim would take a job now, where that is cheap to tell: a queue neither paused,
/// rate-limited nor grouped, with ready jobs and room under its concurrency limit. `false`
/// elsewhere: those wake their blocked claimers when a job becomes claimable.
pub fn plainly_ready<S: Store>(store: &S) -> Result<bool, EmqError> {
    store.check_access(&[KeyRef::Set(Set::Pending), KeyRef::Set(Set::Active)])?;
    let limits = limit::limits(store)?;
    if limits.rate.is_some() || limits.grouped || paused(store)? {
        return Ok(false);
    }
    store.open_sets(&[Set::Pending, Set::Active])?;
    let room = |c: i64| (store.len(Set::Active) as i64) < c;
    Ok(store.len(Set::Pending) > 0 && limits.concurrency.is_none_or(room))
}

pub fn claim<S: Store>(store: &S, count: usize, lease_ms: i64) -> Result<Outcome, EmqError> {
    // The limits first (the queue's settings need no permission of their own): under a rate
    // limit the window is among the keys checked, in the one check.
    let limits = limit::limits(store)?;
    span::check_claim(store)?;
    let sets = [
        KeyRef::Set(Set::Pending),
        KeyRef::Set(Set::Active),
        KeyRef::Set(Set::Schedule),
        KeyRef::Set(Set::Dead),
        KeyRef::Set(Set::Rate),
    ];
    let checked = if limits.rate.is_some() { 5 } else { 4 };
    store.check_access(&sets[..checked])?;
    store.open_sets(&Set::ALL)?;
    if limits.rate.is_some() {
        store.open_sets(&[Set::Rate])?;
    }
    if paused(store)? {
        // No claim takes a job of a paused queue (its timer still moves what is due).
        return Ok(Outcome {
            claimed: Claimed::default(),
            more_behind: false,
        });
    }
    store.events()?;
    let now = store.now_ms();
    let window = match limits.rate {
        Some(rate) => Some(Window::read(store, rate, now)?),
        None => None,
    };
    let due = Due::find(store, now, PROMOTE_BUDGET)?;
    let in_window = window.as_ref().map_or(0, |w| w.in_window);
    let lease = Lease::new(&limits, now, lease_ms);
    let (claimed, more_behind) = match limits.grouped {
        true => claim_grouped(store, &due, count, &limits, in_window, now, &lease)?,
        false => {
            let first = match due.is_empty() {
                true => take_first(store, count, &limits, in_window, &lease)?,
                false => None,
            };
            let (claimed, limited) = match first {
                Some(taken) => taken,
                None => promote_and_take(store, &due, count, &limits, &window, now, &lease)?,
            };
            // A head with no job in it, and members still pending: the head was all rowless
            // members (now dropped) up to the budget.
            let more = claimed.is_empty() && !limited && store.len(Set::Pending) != 0;
            (claimed, more)
        }
    };
    if let Some(window) = &window {
        window.trim(store)?;
        limit::record_claims(store, now, claimed.iter().map(|c| (c.id, c.token)))?;
    }
    counters::count(&CLAIMED, claimed.len() as u64);
    Ok(Outcome {
        claimed,
        more_behind,
    })
}

/// A grouped queue's claim: promotes what is due, then takes turns between the groups
/// ([`rounds`]). The jobs taken, and whether it met only members without a row, as many as
/// one claim passes over, with more behind them.
fn claim_grouped<S: Store>(
    store: &S,
    due: &Due<S>,
    count: usize,
    limits: &Limits,
    in_window: u64,
    now: i64,
    lease: &Lease,
) -> Result<(Claimed, bool), EmqError> {
    let rows: Vec<KeyRef<'_, S::Name>> = due.rows().map(KeyRef::Row).collect();
    store.check_access(&rows)?;
    check_row_types(store, &due.rows().collect::<Vec<_>>())?;
    rounds::check(store)?;
    if !due.is_empty() {
        // The promotion writes first: what the claim would read after it is checked before.
        rounds::dry_run(store, count, limits)?;
    }
    due.promote(store, now, limits.timed)?;
    let room = limits.room(store.len(Set::Active), in_window);
    if room < count {
        counters::count(&counters::LIMITED, 1);
    }
    let taken = rounds::claim(store, count.min(room), limits, lease)?;
    let more_behind = taken.claimed.is_empty() && taken.more_behind;
    Ok((taken.claimed, more_behind))
}

/// The claim's common case, with nothing due (so no write comes before the jobs are taken):
/// the first `count` pending members (as many as the limits leave room for), every one with
/// its row, or all there are. Each row is opened once, for its checks and its writes. `None`
/// when one has no row and more members are behind it: [`promote_and_take`] passes over those.
/// The jobs taken, and whether the limits took fewer than `count`.
fn take_first<S: Store>(
    store: &S,
    count: usize,
    limits: &Limits,
    in_window: u64,
    lease: &Lease,
) -> Result<Option<(Claimed, bool)>, EmqError> {
    let room = limits.room(store.len(Set::Active), in_window);
    let limited = room < count;
    let want = count.min(room);
    let members = match want {
        0 => Vec::new(),
        n => store.range(Set::Pending, f64::NEG_INFINITY, f64::INFINITY, n)?,
    };
    let names = checked_rows(store, &members)?;
    let rows = names
        .iter()
        .map(|name| name.as_ref().map(|(_, n)| store.open_row(n)).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let mut orphans = false;
    let mut head = Vec::with_capacity(rows.len());
    let ids = names.iter().map(|name| name.as_ref().map(|(id, _)| *id));
    for (((member, _), row), id) in members.iter().zip(rows).zip(ids) {
        let row = match row.as_ref().map_or(Holds::Nothing, |r| store.holds(r)) {
            Holds::Hash => row,
            Holds::Nothing => {
                orphans = true;
                None
            }
            _ => return Err(EmqError::WrongType),
        };
        head.push((member, id, row));
    }
    if orphans && members.len() == want {
        return Ok(None);
    }
    if limited {
        counters::count(&counters::LIMITED, 1);
    }
    Ok(Some((take(store, head, lease)?, limited)))
}

/// The claim's general path: promotes what is due, then takes the head, passing over members
/// without a row. The jobs taken, and whether the limits took fewer than `count`.
fn promote_and_take<S: Store>(
    store: &S,
    due: &Due<S>,
    count: usize,
    limits: &Limits,
    window: &Option<Window<S>>,
    now: i64,
    lease: &Lease,
) -> Result<(Claimed, bool), EmqError> {
    let head = pending_head(store, count)?;
    let rows: Vec<KeyRef<'_, S::Name>> = due
        .rows()
        .chain(head.iter().filter_map(|h| h.row.as_ref()))
        .map(KeyRef::Row)
        .collect();
    store.check_access(&rows)?;
    check_row_types(store, &due.rows().collect::<Vec<_>>())?;
    check_head_types(&head)?;
    let moved = due.promote(store, now, limits.timed)?;
    // The limits' room, once expired leases left `active`.
    let room = limits.room(
        store.len(Set::Active),
        window.as_ref().map_or(0, |w| w.in_window),
    );
    let limited = room < count;
    if limited {
        counters::count(&counters::LIMITED, 1);
    }
    // Promoted jobs may now come first, and the limits may take fewer: read the head again.
    // Its rows are among those checked (the first head's and the promoted jobs').
    let head = match (moved.to_pending, limited) {
        (0, false) => head,
        _ => pending_head(store, count.min(room))?,
    };
    // The rows are opened once the promotion's writes are done.
    let rows = head
        .iter()
        .map(|h| match (&h.row, h.holds) {
            (Some(name), Holds::Hash) => store.open_row(name).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let head = head
        .iter()
        .zip(rows)
        .map(|(h, row)| (&h.member, h.id, row))
        .collect();
    Ok((take(store, head, lease)?, limited))
}

/// The lowest pending members, in order, up to the `count`-th whose row exists, read without
/// writing. Members whose row is gone are passed over, at most [`ORPHAN_BUDGET`] of them, so
/// the claim that drops them still hands out the jobs behind them.
pub fn pending_head<S: Store>(store: &S, count: usize) -> Result<Vec<Head<S>>, EmqError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut limit = count;
    loop {
        let members = store.range(Set::Pending, f64::NEG_INFINITY, f64::INFINITY, limit)?;
        let exhausted = members.len() < limit;
        let mut head = Vec::with_capacity(members.len());
        let mut live = 0;
        for (member, _) in members {
            let (id, row) = id_row_of(store, &member)?.unzip();
            let holds = match &row {
                Some(name) => store.probe(name)?,
                None => Holds::Nothing,
            };
            live += usize::from(holds != Holds::Nothing);
            head.push(Head {
                member,
                id,
                row,
                holds,
            });
            if live == count {
                return Ok(head);
            }
        }
        if exhausted || head.len() - live >= ORPHAN_BUDGET {
            return Ok(head);
        }
        limit = (limit * 2).min(count + ORPHAN_BUDGET);
    }
}

/// `WRONGTYPE` when a row of the head is neither a hash nor gone (checked after ACL, before
/// the first write).
fn check_head_types<S: Store>(head: &[Head<S>]) -> Result<(), EmqError> {
    if head
        .iter()
        .all(|h| matches!(h.holds, Holds::Nothing | Holds::Hash))
    {
        Ok(())
    } else {
        Err(EmqError::WrongType)
    }
}

/// Moves the jobs of `head` to `active` under `lease`, with `state active` and their attempts
/// raised by one, in order. Each member comes with its row, open, or `None` for a member
/// without one: those are dropped, not handed out.
fn take<S: Store>(
    store: &S,
    head: Vec<Leasing<'_, '_, S>>,
    lease: &Lease,
) -> Result<Claimed, EmqError> {
    // The sets change once for the batch: one `ZREM` out of `pending` and one `ZADD` into
    // `active`, each one event and one effect.
    store.remove_many(
        Set::Pending,
        &head
            .iter()
            .map(|(member, _, _)| *member)
            .collect::<Vec<_>>(),
    )?;
    lease_all(store, head, lease)
}
