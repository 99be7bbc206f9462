//! A grouped queue's claim (docs/groups.md): round robin over the groups with ready jobs, in
//! the order of `turns`, the default group (`pending`, member `""`) among them. Each job a group
//! gives sends it behind the others; a group left empty leaves `turns`, and one that reached
//! its concurrency limit leaves it for `held` (`quota`). Planned by reads alone, then written,
//! so a refusal writes nothing.

use crate::protocol::job::Claimed;
use crate::protocol::limits::{Limits, Rate};
use crate::protocol::{EmqError, Group, Holds, KeyRef, Set, Store, Table};

use super::quota::{self, GroupLimits};
use super::take::{lease_all, Head, Lease, ORPHAN_BUDGET};
use super::{id_row_of, ready, tally};

/// One group's part in a claim.
struct Slot<S: Store> {
    /// Its name in `turns`; `""` for the default group.
    name: S::Text,
    /// Whether it is a named group (its jobs in its own key, not in `pending`).
    named: bool,
    /// Whether its name is in the grammar (one written into `turns` by hand may not be).
    valid: bool,
    /// Whether `turns` holds it (the default group takes its first turn from a claim).
    in_turns: bool,
    /// Its first ready jobs, read so far, in order.
    read: Vec<Head<S>>,
    /// How many of `read` the claim takes.
    used: usize,
    /// Whether its writes left it no ready job.
    left_empty: bool,
    /// Whether `read` holds all of its ready jobs.
    complete: bool,
    /// The claim's count of live jobs when it last gave one.
    last: Option<usize>,
    /// How many more of its jobs its limits let be taken.
    room: usize,
    /// Its rate limit, whose window its jobs enter.
    rate: Option<Rate>,
    /// How many live jobs it gives.
    given: usize,
}

impl<S: Store> Slot<S> {
    /// The group `name` (`""`: the default group), with its room under the limits, where the
    /// queue's groups have any (`quotas`).
    fn new(
        store: &S,
        name: S::Text,
        in_turns: bool,
        quotas: Option<&GroupLimits>,
    ) -> Result<Self, EmqError> {
        let named = !store.bytes(&name).is_empty();
        if named && Group::parse(store.bytes(&name)).is_none() {
            // A name outside the grammar, written into `turns` by hand: spent, and dropped.
            return Ok(Slot {
                named,
                valid: false,
                name,
                in_turns,
                read: Vec::new(),
                used: 0,
                left_empty: true,
                complete: true,
                last: None,
                room: 0,
                rate: None,
                given: 0,
            });
        }
        let (room, rate) = match quotas {
            Some(defaults) => {
                let limits = defaults.of(store, store.bytes(&name))?;
                (limits.room(store, store.bytes(&name))?, limits.rate)
            }
            None => (usize::MAX, None),
        };
        // A group with no room gives nothing: whether it has ready jobs (held) or none (gone
        // from the turns) is its size alone.
        let len = match (room, named) {
            (0, true) => Some(store.group_len(store.bytes(&name))?),
            (0, false) => Some(store.len(Set::Pending)),
            _ => None,
        };
        Ok(Slot {
            named,
            valid: true,
            name,
            in_turns,
            read: Vec::new(),
            used: 0,
            left_empty: false,
            complete: len == Some(0),
            last: None,
            room,
            rate,
            given: 0,
        })
    }

    /// Reads `more` (at least one) of its ready jobs after those read so far.
    fn read_more(&mut self, store: &S, more: usize) -> Result<(), EmqError> {
        let limit = self.read.len() + more.max(1);
        let members = match self.named {
            true => store.group_range(store.bytes(&self.name), limit)?,
            false => store.range(Set::Pending, f64::NEG_INFINITY, f64::INFINITY, limit)?,
        };
        self.complete = members.len() < limit;
        for (member, _) in members.into_iter().skip(self.read.len()) {
            let (id, row) = id_row_of(store, &member)?.unzip();
            let holds = match &row {
                Some(name) => store.probe(name)?,
                None => Holds::Nothing,
            };
            self.read.push(Head {
                member,
                id,
                row,
                holds,
            });
        }
        Ok(())
    }

    /// Whether the claim takes every ready job it has, as far as its reads show (a group whose
    /// last job the claim took without reading further is found empty by its writes).
    fn emptied(&self) -> bool {
        (self.complete && self.used == self.read.len()) || self.left_empty
    }

    /// Whether it reached its concurrency limit with ready jobs left: held back.
    fn held(&self) -> bool {
        self.given >= self.room && !self.emptied()
    }

    /// Whether it can give no more jobs to this claim.
    fn spent(&self) -> bool {
        self.emptied() || self.given >= self.room
    }
}

/// What a grouped claim did: the jobs it took, and whether it stopped at the budget of
/// members without a row, with more behind them.
pub struct Taken {
    pub claimed: Claimed,
    pub more_behind: bool,
}

/// Checks the caller may write the groups' sets and tables a claim touches, and opens them:
/// before the claim's first write.
pub fn check<S: Store>(store: &S) -> Result<(), EmqError> {
    store.check_access(&[
        KeyRef::Set(Set::Turns),
        KeyRef::Set(Set::Held),
        KeyRef::Set(Set::Pauses),
        KeyRef::Set(Set::Groups),
        KeyRef::Set(Set::Windows),
        KeyRef::Table(Table::Tally),
        KeyRef::Table(Table::Quotas),
    ])?;
    store.open_sets(&[
        Set::Turns,
        Set::Held,
        Set::Pauses,
        Set::Groups,
        Set::Windows,
    ])?;
    store.table_len(Table::Tally)?;
    store.table_len(Table::Quotas).map(drop)
}

/// Most groups one claim reads from `turns`: past them it stops (with `more_behind` when it
/// took nothing), so no claim scans the groups.
pub const GROUP_BUDGET: usize = 1000;

/// Takes up to `want` ready jobs, one from each group in turn, leased under `lease`, as far
/// as each group's concurrency limit lets.
pub fn claim<S: Store>(
    store: &S,
    want: usize,
    limits: &Limits,
    lease: &Lease,
) -> Result<Taken, EmqError> {
    if want == 0 {
        return Ok(Taken {
            claimed: Claimed::default(),
            more_behind: false,
        });
    }
    check(store)?;
    let defaults = GroupLimits::defaults(limits);
    let quotas = quota::any(store, &defaults)?.then_some(&defaults);
    let now = store.now_ms();
    if quotas.is_some() {
        // Claims that left their groups' windows make room before the plan reads it.
        quota::trim_windows(store, now, quota::READMIT_BUDGET)?;
    }
    let Planned {
        default,
        joins,
        mut slots,
        picks,
        more_behind,
    } = planned(store, want, quotas)?;

    // Out of where they waited, each group's at once.
    let mut named_taken = 0;
    for s in slots.iter_mut().filter(|s| s.used > 0) {
        let members: Vec<&S::Text> = s.read[..s.used].iter().map(|h| &h.member).collect();
        s.left_empty = match s.named {
            true => {
                named_taken += members.len();
                store.group_remove(store.bytes(&s.name), &members)?.1 == 0
            }
            false => {
                store.remove_many(Set::Pending, &members)?;
                store.len(Set::Pending) == 0
            }
        };
    }
    if named_taken > 0 {
        tally::count(store, -(named_taken as i64))?;
    }
    // The groups' counts and backlogs, each in one write however many groups gave.
    let gave: Vec<(&[u8], u64)> = slots
        .iter()
        .filter(|s| s.given > 0)
        .map(|s| (store.bytes(&s.name), s.given as u64))
        .collect();
    tally::add_active_many(store, &gave)?;
    let taken: Vec<(&S::Text, u64)> = slots
        .iter()
        .filter(|s| s.named && s.valid && s.used > 0)
        .map(|s| (&s.name, s.used as u64))
        .collect();
    ready::index_less(store, &taken)?;
    for s in slots
        .iter()
        .filter(|s| s.named && s.used > 0 && s.emptied() && s.valid)
    {
        ready::forget_if_idle(store, &s.name)?;
    }
    turn(store, &slots, joins, &default)?;

    let rows = picks
        .iter()
        .map(|&(s, i)| {
            let head = &slots[s].read[i];
            match (&head.row, head.holds) {
                (Some(name), Holds::Hash) => store.open_row(name).map(Some),
                _ => Ok(None),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let head = picks
        .iter()
        .map(|&(s, i)| &slots[s].read[i])
        .zip(rows)
        .map(|(h, row)| (&h.member, h.id, row))
        .collect();
    let claimed = lease_all(store, head, lease)?;
    // Each job taken of a group under a rate limit enters its window: the claimed jobs are the
    // picks with a row, in order.
    let owners: Vec<usize> = picks
        .iter()
        .filter(|&&(s, i)| slots[s].read[i].row.is_some() && slots[s].read[i].holds == Holds::Hash)
        .map(|&(s, _)| s)
        .collect();
    for (s, slot) in slots.iter().enumerate() {
        if let Some(rate) = slot.rate.filter(|_| slot.given > 0) {
            let mine = claimed
                .iter()
                .zip(&owners)
                .filter(|(_, o)| **o == s)
                .map(|(c, _)| (c.id, c.token));
            quota::record_claims(store, store.bytes(&slot.name), rate, now, mine)?;
        }
    }
    Ok(Taken {
        claimed,
        more_behind,
    })
}

/// A claim's plan and its checks, made by reads alone: the default group's name, whether it
/// joins the turns, the groups read, the picks, and whether the claim stopped at members
/// without a row.
struct Planned<S: Store> {
    default: S::Text,
    joins: bool,
    slots: Vec<Slot<S>>,
    picks: Vec<(usize, usize)>,
    more_behind: bool,
}

/// Plans a claim of `want` jobs and checks all it would touch (the rows, their types, the
/// groups' keys), reading only.
fn planned<S: Store>(
    store: &S,
    want: usize,
    quotas: Option<&GroupLimits>,
) -> Result<Planned<S>, EmqError> {
    let default = store.text(b"")?;
    // The default group's first turn comes after the others'.
    let joins = store.len(Set::Pending) != 0
        && store.score(Set::Turns, &default).is_none()
        && store.score(Set::Held, &default).is_none();
    let mut slots: Vec<Slot<S>> = Vec::new();
    let (picks, more_behind) = plan(store, &mut slots, want, joins, quotas)?;

    // Every check before the first write: the rows, their types, the groups' keys.
    let mut keys: Vec<KeyRef<'_, S::Name>> = picks
        .iter()
        .filter_map(|&(s, i)| slots[s].read[i].row.as_ref().map(KeyRef::Row))
        .collect();
    keys.extend(
        slots
            .iter()
            .filter(|s| s.named && s.valid && (s.used > 0 || s.emptied()))
            .map(|s| KeyRef::Group(store.bytes(&s.name))),
    );
    store.check_access(&keys)?;
    drop(keys);
    if picks
        .iter()
        .any(|&(s, i)| !matches!(slots[s].read[i].holds, Holds::Nothing | Holds::Hash))
    {
        return Err(EmqError::WrongType);
    }

    Ok(Planned {
        default,
        joins,
        slots,
        picks,
        more_behind,
    })
}

/// Checks, reading only, what a claim of `want` jobs would read and take now: for a claim whose
/// promotion writes first, so a row of the wrong type or a key the caller may not use among
/// the groups' heads refuses it before that write.
pub fn dry_run<S: Store>(store: &S, want: usize, limits: &Limits) -> Result<(), EmqError> {
    if want == 0 {
        return Ok(());
    }
    check(store)?;
    let defaults = GroupLimits::defaults(limits);
    let quotas = quota::any(store, &defaults)?.then_some(&defaults);
    planned(store, want, quotas).map(drop)
}

/// The round robin, read only: one live job from each group in turn until `want` are taken or
/// every group is spent, reading the groups of `turns` as far as needed (and the default
/// group after them, when it `joins`). The picks (slot, place in its `read`), members without
/// a row among them, and whether it stopped at [`ORPHAN_BUDGET`] of those.
fn plan<S: Store>(
    store: &S,
    slots: &mut Vec<Slot<S>>,
    want: usize,
    joins: bool,
    quotas: Option<&GroupLimits>,
) -> Result<(Vec<(usize, usize)>, bool), EmqError> {
    let mut picks = Vec::with_capacity(want);
    let (mut live, mut orphans) = (0, 0);
    let mut all_read = false;
    // Where the last read of `turns` ended: the next starts at its score, past the `at_from`
    // names read with that score.
    let (mut from, mut at_from) = (f64::NEG_INFINITY, 0);
    while live < want && orphans < ORPHAN_BUDGET {
        // Every group read so far is spent (or none was read): read the next ones.
        if slots.iter().all(Slot::spent) {
            if all_read || slots.len() >= GROUP_BUDGET {
                break;
            }
            let need = (want - live).min(GROUP_BUDGET - slots.len());
            let turns = store.range(Set::Turns, from, f64::INFINITY, need + at_from)?;
            all_read = turns.len() < need + at_from;
            // The first `at_from` are the names read before at that score (`turns` sorts
            // by score, then name, and the plan writes nothing).
            for (name, score) in turns.into_iter().skip(at_from) {
                match score > from {
                    true => (from, at_from) = (score, 1),
                    false => at_from += 1,
                }
                slots.push(Slot::new(store, name, true, quotas)?);
            }
            if all_read && joins {
                slots.push(Slot::new(store, store.text(b"")?, false, quotas)?);
            }
        }
        let per = (want - live).div_ceil(slots.len().max(1));
        let mut gave = false;
        for (s, slot) in slots.iter_mut().enumerate() {
            while live < want && orphans < ORPHAN_BUDGET && slot.given < slot.room {
                if slot.used == slot.read.len() {
                    if slot.complete {
                        break;
                    }
                    slot.read_more(store, per)?;
                    continue;
                }
                picks.push((s, slot.used));
                let holds = slot.read[slot.used].holds;
                slot.used += 1;
                if holds == Holds::Nothing {
                    orphans += 1;
                    continue;
                }
                live += 1;
                slot.given += 1;
                slot.last = Some(live);
                gave = true;
                break;
            }
        }
        if !gave && (all_read || slots.len() >= GROUP_BUDGET) {
            break;
        }
    }
    let stopped = orphans >= ORPHAN_BUDGET || (!all_read && slots.len() >= GROUP_BUDGET);
    Ok((picks, stopped))
}

/// `turns` after the claim: each group it emptied leaves, and each it held back at its limit
/// leaves for `held`; the default group, new to `turns`, takes its first turn behind the
/// others; each group that gave a job goes behind all, in the order of their last jobs.
fn turn<S: Store>(
    store: &S,
    slots: &[Slot<S>],
    joins: bool,
    default: &S::Text,
) -> Result<(), EmqError> {
    let gone: Vec<&S::Text> = slots
        .iter()
        .filter(|s| s.in_turns && (s.emptied() || s.held()))
        .map(|s| &s.name)
        .collect();
    store.remove_many(Set::Turns, &gone)?;
    let now = store.now_ms();
    let held: Vec<(i64, &S::Text)> = slots
        .iter()
        .filter(|s| s.held() && (s.in_turns || joins))
        .map(|s| (now, &s.name))
        .collect();
    store.add_many(Set::Held, &held)?;
    let mut next = store.last_score(Set::Turns)?.unwrap_or(0.0) as i64 + 1;
    let mut behind: Vec<(i64, &S::Text)> = Vec::new();
    let joined = slots.iter().find(|s| !s.in_turns);
    if joins && joined.is_none_or(|s| s.last.is_none() && !s.emptied() && !s.held()) {
        behind.push((next, default));
        next += 1;
    }
    let mut gave: Vec<&Slot<S>> = slots
        .iter()
        .filter(|s| s.last.is_some() && !s.emptied() && !s.held())
        .collect();
    gave.sort_by_key(|s| s.last);
    for s in gave {
        behind.push((next, &s.name));
        next += 1;
    }
    // One write, however many groups go behind.
    store.add_many(Set::Turns, &behind)
}
