//! The job state machine (SPEC §6): jobs move between `pending`, `active`, `schedule` and
//! `dead`. Every move here does its writes through `store`, fires the keyspace events the
//! native commands would, and replicates its effects (through `effects`) with resolved ids
//! and absolute times. Callers validate first (see [`Sets::open`] and [`check_row_types`]);
//! these functions then write.

use valkey_module::Context;

use crate::config;
use crate::effects;
use crate::error::EmqError;
use crate::grammar::{BrandedId, KeyBuf, KeyType, Queue};
use crate::metrics;
use crate::store::{self, Holds, Key, OwnedString, Str, Words};

/// Row states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Pending,
    Scheduled,
    Active,
    Done,
    Dead,
}

impl State {
    /// The state's value in the row, as a retained server string.
    pub fn word(self, words: &'static Words) -> Str<'static> {
        match self {
            State::Pending => words.pending,
            State::Scheduled => words.scheduled,
            State::Active => words.active,
            State::Done => words.done,
            State::Dead => words.dead,
        }
    }

    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            State::Pending => b"pending",
            State::Scheduled => b"scheduled",
            State::Active => b"active",
            State::Done => b"done",
            State::Dead => b"dead",
        }
    }
}

/// Most jobs one call (or one timer tick per queue) promotes from each of `schedule` and
/// `active`, so no call does unbounded work.
pub const PROMOTE_BUDGET: usize = 1000;

/// The names of a queue's four sets.
pub struct QueueKeys {
    pub pending: OwnedString,
    pub active: OwnedString,
    pub schedule: OwnedString,
    pub dead: OwnedString,
}

impl QueueKeys {
    pub fn new(ctx: &Context, queue: Queue<'_>) -> Result<Self, EmqError> {
        let name = |ty| OwnedString::cached(ctx, KeyBuf::queue(queue, ty).as_bytes());
        Ok(Self {
            pending: name(KeyType::Pending)?,
            active: name(KeyType::Active)?,
            schedule: name(KeyType::Schedule)?,
            dead: name(KeyType::Dead)?,
        })
    }

    pub fn all(&self) -> [&OwnedString; 4] {
        [&self.pending, &self.active, &self.schedule, &self.dead]
    }
}

/// The four sets, open, each checked to be a zset or missing.
pub struct Sets<'k> {
    pub pending: Key<'k>,
    pub active: Key<'k>,
    pub schedule: Key<'k>,
    pub dead: Key<'k>,
}

impl<'k> Sets<'k> {
    pub fn open(ctx: &Context, keys: &'k QueueKeys) -> Result<Self, EmqError> {
        let sets = Self {
            pending: Key::open(ctx, &keys.pending)?,
            active: Key::open(ctx, &keys.active)?,
            schedule: Key::open(ctx, &keys.schedule)?,
            dead: Key::open(ctx, &keys.dead)?,
        };
        for k in [&sets.pending, &sets.active, &sets.schedule, &sets.dead] {
            k.expect_zset()?;
        }
        Ok(sets)
    }
}

/// The row key of a job; `None` for a set member outside the grammar.
pub fn row_name(
    ctx: &Context,
    queue: Queue<'_>,
    member: &[u8],
) -> Result<Option<OwnedString>, EmqError> {
    match BrandedId::parse(member) {
        Some(id) => Ok(Some(OwnedString::new(
            ctx,
            KeyBuf::job(queue, &id).as_bytes(),
        )?)),
        None => Ok(None),
    }
}

/// The type of every row a call may touch (a hash or nothing): all before the first write.
/// Commands check ACL on the same rows first, with `store::check_access`.
pub fn check_row_types(ctx: &Context, rows: &[&OwnedString]) -> Result<(), EmqError> {
    for name in rows {
        if !matches!(Key::probe(ctx, name)?.holds(), Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
    }
    Ok(())
}

// ---- single writes with their events and effects ---------------------------------------

pub fn zadd(ctx: &Context, set: &Key<'_>, score: i64, member: Str<'_>) -> Result<(), EmqError> {
    if !set.zadd(score as f64, member)? {
        // Already there with this score: as a native `ZADD`, no event and no effect.
        return Ok(());
    }
    store::notify(ctx, store::NOTIFY_ZSET, c"zadd", set.name());
    // Pending scores are always 0: no string to make for those.
    let text = match score {
        0 => None,
        n => Some(OwnedString::from_i64(ctx, n)?),
    };
    let score = text
        .as_ref()
        .map_or(store::words()?.zero, OwnedString::as_str);
    effects::emit(ctx, c"ZADD", &[set.name().as_str(), score, member]);
    Ok(())
}

/// Writes a new job row as SPEC §1.2 and the reference script have it (`state`,
/// `attempts 0`, `payload`, in that order), with its `hset` event and replicated `HSET`.
pub fn write_row(
    ctx: &Context,
    row: &Key<'_>,
    state: State,
    payload: Str<'_>,
) -> Result<(), EmqError> {
    let words = store::words()?;
    let (state, attempts, payload) = (
        (words.state, state.word(words)),
        (words.attempts, words.zero),
        (words.payload, payload),
    );
    row.hash_set3([state, attempts, payload])?;
    store::notify(ctx, store::NOTIFY_HASH, c"hset", row.name());
    let args = [
        row.name().as_str(),
        state.0,
        state.1,
        attempts.0,
        attempts.1,
        payload.0,
        payload.1,
    ];
    effects::emit(ctx, c"HSET", &args);
    Ok(())
}

pub fn zrem(ctx: &Context, set: &Key<'_>, member: Str<'_>) -> Result<bool, EmqError> {
    if !set.zrem(member)? {
        return Ok(false);
    }
    store::notify(ctx, store::NOTIFY_ZSET, c"zrem", set.name());
    if set.is_empty() {
        store::notify(ctx, store::NOTIFY_GENERIC, c"del", set.name());
    }
    effects::emit(ctx, c"ZREM", &[set.name().as_str(), member]);
    Ok(true)
}

pub fn hset(ctx: &Context, row: &Key<'_>, fields: &[(Str<'_>, Str<'_>)]) -> Result<(), EmqError> {
    let mut args = Vec::with_capacity(1 + fields.len() * 2);
    args.push(row.name().as_str());
    for (field, value) in fields {
        row.hash_set(*field, *value)?;
        args.push(*field);
        args.push(*value);
    }
    store::notify(ctx, store::NOTIFY_HASH, c"hset", row.name());
    effects::emit(ctx, c"HSET", &args);
    Ok(())
}

pub fn delete(ctx: &Context, row: &Key<'_>) -> Result<(), EmqError> {
    row.delete()?;
    store::notify(ctx, store::NOTIFY_GENERIC, c"del", row.name());
    effects::emit(ctx, c"DEL", &[row.name().as_str()]);
    Ok(())
}

pub fn expire_at(ctx: &Context, row: &Key<'_>, at_ms: i64) -> Result<(), EmqError> {
    row.expire_at(at_ms)?;
    store::notify(ctx, store::NOTIFY_GENERIC, c"expire", row.name());
    let at = OwnedString::from_i64(ctx, at_ms)?;
    effects::emit(ctx, c"PEXPIREAT", &[row.name().as_str(), at.as_str()]);
    Ok(())
}

/// The row's `attempts` field as a number: 0 when missing, not a number or negative (a row
/// written by hand), so a claim's token is always at least 1.
pub fn attempts_of(row: &Key<'_>) -> i64 {
    row.hash_get(c"attempts")
        .and_then(|a| std::str::from_utf8(a.bytes()).ok()?.parse::<i64>().ok())
        .map_or(0, |a| a.max(0))
}

// ---- moves ---------------------------------------------------------------------------------

/// What a queue has due at `now`: scheduled jobs whose time came and leases that expired.
pub struct Due {
    pub scheduled: Vec<(OwnedString, Option<OwnedString>)>,
    pub expired: Vec<(OwnedString, Option<OwnedString>)>,
}

impl Due {
    /// Reads (without writing) up to `budget` due members of each set, with their row names.
    pub fn find(
        ctx: &Context,
        queue: Queue<'_>,
        sets: &Sets<'_>,
        now: i64,
        budget: usize,
    ) -> Result<Self, EmqError> {
        let with_rows = |members| with_rows(ctx, queue, members);
        let horizon = now as f64;
        Ok(Self {
            scheduled: with_rows(sets.schedule.zrange_by_score(
                f64::NEG_INFINITY,
                horizon,
                budget,
            )?)?,
            expired: with_rows(
                sets.active
                    .zrange_by_score(f64::NEG_INFINITY, horizon, budget)?,
            )?,
        })
    }

    pub fn rows(&self) -> impl Iterator<Item = &OwnedString> {
        self.scheduled
            .iter()
            .chain(&self.expired)
            .filter_map(|(_, row)| row.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty() && self.expired.is_empty()
    }

    /// Whether a set gave all `budget` members it could: more may be due.
    pub fn is_full(&self, budget: usize) -> bool {
        self.scheduled.len() >= budget || self.expired.len() >= budget
    }

    /// Moves due scheduled jobs to pending; expired leases to pending, or to dead when their
    /// attempts are spent. Members without a row are dropped. Returns how many went where.
    pub fn promote(&self, ctx: &Context, sets: &Sets<'_>, now: i64) -> Result<Moved, EmqError> {
        let mut moved = Moved::default();
        for (member, row) in &self.scheduled {
            moved.to_pending +=
                move_to_pending(ctx, sets, &sets.schedule, member, row.as_ref())? as usize;
        }
        for (member, row) in &self.expired {
            let spent = match row {
                Some(name) => attempts_of(&Key::open(ctx, name)?) >= config::max_attempts(),
                None => false,
            };
            if spent {
                if let Some(name) = row {
                    bury(
                        ctx,
                        sets,
                        &sets.active,
                        member,
                        name,
                        now,
                        Some(b"lease expired"),
                    )?;
                    moved.buried += 1;
                }
            } else {
                moved.to_pending +=
                    move_to_pending(ctx, sets, &sets.active, member, row.as_ref())? as usize;
            }
        }
        Ok(moved)
    }
}

/// What [`Due::promote`] did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Moved {
    /// Jobs back in `pending`.
    pub to_pending: usize,
    /// Jobs whose lease expired on their last attempt, moved to `dead`.
    pub buried: usize,
}

fn move_to_pending(
    ctx: &Context,
    sets: &Sets<'_>,
    from: &Key<'_>,
    member: &OwnedString,
    row: Option<&OwnedString>,
) -> Result<bool, EmqError> {
    zrem(ctx, from, member.as_str())?;
    let row = match row {
        Some(name) => Key::open(ctx, name)?,
        None => {
            count_dropped();
            return Ok(false);
        }
    };
    if row.holds() != Holds::Hash {
        count_dropped();
        return Ok(false);
    }
    set_state(ctx, &row, State::Pending, None)?;
    zadd(ctx, &sets.pending, 0, member.as_str())?;
    Ok(true)
}

/// Counts a set member dropped because its row was gone.
fn count_dropped() {
    metrics::count(&metrics::DROPPED, 1);
}

/// Moves a job from `from` to `dead` at `now`, with `state dead` and its last error.
pub fn bury(
    ctx: &Context,
    sets: &Sets<'_>,
    from: &Key<'_>,
    member: &OwnedString,
    row_name: &OwnedString,
    now: i64,
    error: Option<&[u8]>,
) -> Result<(), EmqError> {
    zrem(ctx, from, member.as_str())?;
    let row = Key::open(ctx, row_name)?;
    set_state(ctx, &row, State::Dead, error)?;
    zadd(ctx, &sets.dead, now, member.as_str())?;
    Ok(())
}

/// `HSET row state <state> [error <error>]`.
pub fn set_state(
    ctx: &Context,
    row: &Key<'_>,
    new_state: State,
    error: Option<&[u8]>,
) -> Result<(), EmqError> {
    let words = store::words()?;
    let value = new_state.word(words);
    match error {
        Some(e) => {
            let e = OwnedString::new(ctx, e)?;
            hset(ctx, row, &[(words.state, value), (words.error, e.as_str())])
        }
        None => hset(ctx, row, &[(words.state, value)]),
    }
}

/// The earliest due time or lease deadline of the queue (unix ms), if it has any.
pub fn next_due(sets: &Sets<'_>) -> Result<Option<i64>, EmqError> {
    let first = |set: &Key<'_>| -> Result<Option<f64>, EmqError> {
        Ok(set
            .zrange_by_score(f64::NEG_INFINITY, f64::INFINITY, 1)?
            .first()
            .map(|(_, s)| *s))
    };
    let earliest = match (first(&sets.schedule)?, first(&sets.active)?) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(earliest.map(|at| at as i64))
}

/// A job handed to a worker by `EMQ.CLAIM`.
pub struct Claimed {
    pub id: Vec<u8>,
    pub payload: Vec<u8>,
    pub attempts: i64,
}

/// Set members (scores dropped) with the names of their rows.
fn with_rows(
    ctx: &Context,
    queue: Queue<'_>,
    members: Vec<(OwnedString, f64)>,
) -> Result<Vec<(OwnedString, Option<OwnedString>)>, EmqError> {
    members
        .into_iter()
        .map(|(m, _)| {
            let row = row_name(ctx, queue, m.bytes())?;
            Ok((m, row))
        })
        .collect()
}

/// A pending member at the head of the queue, read without writing.
pub struct Head {
    pub member: OwnedString,
    /// Its row's name; `None` for a member outside the grammar.
    pub row: Option<OwnedString>,
    /// What the row held when read: `Nothing` for a row that is gone.
    pub holds: Holds,
}

/// Most pending members without a row (deleted by hand, evicted under an `allkeys-*` policy)
/// one claim passes over, so no call does unbounded work.
pub const ORPHAN_BUDGET: usize = 1000;

/// The lowest pending members, in order, up to the `count`-th whose row exists, read without
/// writing. Members whose row is gone are passed over, at most [`ORPHAN_BUDGET`] of them, so
/// the claim that drops them still hands out the jobs behind them.
pub fn pending_head(
    ctx: &Context,
    queue: Queue<'_>,
    sets: &Sets<'_>,
    count: usize,
) -> Result<Vec<Head>, EmqError> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut limit = count;
    loop {
        let members = sets
            .pending
            .zrange_by_score(f64::NEG_INFINITY, f64::INFINITY, limit)?;
        let exhausted = members.len() < limit;
        let mut head = Vec::with_capacity(members.len());
        let mut live = 0;
        for (member, _) in members {
            let row = row_name(ctx, queue, member.bytes())?;
            let holds = match &row {
                Some(name) => Key::probe(ctx, name)?.holds(),
                None => Holds::Nothing,
            };
            live += usize::from(holds != Holds::Nothing);
            head.push(Head { member, row, holds });
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
pub fn check_head_types(head: &[Head]) -> Result<(), EmqError> {
    if head
        .iter()
        .all(|h| matches!(h.holds, Holds::Nothing | Holds::Hash))
    {
        Ok(())
    } else {
        Err(EmqError::WrongType)
    }
}

/// Moves the jobs of `head` (from [`pending_head`]) to `active` until `deadline`, with
/// `state active` and `attempts` + 1, in order. Members without a row are dropped, not handed
/// out.
pub fn claim(
    ctx: &Context,
    sets: &Sets<'_>,
    head: Vec<Head>,
    deadline: i64,
) -> Result<Vec<Claimed>, EmqError> {
    let mut out = Vec::new();
    for Head { member, row, holds } in head {
        zrem(ctx, &sets.pending, member.as_str())?;
        // What the row held was read with the head (and checked by `check_head_types`).
        let (Some(name), Holds::Hash) = (row, holds) else {
            count_dropped();
            continue;
        };
        let row = Key::open(ctx, &name)?;
        let attempts = attempts_of(&row).saturating_add(1);
        let words = store::words()?;
        let n = OwnedString::from_i64(ctx, attempts)?;
        hset(
            ctx,
            &row,
            &[(words.state, words.active), (words.attempts, n.as_str())],
        )?;
        zadd(ctx, &sets.active, deadline, member.as_str())?;
        let payload = row
            .hash_get(c"payload")
            .map(|p| p.bytes().to_vec())
            .unwrap_or_default();
        out.push(Claimed {
            id: member.bytes().to_vec(),
            payload,
            attempts,
        });
    }
    Ok(out)
}
