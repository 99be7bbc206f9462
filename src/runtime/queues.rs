//! The queues this node holds, per database: what `EMQ.QUEUES` lists and `INFO emq` counts
//! (`emq_known_queues`).
//!
//! A queue is held while it has one of its sets (`pending`, `active`, `schedule`, `dead`), its
//! `meta` hash or its `events` stream, of whatever type, or a job row with a time to live that
//! has not run out (a done row). A row without a time to live outside every set keeps no queue
//! listed: nothing tells cheaply when the last such row goes (rows are not counted, and a scan
//! is not cheap), and in EchoMQ's own lifecycle every row outside a set is a done row, which has
//! one (or is deleted at once, with `emq.done-ttl-ms 0`).
//!
//! Kept from what the module sees anyway, never by a scan per write:
//!
//! - **Keyspace events** (the zset, generic, expired and evicted classes `events` already
//!   takes): a write to a key of the queue makes it known; for a row, its expiry is read and
//!   the latest one kept. An event that takes a key away (`del`, `expired`, `evicted`,
//!   `rename_from`, `move_from`) probes the queue's sets, meta hash and events stream: when
//!   none is left the queue is dropped, or, while a row it had with a time to live may remain,
//!   kept until the latest such row runs out (then the cron drops it, after probing once more).
//! - **The command filter**, for the writes no subscribed event reports: `HSET`, `HSETNX`,
//!   `HMSET`, `HINCRBY`, `HINCRBYFLOAT`, `HSETEX`, `XADD` and `XGROUP CREATE` to a key of the
//!   grammar whose queue is not known, from a client, a script or the replication stream. The
//!   filter sees a command before it runs (and before it may be refused), so it only notes the
//!   key; the server's cron, and `EMQ.QUEUES` for its own database, look at the key after the
//!   command ran, for up to [`NOTED_FOR_MS`], and learn the queue if the key is there.
//! - **One scan** of every database at load and after the server loads data (`events::rebuild`,
//!   the same scan that rebuilds the timer's watched queues), which replaces the registry.
//! - `SWAPDB` swaps two databases' queues; `FLUSHDB`, `FLUSHALL` and a replica's full sync
//!   empty them.
//!
//! The cursor of `EMQ.QUEUES` is the last name a page returned, so paging is stable: a page is
//! a range read of an ordered map, after that name. See docs/commands.md#emqqueues.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use valkey_module::Context;

use crate::host::client::{select_db, selected_db};
use crate::host::events::FilterArgs;
use crate::host::key::{announced_expiry, expires_at, Key};
use crate::host::server::now_ms;
use crate::host::string::{OwnedString, Str};
use crate::protocol::keyspace::{RowPrefix, PREFIX};
use crate::protocol::{decode, Decoded, EmqError, Holds, KeyBuf, KeyType, Queue};

// ---- the registry -------------------------------------------------------------------------

/// What is known of one queue beyond its name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry {
    /// The latest expiry (unix ms) of a row of the queue seen with a time to live (0: none).
    rows_until: i64,
    /// Whether the queue's sets, meta hash and events stream were last found gone: it is held
    /// for its rows, until `rows_until`.
    lingering: bool,
}

impl Entry {
    fn held(&self, now: i64) -> bool {
        !self.lingering || self.rows_until > now
    }
}

/// The known queues of every database, each database's in name order.
#[derive(Default)]
pub struct Registry {
    dbs: BTreeMap<i32, BTreeMap<Vec<u8>, Entry>>,
    /// The lingering queues, by when their last known row runs out.
    lingering: BTreeSet<(i64, i32, Vec<u8>)>,
    /// The queue last found present (an enqueue's `zadd` after another's, the hot case), until
    /// a queue is dropped or starts lingering.
    last_present: Option<(i32, Vec<u8>)>,
}

/// Where the next page starts, as a page ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume {
    /// Nothing is left after this page.
    End,
    /// After the last name the page returned.
    After(Vec<u8>),
    /// After a name the page read but did not return (one the caller may not see).
    Past(Vec<u8>),
}

/// One page of names.
#[derive(Debug, PartialEq, Eq)]
pub struct Page {
    pub names: Vec<Vec<u8>>,
    pub resume: Resume,
}

impl Registry {
    pub const fn new() -> Registry {
        Registry {
            dbs: BTreeMap::new(),
            lingering: BTreeSet::new(),
            last_present: None,
        }
    }

    /// The queue has a set, its meta hash or its events stream.
    /// Whether `name` of `db` is the queue last found present (and so still is).
    pub fn last_present(&self, db: i32, name: &[u8]) -> bool {
        self.last_present
            .as_ref()
            .is_some_and(|(d, n)| *d == db && n == name)
    }

    pub fn present(&mut self, db: i32, name: &[u8]) {
        if self.last_present(db, name) {
            return;
        }
        let queues = self.dbs.entry(db).or_default();
        match queues.get_mut(name) {
            Some(entry) => {
                if entry.lingering {
                    self.lingering
                        .remove(&(entry.rows_until, db, name.to_vec()));
                    entry.lingering = false;
                }
            }
            None => {
                queues.insert(name.to_vec(), Entry::default());
            }
        }
        self.last_present = Some((db, name.to_vec()));
    }

    /// A row of the queue runs out at `at`. A queue not known yet is held for it alone (the
    /// caller found nothing else of it).
    pub fn row_until(&mut self, db: i32, name: &[u8], at: i64) {
        let queues = self.dbs.entry(db).or_default();
        match queues.get_mut(name) {
            Some(entry) if at > entry.rows_until => {
                if entry.lingering {
                    self.lingering
                        .remove(&(entry.rows_until, db, name.to_vec()));
                    self.lingering.insert((at, db, name.to_vec()));
                }
                entry.rows_until = at;
            }
            Some(_) => {}
            None => {
                queues.insert(
                    name.to_vec(),
                    Entry {
                        rows_until: at,
                        lingering: true,
                    },
                );
                self.lingering.insert((at, db, name.to_vec()));
            }
        }
    }

    /// The queue's sets, meta hash and events stream are gone (as of `now`): it is dropped, or
    /// held until its last known row runs out. Whether it was dropped.
    pub fn gone(&mut self, db: i32, name: &[u8], now: i64) -> bool {
        self.last_present = None;
        let Some(entry) = self.dbs.get_mut(&db).and_then(|q| q.get_mut(name)) else {
            return false;
        };
        if entry.rows_until > now {
            if !entry.lingering {
                entry.lingering = true;
                self.lingering.insert((entry.rows_until, db, name.to_vec()));
            }
            return false;
        }
        self.forget(db, name);
        true
    }

    pub fn forget(&mut self, db: i32, name: &[u8]) {
        self.last_present = None;
        let Some(queues) = self.dbs.get_mut(&db) else {
            return;
        };
        if let Some(entry) = queues.remove(name) {
            if entry.lingering {
                self.lingering
                    .remove(&(entry.rows_until, db, name.to_vec()));
            }
        }
        if queues.is_empty() {
            self.dbs.remove(&db);
        }
    }

    pub fn contains(&self, db: i32, name: &[u8]) -> bool {
        self.dbs.get(&db).is_some_and(|q| q.contains_key(name))
    }

    /// Known, with a set, its meta hash or its events stream (not held for its rows alone).
    pub fn settled(&self, db: i32, name: &[u8]) -> bool {
        self.dbs
            .get(&db)
            .and_then(|q| q.get(name))
            .is_some_and(|e| !e.lingering)
    }

    /// [`Registry::settled`] in some database.
    pub fn settled_anywhere(&self, name: &[u8]) -> bool {
        self.dbs
            .values()
            .any(|q| q.get(name).is_some_and(|e| !e.lingering))
    }

    /// Up to `max` lingering queues whose last known row has run out by `now`.
    pub fn run_out(&self, now: i64, max: usize) -> Vec<(i32, Vec<u8>)> {
        self.lingering
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .take(max)
            .map(|(_, db, name)| (*db, name.clone()))
            .collect()
    }

    /// How many queues are held at `now`, in every database.
    pub fn len(&self, now: i64) -> usize {
        let known: usize = self.dbs.values().map(BTreeMap::len).sum();
        let run_out = self
            .lingering
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .count();
        known - run_out.min(known)
    }

    pub fn is_empty(&self) -> bool {
        self.dbs.is_empty()
    }

    /// Up to `count` names of `db` held at `now` that `visible` lets through, in name order,
    /// after `after` (from the first without it), reading at most `max_read` names.
    pub fn page(
        &self,
        db: i32,
        after: Option<&[u8]>,
        now: i64,
        count: usize,
        max_read: usize,
        mut visible: impl FnMut(&[u8]) -> bool,
    ) -> Page {
        let mut names = Vec::new();
        let Some(queues) = self.dbs.get(&db) else {
            return Page {
                names,
                resume: Resume::End,
            };
        };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut last: Option<(&[u8], bool)> = None;
        let mut more = false;
        let range = queues.range::<[u8], _>((start, Bound::Unbounded));
        for (read, (name, entry)) in range.enumerate() {
            if names.len() >= count || read >= max_read {
                more = true;
                break;
            }
            let shown = entry.held(now) && visible(name);
            if shown {
                names.push(name.clone());
            }
            last = Some((name, shown));
        }
        let resume = match last {
            Some((name, true)) if more => Resume::After(name.to_vec()),
            Some((name, false)) if more => Resume::Past(name.to_vec()),
            _ => Resume::End,
        };
        Page { names, resume }
    }

    /// `SWAPDB a b`: each database's queues are now the other's.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        let swapped = |d: i32| match d {
            d if d == a => b,
            d if d == b => a,
            d => d,
        };
        self.last_present = None;
        let (qa, qb) = (self.dbs.remove(&a), self.dbs.remove(&b));
        for (db, queues) in [(b, qa), (a, qb)] {
            if let Some(queues) = queues {
                self.dbs.insert(db, queues);
            }
        }
        self.lingering = std::mem::take(&mut self.lingering)
            .into_iter()
            .map(|(at, db, name)| (at, swapped(db), name))
            .collect();
    }

    /// Forgets every queue of `db` (every queue for -1): the database was emptied.
    pub fn forget_db(&mut self, db: i32) {
        if db == -1 {
            self.clear();
            return;
        }
        self.last_present = None;
        self.dbs.remove(&db);
        self.lingering.retain(|(_, d, _)| *d != db);
    }

    pub fn clear(&mut self) {
        self.dbs.clear();
        self.lingering.clear();
        self.last_present = None;
    }
}

// ---- keys noted by the command filter -----------------------------------------------------

/// How long a key the command filter noted is looked for: its command may wait, queued in a
/// transaction or postponed while writes are paused, before it runs.
pub const NOTED_FOR_MS: i64 = 10_000;
/// Most keys noted at once; more are not noted until some are settled.
const MAX_NOTED: usize = 4096;

/// Keys of the grammar that a command was about to write, with the database it runs in
/// (`None`: not known, a script's), each with when it was noted.
#[derive(Default)]
pub struct Noted {
    keys: BTreeMap<(Option<i32>, Vec<u8>), i64>,
}

impl Noted {
    pub const fn new() -> Noted {
        Noted {
            keys: BTreeMap::new(),
        }
    }

    /// Notes `key` of `db` at `now`; whether there was room.
    pub fn note(&mut self, db: Option<i32>, key: &[u8], now: i64) -> bool {
        let entry = (db, key.to_vec());
        if self.keys.contains_key(&entry) {
            return true;
        }
        if self.keys.len() >= MAX_NOTED {
            return false;
        }
        self.keys.insert(entry, now);
        true
    }

    /// The keys noted, with their database.
    pub fn keys(&self) -> Vec<(Option<i32>, Vec<u8>)> {
        self.keys.keys().cloned().collect()
    }

    /// Stops looking for `key` of `db`.
    pub fn settle(&mut self, db: Option<i32>, key: &[u8]) {
        self.keys.remove(&(db, key.to_vec()));
    }

    /// Stops looking for the keys noted [`NOTED_FOR_MS`] or longer before `now`.
    pub fn expire(&mut self, now: i64) {
        self.keys.retain(|_, at| now - *at < NOTED_FOR_MS);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
    }
}

// ---- cursors ------------------------------------------------------------------------------

/// A cursor of `EMQ.QUEUES`, as a client gives it.
#[derive(Debug, PartialEq, Eq)]
pub enum Cursor<'a> {
    /// `0`: from the first name.
    Start,
    /// A queue name: after it (`{0}` for the queue named `0`).
    After(&'a [u8]),
    /// `{<n>}`: a place this node keeps, after a name the page did not return.
    Kept(u64),
}

impl<'a> Cursor<'a> {
    /// `0`, a queue name (protocol.md §1.1), or a number in braces; anything else is `EMQCURSOR`.
    pub fn parse(bytes: &'a [u8]) -> Result<Cursor<'a>, EmqError> {
        if bytes == b"0" {
            return Ok(Cursor::Start);
        }
        if let Some(digits) = bytes.strip_prefix(b"{").and_then(|b| b.strip_suffix(b"}")) {
            let n = std::str::from_utf8(digits)
                .ok()
                .filter(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or(EmqError::Cursor)?;
            return Ok(match n {
                0 => Cursor::After(b"0"),
                n => Cursor::Kept(n),
            });
        }
        Queue::parse(bytes)
            .map(|q| Cursor::After(q.as_bytes()))
            .ok_or(EmqError::Cursor)
    }
}

/// How many kept places a node holds; an older one is refused (`EMQCURSOR`).
const MAX_KEPT: usize = 1024;

/// The places kept for cursors `{<n>}`: pages that ended after a name they did not return,
/// which the cursor must not name.
#[derive(Default)]
pub struct Kept {
    next: u64,
    after: BTreeMap<u64, Vec<u8>>,
}

impl Kept {
    pub const fn new() -> Kept {
        Kept {
            next: 0,
            after: BTreeMap::new(),
        }
    }

    /// Numbers start from `base`, so that a cursor kept by an earlier run of the server (or
    /// by another node) names no place kept here.
    pub fn start_at(&mut self, base: u64) {
        self.after.clear();
        self.next = base.max(1);
    }

    /// Keeps the place after `name`; its number.
    pub fn keep(&mut self, name: Vec<u8>) -> u64 {
        let n = self.next.max(1);
        self.next = n.saturating_add(1);
        self.after.insert(n, name);
        while self.after.len() > MAX_KEPT {
            self.after.pop_first();
        }
        n
    }

    pub fn get(&self, n: u64) -> Option<&[u8]> {
        self.after.get(&n).map(Vec::as_slice)
    }

    pub fn clear(&mut self) {
        self.after.clear();
    }
}

/// The reply's cursor for where the next page starts (minting a kept place if need be).
fn render(resume: Resume, kept: &mut Kept) -> Vec<u8> {
    match resume {
        Resume::End => b"0".to_vec(),
        // The queue named `0` would read as the start.
        Resume::After(name) if name == b"0" => b"{0}".to_vec(),
        Resume::After(name) => name,
        Resume::Past(name) => format!("{{{}}}", kept.keep(name)).into_bytes(),
    }
}

// ---- the node's registry, kept from events ------------------------------------------------

static REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());
static NOTED: Mutex<Noted> = Mutex::new(Noted::new());
static KEPT: Mutex<Kept> = Mutex::new(Kept::new());

/// Most names one `EMQ.QUEUES` call reads, shown or not (a user who may read few queues among
/// many gets short pages rather than a long call).
pub const MAX_READ: usize = 10_000;
/// Most lingering queues the cron looks at again at once.
const RUN_OUT_PER_CRON: usize = 1000;

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

fn noted() -> MutexGuard<'static, Noted> {
    NOTED.lock().unwrap_or_else(|p| p.into_inner())
}

fn kept() -> MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the kept cursors' numbers from the load time (module load).
pub fn start() {
    kept().start_at(now_ms().saturating_mul(1_000_000));
}

/// Forgets everything (module unload): the module's memory must be gone.
pub fn stop() {
    registry().clear();
    noted().clear();
    kept().clear();
}

/// Number of queues this node holds, in every database (for `INFO emq`).
pub fn known_queues() -> usize {
    registry().len(now_ms() as i64)
}

/// A command of EchoMQ wrote a key of `queue` that no subscribed event reports (its meta hash,
/// its events stream), in the context's database.
pub fn learn(ctx: &Context, queue: Queue<'_>) {
    registry().present(selected_db(ctx), queue.as_bytes());
}

/// What a `pending` set's name holds between the grammar's prefix and its suffix (a queue
/// name if it is one).
fn pending_inner(name: &[u8]) -> Option<&[u8]> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(KeyType::Pending.key_suffix())
}

/// The queue of a `pending` set's name, read without the rest of the grammar.
fn pending_queue(name: &[u8]) -> Option<Queue<'_>> {
    Queue::parse(pending_inner(name)?)
}

/// A keyspace event on a `pending` set (the hot case, every enqueue and claim); `gone` when
/// the event took the key away.
pub fn on_pending_event(ctx: &Context, name: &[u8], gone: bool) {
    let db = selected_db(ctx);
    if gone {
        if let Some(queue) = pending_queue(name) {
            check_left(ctx, db, queue);
        }
        return;
    }
    let Some(inner) = pending_inner(name) else {
        return;
    };
    let mut registry = registry();
    // The same queue as the last enqueue's: known, and its name already checked.
    if !registry.last_present(db, inner) && Queue::parse(inner).is_some() {
        registry.present(db, inner);
    }
}

/// A keyspace event on another key of `queue` (of type `ty`, named `key`); `gone` when the
/// event took the key away.
pub fn on_key_event(ctx: &Context, queue: Queue<'_>, ty: KeyType, key: Str<'_>, gone: bool) {
    let db = selected_db(ctx);
    if gone {
        check_left(ctx, db, queue);
    } else if ty == KeyType::Job {
        learn_row(ctx, db, queue, key);
    } else {
        registry().present(db, queue.as_bytes());
    }
}

/// A key of a known queue went: what is left of it decides whether it stays.
fn check_left(ctx: &Context, db: i32, queue: Queue<'_>) {
    let known = registry().contains(db, queue.as_bytes());
    if !known {
        return;
    }
    if has_own_keys(ctx, queue) {
        registry().present(db, queue.as_bytes());
    } else {
        registry().gone(db, queue.as_bytes(), now_ms() as i64);
    }
}

/// A job row of `queue` exists: its expiry, if it has one, holds the queue until then.
fn learn_row(ctx: &Context, db: i32, queue: Queue<'_>, row: Str<'_>) {
    rows_until(ctx, db, queue, expires_at(ctx, row));
}

/// Rows of `queue` exist, the latest of them expiring at `until` (`None`: one never does).
fn rows_until(ctx: &Context, db: i32, queue: Queue<'_>, until: Option<i64>) {
    // No lock is held while keys are probed: a probe may delete an expired key, whose event
    // comes back here.
    let settled = registry().settled(db, queue.as_bytes());
    if !settled && has_own_keys(ctx, queue) {
        registry().present(db, queue.as_bytes());
    }
    if let Some(at) = until {
        registry().row_until(db, queue.as_bytes(), at);
    }
}

/// The rows an EchoMQ command is acknowledging (one queue's, in one database), and the latest
/// expiry it gave them so far.
struct Acking {
    db: i32,
    rows: RowPrefix,
    until: Option<i64>,
}

static ACKING: Mutex<Option<Acking>> = Mutex::new(None);

/// While alive, the `expire` events EchoMQ announces for the rows of one queue it acknowledges
/// are noted, not learned one by one (each would decode its key and look the queue up); the
/// registry learns the latest of them once, when this is dropped at the command's end.
pub struct Acknowledging<'c, 'q> {
    ctx: &'c Context,
    queue: Queue<'q>,
}

/// Starts noting the done rows of `queue` (in the context's database) for the registry.
pub fn acknowledging<'c, 'q>(ctx: &'c Context, queue: Queue<'q>) -> Acknowledging<'c, 'q> {
    *ACKING.lock().unwrap_or_else(|p| p.into_inner()) = Some(Acking {
        db: selected_db(ctx),
        rows: RowPrefix::new(queue),
        until: None,
    });
    Acknowledging { ctx, queue }
}

impl Drop for Acknowledging<'_, '_> {
    fn drop(&mut self) {
        let Some(acking) = ACKING.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        if let Some(until) = acking.until {
            rows_until(self.ctx, acking.db, self.queue, Some(until));
        }
    }
}

/// Whether `key`, whose `expire` event runs, is a row of the queue being acknowledged whose
/// expiry EchoMQ is announcing: then its expiry is noted for [`Acknowledging`] and the event
/// needs nothing more.
pub fn acked_row_expiry(ctx: &Context, key: Str<'_>) -> bool {
    let mut acking = ACKING.lock().unwrap_or_else(|p| p.into_inner());
    let Some(acking) = acking.as_mut() else {
        return false;
    };
    if !key.bytes().starts_with(acking.rows.as_bytes()) || selected_db(ctx) != acking.db {
        return false;
    }
    let Some(at) = announced_expiry(key) else {
        return false;
    };
    acking.until = Some(acking.until.map_or(at, |until| until.max(at)));
    true
}

/// Whether the queue has a set, its meta hash or its events stream, of any type, in the
/// context's database (when unsure, that it has).
fn has_own_keys(ctx: &Context, queue: Queue<'_>) -> bool {
    KeyType::ALL
        .iter()
        .filter(|&&ty| ty != KeyType::Job)
        .any(|&ty| exists(ctx, KeyBuf::queue(queue, ty).as_bytes()))
}

/// Whether `name` exists in the context's database (when unsure, that it does).
fn exists(ctx: &Context, name: &[u8]) -> bool {
    let Ok(name) = OwnedString::new(ctx, name) else {
        return true;
    };
    Key::probe(ctx, &name).map_or(true, |k| k.holds() != Holds::Nothing)
}

/// The command filter's part: notes the key of a hash or stream write to a queue not known in
/// the client's database, to look for once the command ran.
pub fn observe_command(args: &FilterArgs, first: &[u8]) {
    // Most commands are none of these: their length and first letter say so.
    let candidate = first.first().is_some_and(|c| {
        matches!(
            (first.len(), c.to_ascii_uppercase()),
            (4 | 5 | 6 | 7 | 12, b'H') | (4 | 6, b'X')
        )
    });
    if !candidate {
        return;
    }
    let is = |name: &[u8]| first.eq_ignore_ascii_case(name);
    let key_at = if is(b"HSET")
        || is(b"HSETNX")
        || is(b"HMSET")
        || is(b"HINCRBY")
        || is(b"HINCRBYFLOAT")
        || is(b"HSETEX")
        || is(b"XADD")
    {
        1
    } else if is(b"XGROUP")
        && args
            .arg(1)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"CREATE"))
    {
        2
    } else {
        return;
    };
    if let Some(key) = args.arg(key_at) {
        note_written(args, key);
    }
}

/// Notes `key`, which the filtered command is about to write, if it is a key of a queue not
/// known in the client's database: to look for once the command ran.
pub fn note_written(args: &FilterArgs, key: &[u8]) {
    if !key.starts_with(PREFIX) {
        return;
    }
    let Some(Decoded::Queue { queue, .. }) = decode(key) else {
        return;
    };
    let db = args.client().map(|c| c.db);
    let settled = {
        let registry = registry();
        match db {
            Some(db) => registry.settled(db, queue.as_bytes()),
            None => registry.settled_anywhere(queue.as_bytes()),
        }
    };
    if !settled {
        noted().note(db, key, now_ms() as i64);
    }
}

/// Looks for the keys the filter noted, in the context's database only (`EMQ.QUEUES`, which
/// must not select another): a key of unknown database found here is looked for elsewhere too
/// by the cron.
fn look_for_noted_here(ctx: &Context, db: i32) {
    let keys = noted().keys();
    for (noted_db, key) in keys {
        if noted_db.is_some_and(|d| d != db) {
            continue;
        }
        if look_for(ctx, &key) && noted_db.is_some() {
            noted().settle(noted_db, &key);
        }
    }
}

/// Looks for `key` in the context's database; whether it is there (and so learned).
fn look_for(ctx: &Context, key: &[u8]) -> bool {
    let Some(Decoded::Queue { queue, ty, .. }) = decode(key) else {
        return false;
    };
    let Ok(name) = OwnedString::new(ctx, key) else {
        return false;
    };
    let there = Key::probe(ctx, &name).is_ok_and(|k| k.holds() != Holds::Nothing);
    if there {
        on_key_event(ctx, queue, ty, name.as_str(), false);
    }
    there
}

/// The server's cron: looks for the noted keys, in every database for those of unknown
/// database, and looks again at the lingering queues whose last known row ran out; whether
/// more of those remain for the next call.
pub fn on_cron(ctx: &Context, now: i64) -> bool {
    let has_noted = !noted().is_empty();
    let run_out = registry().run_out(now, RUN_OUT_PER_CRON);
    let more = run_out.len() == RUN_OUT_PER_CRON;
    if !has_noted && run_out.is_empty() {
        return false;
    }
    let original = selected_db(ctx);
    if has_noted {
        let keys = noted().keys();
        for (noted_db, key) in keys {
            let found = match noted_db {
                Some(db) => select_db(ctx, db) && look_for(ctx, &key),
                None => {
                    let mut found = false;
                    let mut db = 0;
                    while select_db(ctx, db) {
                        found |= look_for(ctx, &key);
                        db += 1;
                    }
                    found
                }
            };
            if found {
                noted().settle(noted_db, &key);
            }
        }
        noted().expire(now);
    }
    for (db, name) in run_out {
        let Some(queue) = Queue::parse(&name) else {
            registry().forget(db, &name);
            continue;
        };
        if !select_db(ctx, db) {
            registry().forget(db, &name);
        } else if has_own_keys(ctx, queue) {
            registry().present(db, &name);
        } else {
            registry().gone(db, &name, now);
        }
    }
    select_db(ctx, original);
    more
}

/// `SWAPDB a b`.
pub fn swap_dbs(a: i32, b: i32) {
    registry().swap_dbs(a, b);
}

/// A database was emptied (-1: all of them).
pub fn forget_db(db: i32) {
    registry().forget_db(db);
}

/// The registry a scan of the keyspace builds, to replace the node's (`events::rebuild`).
pub struct Rebuild {
    registry: Registry,
    now: i64,
}

impl Rebuild {
    pub fn new() -> Rebuild {
        Rebuild {
            registry: Registry::new(),
            now: now_ms() as i64,
        }
    }

    /// A key of `queue`, of type `ty`, in `db`, expiring at `expires` (a key whose time ran
    /// out but that the server has not deleted yet counts for nothing).
    pub fn key(&mut self, db: i32, queue: Queue<'_>, ty: KeyType, expires: Option<i64>) {
        match (ty, expires) {
            (_, Some(at)) if at <= self.now => {}
            (KeyType::Job, Some(at)) => self.registry.row_until(db, queue.as_bytes(), at),
            (KeyType::Job, None) => {}
            _ => self.registry.present(db, queue.as_bytes()),
        }
    }

    /// The scan is over: its registry is the node's.
    pub fn finish(self) {
        *registry() = self.registry;
    }
}

impl Default for Rebuild {
    fn default() -> Self {
        Rebuild::new()
    }
}

/// One page of `EMQ.QUEUES` in the context's database: the reply's cursor and the names.
/// `may_read` tells whether the caller may read a key, by name: a queue is shown only if the
/// caller may read its `pending` set.
pub fn list(
    ctx: &Context,
    cursor: Cursor<'_>,
    count: usize,
    may_read: &dyn Fn(&[u8]) -> bool,
) -> Result<(Vec<u8>, Vec<Vec<u8>>), EmqError> {
    let db = selected_db(ctx);
    let after = match cursor {
        Cursor::Start => None,
        Cursor::After(name) => Some(name.to_vec()),
        Cursor::Kept(n) => Some(kept().get(n).ok_or(EmqError::Cursor)?.to_vec()),
    };
    if !noted().is_empty() {
        look_for_noted_here(ctx, db);
    }
    let page = registry().page(
        db,
        after.as_deref(),
        now_ms() as i64,
        count,
        MAX_READ,
        |name| {
            Queue::parse(name)
                .is_some_and(|q| may_read(KeyBuf::queue(q, KeyType::Pending).as_bytes()))
        },
    );
    let cursor = render(page.resume, &mut kept());
    Ok((cursor, page.names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(page: &Page) -> Vec<String> {
        page.names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    }

    fn all(_: &[u8]) -> bool {
        true
    }

    #[test]
    fn a_page_is_a_range_after_the_cursor() {
        let mut r = Registry::new();
        for q in ["c", "a", "b", "d"] {
            r.present(0, q.as_bytes());
        }
        r.present(0, b"a");
        assert_eq!(r.len(0), 4, "each queue once");
        let first = r.page(0, None, 0, 2, MAX_READ, all);
        assert_eq!(names(&first), ["a", "b"]);
        assert_eq!(first.resume, Resume::After(b"b".to_vec()));
        let second = r.page(0, Some(b"b"), 0, 2, MAX_READ, all);
        assert_eq!(names(&second), ["c", "d"]);
        assert_eq!(second.resume, Resume::End, "nothing after d");
        let empty = r.page(1, None, 0, 2, MAX_READ, all);
        assert_eq!(empty.names.len(), 0);
        assert_eq!(empty.resume, Resume::End);
    }

    #[test]
    fn names_added_or_removed_between_pages_move_no_other() {
        let mut r = Registry::new();
        for q in ["a", "c", "e", "g"] {
            r.present(0, q.as_bytes());
        }
        let first = r.page(0, None, 0, 2, MAX_READ, all);
        assert_eq!(names(&first), ["a", "c"]);
        r.present(0, b"b"); // before the cursor: not shown, nothing repeated
        r.forget(0, b"c"); // the cursor itself goes
        r.present(0, b"d");
        let second = r.page(0, Some(b"c"), 0, 10, MAX_READ, all);
        assert_eq!(names(&second), ["d", "e", "g"]);
    }

    #[test]
    fn hidden_names_are_read_but_not_shown_and_the_cursor_does_not_name_them() {
        let mut r = Registry::new();
        for q in ["a", "b", "c", "d", "e"] {
            r.present(0, q.as_bytes());
        }
        let only_a_and_e = |n: &[u8]| n == b"a" || n == b"e";
        let page = r.page(0, None, 0, 1, MAX_READ, only_a_and_e);
        assert_eq!(names(&page), ["a"]);
        assert_eq!(page.resume, Resume::After(b"a".to_vec()));
        let page = r.page(0, Some(b"a"), 0, 10, 2, only_a_and_e);
        assert!(page.names.is_empty(), "b and c read, neither shown");
        assert_eq!(page.resume, Resume::Past(b"c".to_vec()));
        let page = r.page(0, Some(b"c"), 0, 10, 2, only_a_and_e);
        assert_eq!(names(&page), ["e"]);
        assert_eq!(page.resume, Resume::End);
    }

    #[test]
    fn a_queue_whose_keys_are_gone_is_dropped_unless_rows_with_a_time_to_live_remain() {
        let mut r = Registry::new();
        r.present(0, b"plain");
        assert!(r.gone(0, b"plain", 100));
        assert!(!r.contains(0, b"plain"));

        r.present(0, b"done");
        r.row_until(0, b"done", 500);
        r.row_until(0, b"done", 300); // an earlier row changes nothing
        assert!(!r.gone(0, b"done", 100), "rows until 500");
        assert!(r.contains(0, b"done") && !r.settled(0, b"done"));
        assert_eq!(r.run_out(499, 10), vec![]);
        assert_eq!(r.run_out(500, 10), vec![(0, b"done".to_vec())]);
        assert_eq!(r.len(499), 1);
        assert_eq!(r.len(500), 0, "not counted once its rows ran out");
        assert!(r.page(0, None, 500, 10, MAX_READ, all).names.is_empty());
        r.row_until(0, b"done", 900); // a later row: held longer
        assert_eq!(r.run_out(500, 10), vec![]);
        r.present(0, b"done"); // a set again
        assert!(r.settled(0, b"done"));
        assert_eq!(r.run_out(i64::MAX, 10), vec![]);
        assert!(r.gone(0, b"done", 900), "its rows ran out at 900");
        assert!(r.is_empty());
    }

    #[test]
    fn the_queue_last_found_present_is_found_again_after_it_went() {
        let mut r = Registry::new();
        r.present(0, b"hot");
        r.present(0, b"hot");
        assert!(r.gone(0, b"hot", 0));
        r.present(0, b"hot");
        assert!(r.contains(0, b"hot"), "known again after it went");
        r.row_until(0, b"hot", 10);
        assert!(!r.gone(0, b"hot", 0));
        r.present(0, b"hot");
        assert!(r.settled(0, b"hot"), "lingering no more");
        r.forget_db(0);
        r.present(0, b"hot");
        assert!(r.contains(0, b"hot"));
        r.swap_dbs(0, 1);
        r.present(0, b"hot");
        assert!(r.contains(0, b"hot") && r.contains(1, b"hot"));
        r.clear();
        r.present(1, b"hot");
        assert!(r.contains(1, b"hot"));
    }

    #[test]
    fn a_row_alone_holds_its_queue_until_it_runs_out() {
        let mut r = Registry::new();
        r.row_until(2, b"rows", 50);
        assert!(r.contains(2, b"rows") && !r.settled(2, b"rows"));
        assert_eq!(names(&r.page(2, None, 49, 10, MAX_READ, all)), ["rows"]);
        assert_eq!(r.run_out(50, 10), vec![(2, b"rows".to_vec())]);
        assert!(r.gone(2, b"rows", 50));
        assert!(r.is_empty());
    }

    #[test]
    fn swapping_and_flushing_databases_move_and_drop_their_queues() {
        let mut r = Registry::new();
        r.present(0, b"zero");
        r.present(1, b"one");
        r.row_until(1, b"lingers", 10);
        r.present(2, b"two");
        r.swap_dbs(0, 1);
        assert!(r.contains(1, b"zero") && r.contains(0, b"one"));
        assert_eq!(r.run_out(10, 10), vec![(0, b"lingers".to_vec())]);
        r.swap_dbs(0, 3); // with an empty database
        assert!(r.contains(3, b"one") && !r.contains(0, b"one"));
        assert_eq!(r.run_out(10, 10), vec![(3, b"lingers".to_vec())]);
        r.forget_db(3);
        assert_eq!(r.run_out(10, 10), vec![]);
        assert_eq!(r.len(0), 2);
        r.forget_db(-1);
        assert!(r.is_empty());
    }

    #[test]
    fn settled_means_known_with_keys_of_its_own() {
        let mut r = Registry::new();
        r.row_until(0, b"q", 10);
        assert!(!r.settled(0, b"q") && !r.settled_anywhere(b"q"));
        r.present(4, b"q");
        assert!(r.settled_anywhere(b"q") && !r.settled(0, b"q"));
    }

    #[test]
    fn cursors_are_zero_a_queue_name_or_a_kept_number() {
        assert_eq!(Cursor::parse(b"0"), Ok(Cursor::Start));
        assert_eq!(Cursor::parse(b"orders"), Ok(Cursor::After(b"orders")));
        assert_eq!(Cursor::parse(b"{0}"), Ok(Cursor::After(b"0")));
        assert_eq!(Cursor::parse(b"{42}"), Ok(Cursor::Kept(42)));
        for bad in [
            &b""[..],
            b"{}",
            b"{-1}",
            b"{4x}",
            b"{99999999999999999999}",
            b"a b",
            b"a}b",
            &[b'q'; 129],
        ] {
            assert_eq!(Cursor::parse(bad), Err(EmqError::Cursor), "{bad:?}");
        }
    }

    #[test]
    fn a_reply_cursor_names_the_last_name_shown_or_a_kept_place() {
        let mut kept = Kept::new();
        kept.start_at(1000);
        assert_eq!(render(Resume::End, &mut kept), b"0");
        assert_eq!(render(Resume::After(b"q".to_vec()), &mut kept), b"q");
        assert_eq!(render(Resume::After(b"0".to_vec()), &mut kept), b"{0}");
        assert_eq!(render(Resume::Past(b"hid".to_vec()), &mut kept), b"{1000}");
        assert_eq!(kept.get(1000), Some(&b"hid"[..]));
        for i in 0..MAX_KEPT {
            kept.keep(format!("q{i}").into_bytes());
        }
        assert_eq!(kept.get(1000), None, "the oldest place goes first");
        assert!(kept.get(1000 + MAX_KEPT as u64).is_some());
        kept.start_at(5000);
        assert_eq!(
            kept.get(1000 + MAX_KEPT as u64),
            None,
            "a new run keeps none"
        );
    }

    #[test]
    fn noted_keys_are_bounded_and_looked_for_a_while() {
        let mut n = Noted::new();
        assert!(n.note(Some(0), b"emq:{a}:meta", 0));
        assert!(n.note(Some(0), b"emq:{a}:meta", 5), "once");
        assert!(n.note(None, b"emq:{a}:meta", 5));
        assert_eq!(n.len(), 2);
        n.settle(None, b"emq:{a}:meta");
        assert_eq!(n.keys(), vec![(Some(0), b"emq:{a}:meta".to_vec())]);
        n.expire(NOTED_FOR_MS - 1);
        assert_eq!(n.len(), 1);
        n.expire(NOTED_FOR_MS);
        assert!(n.is_empty());
        for i in 0..MAX_NOTED {
            assert!(n.note(Some(0), format!("k{i}").as_bytes(), 0));
        }
        assert!(!n.note(Some(0), b"one too many", 0));
    }

    #[test]
    fn the_pending_fast_path_reads_only_grammar_names() {
        assert_eq!(
            pending_queue(b"emq:{orders}:pending").map(|q| q.as_bytes()),
            Some(&b"orders"[..])
        );
        assert_eq!(pending_queue(b"emq:{a}b}:pending"), None);
        assert_eq!(pending_queue(b"emq:{}:pending"), None);
        assert_eq!(pending_queue(b"emq:{orders}:active"), None);
    }
}
