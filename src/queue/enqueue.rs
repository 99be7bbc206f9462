//! Enqueue (protocol.md §4, §6): the reference `@enqueue` script as one in-process step, for one job
//! or an all-or-nothing batch. Every check runs before the first write, in protocol.md §4 order:
//! queue -> id -> kind -> payload size ([`check_new`], while parsing) -> ACL -> row exists ->
//! set type. A due time in the future parks the job in `schedule` with `state scheduled`.

use std::sync::Mutex;

use crate::protocol::counters::{self, DUPLICATES, ENQUEUED, SCHEDULED};
use crate::protocol::{
    job, settings, BrandedId, EmqError, Event, Field, Holds, KeyRef, Minter, Set, State, Store,
    Value, MORE_FIELDS,
};

use super::span::{self, Lane};
use super::unique::{self, Unique};
use super::{limit, quota, ready};
use super::{record, Job};

static MINTER: Mutex<Minter> = Mutex::new(Minter::new());

/// A minted id that collides with an existing row (a clock far behind the data) is minted
/// again, at most this many times.
pub const MINT_TRIES: usize = 8;

/// Most ids a batch to a partition may mint to route there (each job needs about its width):
/// a bound on the call's time and on how far the minter runs ahead of the clock.
pub const MINT_BUDGET: usize = 100_000;

/// Most jobs one batch takes.
pub const MAX_BATCH: usize = 10_000;

/// A fresh `JOB` id for this node, minted at `now_ms`.
pub fn mint(now_ms: i64) -> BrandedId {
    let mut minter = MINTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    minter.mint(u64::try_from(now_ms).unwrap_or(0), settings::node_id())
}

/// A job's id (when the client gave one) and payload, as protocol.md §2 and §1.2 allow them: only a
/// `JOB` id may be enqueued, and the payload fits `emq.max-payload-bytes`.
pub fn check_new(id: Option<&BrandedId>, payload: &[u8]) -> Result<(), EmqError> {
    if id.is_some_and(|id| !id.is_job()) {
        return Err(EmqError::Kind);
    }
    job::check_payload(payload)
}

/// A minted id and its set member (the id's text, as the store holds it); in a partition
/// (`lane`), one that routes to it.
fn fresh<S: Store>(store: &S, lane: Option<&Lane>) -> Result<(BrandedId, S::Text), EmqError> {
    let mut id = mint(store.now_ms());
    if let Some(lane) = lane {
        let mut tries = 1;
        while !lane.takes(&id.encode()) {
            if tries == lane.mint_tries() {
                return Err(EmqError::Internal);
            }
            id = mint(store.now_ms());
            tries += 1;
        }
    }
    Ok((id, store.text(&id.encode())?))
}

/// Mints ids until `take` accepts one (a minted id that collides with an existing row, a
/// clock far behind the data, is minted again), at most [`MINT_TRIES`] times; whether one was
/// taken.
fn until_free<S: Store>(
    store: &S,
    lane: Option<&Lane>,
    mut take: impl FnMut(BrandedId, S::Text) -> Result<bool, EmqError>,
) -> Result<bool, EmqError> {
    for _ in 0..MINT_TRIES {
        let (id, member) = fresh(store, lane)?;
        if take(id, member)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Where a new job goes: the ready set now, or the delayed set at its due time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Ready,
    Due(i64),
}

impl Placement {
    /// `at` (unix ms), or ready when that time has come by `now`.
    pub fn at(at: i64, now: i64) -> Self {
        if at > now {
            Placement::Due(at)
        } else {
            Placement::Ready
        }
    }

    fn set(self) -> Set {
        match self {
            Placement::Ready => Set::Pending,
            Placement::Due(_) => Set::Schedule,
        }
    }
}

/// What an enqueue did with one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// Written, under the id the client gave.
    New,
    /// Written, under an id minted for it.
    Minted(BrandedId),
    /// Its row exists already (before, or earlier in the batch): nothing written.
    Duplicate,
    /// Its unique key is held by this job (`EMQ.ENQUEUE ... UNIQUE`): nothing written.
    Held(BrandedId),
}

/// Enqueues one job: `job` with the client's id, or `None` to mint one, at `priority` (its
/// `pending` score; a delayed job takes it there when it comes due).
pub fn enqueue<S: Store>(
    store: &S,
    job: Option<Job<'_, S>>,
    payload: &S::Text,
    placement: Placement,
    priority: i64,
) -> Result<Added, EmqError> {
    enqueue_with(store, job, payload, placement, priority, None)
}

/// [`enqueue`], and with `unique`, only when no job holds its key: a job that does is the
/// answer, and nothing is written (protocol.md §9).
pub fn enqueue_with<S: Store>(
    store: &S,
    job: Option<Job<'_, S>>,
    payload: &S::Text,
    placement: Placement,
    priority: i64,
    unique: Option<&Unique<'_>>,
) -> Result<Added, EmqError> {
    enqueue_extras(
        store,
        job,
        payload,
        placement,
        priority,
        unique,
        &Extras::default(),
    )
}

/// What a job carries beyond the reference row's facts: its place in a flow (docs/flows.md),
/// a parent waiting for `children` or a child of the parents its `parents` field names
/// (`protocol::flow::write_parents`), and its own limit on one attempt, `timeout` ms.
#[derive(Default)]
pub struct Extras {
    pub children: Option<i64>,
    pub parents: Option<Vec<u8>>,
    pub timeout: Option<i64>,
    /// The named group the job is in (`EMQ.ENQUEUE ... GROUP`; a parsed name).
    pub group: Option<Vec<u8>>,
    /// Its `headers` field (`EMQ.ENQUEUE ... HEADERS`; `protocol::headers`).
    pub headers: Option<Vec<u8>>,
}

/// [`enqueue_with`], for a job with [`Extras`]: a parent is written to `waiting` (scored by
/// its due time, 0 for none) with `state waiting` and its `children`; a child's row keeps its
/// `parents`, and a timed job its `timeout` (the queue marked `timed` once). Registering the
/// child with its parents is the caller's (`flow::adopt`).
pub fn enqueue_extras<S: Store>(
    store: &S,
    job: Option<Job<'_, S>>,
    payload: &S::Text,
    placement: Placement,
    priority: i64,
    unique: Option<&Unique<'_>>,
    extras: &Extras,
) -> Result<Added, EmqError> {
    // In a partition, only a job whose group, or else id, routes to it (a minted id is minted
    // to route here).
    let lane = span::lane(store)?;
    let mint_lane = match (&lane, &extras.group, &job) {
        (Some(lane), Some(group), _) => lane.check(group).map(|_| None)?,
        (Some(lane), None, Some(job)) => lane.check(store.bytes(job.member)).map(|_| None)?,
        (lane, _, _) => lane.as_ref(),
    };
    if unique.is_some() {
        unique::check(store)?;
    }
    let new = New {
        payload,
        placement,
        priority,
        unique,
        extras,
    };
    let added = match job {
        Some(job) => enqueue_one(store, &job, &new)?,
        None => {
            let mut added = Added::Duplicate;
            until_free(store, mint_lane, |id, member| {
                let job = Job {
                    id,
                    member: &member,
                };
                added = match enqueue_one(store, &job, &new)? {
                    Added::New => Added::Minted(id),
                    other => other,
                };
                Ok(added != Added::Duplicate)
            })?;
            added
        }
    };
    match (added, placement) {
        (Added::Duplicate, _) => counters::count(&DUPLICATES, 1),
        (Added::Held(_), _) => counters::count(&counters::UNIQUE_HELD, 1),
        (_, Placement::Ready) => counters::count(&ENQUEUED, 1),
        (_, Placement::Due(_)) => counters::count(&SCHEDULED, 1),
    }
    Ok(added)
}

/// What a new job is: its payload, where it goes, its priority, its unique key and its
/// extras.
struct New<'n, S: Store> {
    payload: &'n S::Text,
    placement: Placement,
    priority: i64,
    unique: Option<&'n Unique<'n>>,
    extras: &'n Extras,
}

/// ACL -> row exists -> set type -> unique key held, then the row, then the set, each with its
/// event and effect, in the order the reference script's `HSET` and `ZADD` run, then the unique
/// key. `New`, `Duplicate` (the row exists) or `Held`.
fn enqueue_one<S: Store>(store: &S, job: &Job<'_, S>, new: &New<'_, S>) -> Result<Added, EmqError> {
    let flow = new.extras;
    let set = match flow.children {
        Some(_) => Set::Waiting,
        None => new.placement.set(),
    };
    let name = store.row_name(&job.id, job.member)?;
    let keys = [KeyRef::Row(&name), KeyRef::Set(set), KeyRef::Meta];
    // A timed or grouped job marks its queue's `meta`: that too is checked.
    let marks = flow.timeout.is_some() || flow.group.is_some();
    let checked = if marks { 3 } else { 2 };
    store.check_access(&keys[..checked])?;
    let row = store.open_row(&name)?;
    if store.holds(&row) != Holds::Nothing {
        return Ok(Added::Duplicate);
    }
    store.open_sets(&[set])?;
    if let Some(group) = &flow.group {
        ready::check(store, group)?;
    }
    // Read before any write: a `meta` key of another type refuses.
    let limits = match marks {
        true => Some(limit::limits(store)?),
        false => None,
    };
    if flow.group.is_some() && limits.is_some_and(|l| !l.grouped) {
        // The first grouped job counts the jobs active then as the default group's.
        store.check_access(&[KeyRef::Set(Set::Active)])?;
        store.open_sets(&[Set::Active])?;
    }
    let group = flow.group.as_deref().map(|g| store.text(g)).transpose()?;
    store.events()?;
    // The clock, read only for a unique key (the plain enqueue reads none).
    let now = match new.unique {
        Some(unique) => {
            let now = store.now_ms();
            if let Some(holder) = unique::holder(store, unique.key, now)? {
                return Ok(Added::Held(holder));
            }
            now
        }
        None => 0,
    };
    let (state, score, event) = match (flow.children, new.placement) {
        (Some(_), Placement::Ready) => (State::Waiting, 0, Event::Waiting),
        (Some(_), Placement::Due(at)) => (State::Waiting, at, Event::Waiting),
        (None, Placement::Ready) => (State::Pending, new.priority, Event::Enqueued),
        (None, Placement::Due(at)) => (State::Scheduled, at, Event::Scheduled),
    };
    // A parent's counters are written with it, so each child's registration and hand-over
    // finds them near the row's head rather than after its children's fields; a child's
    // `parents` after them.
    let counters = |n| {
        [
            (Field::Children, Value::Int(n)),
            (Field::Adopted, Value::Int(0)),
            (Field::Finished, Value::Int(0)),
        ]
    };
    let write = |more: &[(Field, Value<'_, S::Text>)]| {
        store.write_row(
            &row,
            state,
            new.payload,
            new.priority,
            new.unique.map(|u| u.key),
            more,
        )
    };
    // The extras on the stack, in the row's order: a parent's counters, a child's `parents`,
    // the job's `timeout`, `group` and `headers`.
    let mut more: [(Field, Value<'_, S::Text>); MORE_FIELDS] =
        [(Field::Children, Value::Int(0)); MORE_FIELDS];
    let mut n = 0;
    if let Some(children) = flow.children {
        more[..3].copy_from_slice(&counters(children));
        n = 3;
    }
    if let Some(parents) = &flow.parents {
        more[n] = (Field::Parents, Value::Bytes(parents));
        n += 1;
    }
    if let Some(timeout) = flow.timeout {
        more[n] = (Field::Timeout, Value::Int(timeout));
        n += 1;
    }
    if let Some(group) = &group {
        more[n] = (Field::Group, Value::Text(group));
        n += 1;
    }
    if let Some(headers) = &flow.headers {
        more[n] = (Field::Headers, Value::Bytes(headers));
        n += 1;
    }
    write(&more[..n])?;
    if let Some(limits) = &limits {
        if flow.timeout.is_some() {
            limit::mark_timed(store, limits)?;
        }
        if group.is_some() && !limits.grouped {
            quota::mark_grouped(store)?;
        }
    }
    match set {
        Set::Pending => ready::add(store, group.as_ref(), score, job.member)?,
        _ => store.add(set, score, job.member)?,
    }
    if let Some(unique) = new.unique {
        unique::take(store, unique, job.id, now)?;
    }
    record(store, event, Some(job.member), || 0)?;
    Ok(Added::New)
}

/// One job of a batch: the id the client gave (with its text), or `None` to mint one, its
/// payload, priority and `headers` field.
pub struct BatchJob<'j, S: Store> {
    pub job: Option<Job<'j, S>>,
    pub payload: &'j S::Text,
    pub priority: i64,
    pub headers: Option<&'j [u8]>,
}

/// Enqueues a batch to `pending`, all or nothing: every permission and type is checked before
/// the first write, and one refusal refuses the batch. One outcome per job, in order. The
/// effects replicate as one `HSET` per new row and one variadic `ZADD`.
pub fn enqueue_many<S: Store>(store: &S, jobs: &[BatchJob<'_, S>]) -> Result<Vec<Added>, EmqError> {
    // Each job's id and member: the client's, or minted (its text made here).
    let lane = span::lane(store)?;
    if let Some(lane) = &lane {
        let to_mint = jobs.iter().filter(|j| j.job.is_none()).count();
        if to_mint.saturating_mul(usize::from(lane.width)) > MINT_BUDGET {
            return Err(EmqError::Syntax(
                "too many ids to mint for a partition this wide in one batch; mint them on the client (as the clients do) or send fewer".into(),
            ));
        }
    }
    let mut minted = Vec::new();
    for job in jobs {
        match (&job.job, &lane) {
            (None, lane) => minted.push(fresh(store, lane.as_ref())?),
            (Some(job), Some(lane)) => lane.check(store.bytes(job.member))?,
            (Some(_), None) => {}
        }
    }
    let mut minted_at = 0;
    let mut names = Vec::with_capacity(jobs.len());
    for job in jobs {
        let name = match &job.job {
            Some(job) => store.row_name(&job.id, job.member)?,
            None => {
                let (id, member) = &minted[minted_at];
                minted_at += 1;
                store.row_name(id, member)?
            }
        };
        names.push(name);
    }
    let mut keys: Vec<KeyRef<'_, S::Name>> = names.iter().map(KeyRef::Row).collect();
    keys.push(KeyRef::Set(Set::Pending));
    store.check_access(&keys)?;
    drop(keys);

    // A minted id that collides with an existing row is minted again (the new row checked on
    // its own). Still nothing written.
    let mut minted_at = 0;
    for (job, name) in jobs.iter().zip(names.iter_mut()) {
        if job.job.is_some() {
            continue;
        }
        let (id, member) = &mut minted[minted_at];
        minted_at += 1;
        if store.probe(name)? == Holds::Nothing {
            continue;
        }
        until_free(store, lane.as_ref(), |new_id, new_member| {
            let new_name = store.row_name(&new_id, &new_member)?;
            store.check_access(&[KeyRef::Row(&new_name)])?;
            let free = store.probe(&new_name)? == Holds::Nothing;
            (*id, *member, *name) = (new_id, new_member, new_name);
            Ok(free)
        })?;
    }
    store.open_sets(&[Set::Pending])?;
    store.events()?;

    // Write. Each row is opened once: one that exists already, because it was there before or
    // an earlier job of this batch wrote it, is a duplicate and stays as it is.
    let mut members = Vec::with_capacity(jobs.len());
    let mut added = Vec::with_capacity(jobs.len());
    let mut minted_at = 0;
    for (job, name) in jobs.iter().zip(&names) {
        let (outcome, member) = match &job.job {
            Some(job) => (Added::New, job.member),
            None => {
                let (id, member) = &minted[minted_at];
                minted_at += 1;
                (Added::Minted(*id), member)
            }
        };
        let row = store.open_row(name)?;
        if store.holds(&row) != Holds::Nothing {
            added.push(Added::Duplicate);
            continue;
        }
        let headers = job.headers.map(|h| (Field::Headers, Value::Bytes(h)));
        store.write_row(
            &row,
            State::Pending,
            job.payload,
            job.priority,
            None,
            headers.as_slice(),
        )?;
        members.push((job.priority, member));
        added.push(outcome);
    }
    store.add_many(Set::Pending, &members)?;
    for (_, member) in &members {
        record(store, Event::Enqueued, Some(member), || 0)?;
    }
    counters::count(&ENQUEUED, members.len() as u64);
    counters::count(&DUPLICATES, (jobs.len() - members.len()) as u64);
    Ok(added)
}
