//! The host's [`Store`]: one queue's keys in the server. Every write fires the keyspace event
//! its native command would and replicates its effect (through the effects gate); names of the
//! queue's sets come from the name cache, so the hot paths create no string for them. The
//! trait's one `impl` is here; what it does for hashes by field name ([`hash`]), the `meta`
//! hash ([`meta`]), the event stream ([`stream`]) and the hand-overs a call keeps
//! ([`handover`]) is each in a file of its own.

mod groups;
mod handover;
mod hash;
mod meta;
mod metered;
mod names;
mod stream;

pub use handover::{set_hand_over, HandOver};
pub use names::QueueNames;

use std::cell::{Cell, OnceCell, RefCell};
use std::marker::PhantomData;

use valkey_module::Context;

use crate::protocol::flow::Delivery;
use crate::protocol::{
    BrandedId, EmqError, Field, Holds, KeyRef, Meta, Queue, Removed, RowPrefix, ScanStep, Set,
    State, Store, Table, Value, MORE_FIELDS,
};

use super::acl::{check_permission, Access};
use super::key::{announcing_expiry, Key};
use super::meta_cache::MetaFacts;
use super::propagate::{
    emit, emit_at, notify, signal_ready, NOTIFY_GENERIC, NOTIFY_HASH, NOTIFY_ZSET,
};
use super::server::now_ms;
use super::string::{OwnedString, Text};
use super::words::words;

/// Runs `f` over the store of `queue`, whose permissions are checked for `access`. The store
/// writes strings that live for `'a` (a command's arguments) without copying them. The
/// hand-overs `f`'s transitions kept are delivered after it, in the same call.
#[inline(always)]
pub fn with_queue<'a, R>(
    ctx: &Context,
    queue: Queue<'_>,
    access: Access,
    f: impl for<'s> FnOnce(&ServerStore<'s, 'a>) -> R,
) -> R {
    let names = QueueNames::new(ctx, queue);
    let store = ServerStore {
        ctx,
        names: &names,
        access,
        sets: Default::default(),
        groups: Default::default(),
        metrics: OnceCell::new(),
        noted: RefCell::new(Vec::new()),
        counted: Default::default(),
        ended_at: Cell::new(None),
        prefix: Cell::new(None),
        events: OnceCell::new(),
        meta: RefCell::new(None),
        deferred: RefCell::new(Vec::new()),
        texts: PhantomData,
    };
    let out = f(&store);
    if !store.deferred.borrow().is_empty() {
        // The queue's entry first: the parents' calls may make entries of their own, and one
        // made in a full table must not take this queue's place.
        store.find_metrics();
        handover::deliver(&store);
    }
    store.count_noted();
    out
}

/// One queue's keys, open for one call (`'s`), writing strings that live for `'a`.
pub struct ServerStore<'s, 'a> {
    ctx: &'s Context,
    names: &'s QueueNames<'s>,
    access: Access,
    sets: [OnceCell<Key<'s>>; Set::COUNT],
    /// The named groups' keys the call opened, each once.
    groups: groups::OpenGroups<'s>,
    /// The queue's metrics, found at the call's first count.
    metrics: OnceCell<Option<super::metrics::Shared>>,
    /// What the call told the metrics, counted when it ends.
    noted: RefCell<Vec<crate::protocol::metrics::Timed>>,
    /// The events the call counted, by `EVENTS`' order, added when it ends.
    counted: [Cell<u64>; crate::protocol::metrics::EVENTS.len()],
    /// When the call's first noted attempt ended: every end it notes is timed then.
    ended_at: Cell<Option<i64>>,
    prefix: Cell<Option<RowPrefix>>,
    /// The event stream's cap (`None`: off), read once a call.
    events: OnceCell<Option<u64>>,
    /// The `meta` hash's facts, every one read by the first look (one lookup of the key) and
    /// kept for the call until it writes the hash.
    meta: RefCell<Option<MetaFacts>>,
    /// Hand-overs to parents the call's transitions kept, delivered when it ends.
    deferred: RefCell<Vec<Delivery>>,
    texts: PhantomData<Text<'a>>,
}

impl<'s> ServerStore<'s, '_> {
    /// An open set (`Internal` before `open_sets`).
    pub(crate) fn set(&self, set: Set) -> Result<&Key<'s>, EmqError> {
        self.sets[set.index()].get().ok_or(EmqError::Internal)
    }

    /// The call's context.
    pub(crate) fn ctx(&self) -> &'s Context {
        self.ctx
    }

    /// The name of one of the queue's sets.
    pub(crate) fn set_name(&self, set: Set) -> Result<&OwnedString, EmqError> {
        self.names.get(set)
    }

    /// The queue this store opens.
    pub fn queue(&self) -> Queue<'s> {
        self.names.queue
    }

    /// Whether the caller was checked as a client for reads only.
    pub fn access(&self) -> Access {
        self.access
    }

    #[inline]
    fn prefix(&self) -> RowPrefix {
        self.prefix.get().unwrap_or_else(|| {
            let prefix = RowPrefix::new(self.names.queue);
            self.prefix.set(Some(prefix));
            prefix
        })
    }
}

impl<'a> Store for ServerStore<'_, 'a> {
    type Text = Text<'a>;
    type Name = OwnedString;
    type Row<'n>
        = Key<'n>
    where
        Self: 'n;

    #[inline]
    fn now_ms(&self) -> i64 {
        now_ms() as i64
    }

    fn observe(&self, what: crate::protocol::metrics::Observed) {
        self.note_observed(what);
    }

    fn may_be_readied(&self) -> bool {
        self.metrics().is_none_or(|m| m.borrow().metrics.readied)
    }

    fn time(&self, what: crate::protocol::metrics::Timed) {
        self.note_timed(what);
    }

    fn queue_name(&self) -> &[u8] {
        self.names.queue.as_bytes()
    }

    #[inline]
    fn text(&self, bytes: &[u8]) -> Result<Text<'a>, EmqError> {
        OwnedString::new(self.ctx, bytes).map(Text::Owned)
    }

    #[inline]
    fn bytes<'t>(&self, text: &'t Text<'a>) -> &'t [u8] {
        text.bytes()
    }

    #[inline(always)]
    fn row_name(&self, id: &BrandedId, member: &Text<'a>) -> Result<OwnedString, EmqError> {
        OwnedString::new(
            self.ctx,
            self.prefix().row_arg(id, member.bytes()).as_bytes(),
        )
    }

    #[inline(always)]
    fn check_access<'k>(&'k self, keys: &[KeyRef<'k, OwnedString>]) -> Result<(), EmqError> {
        let write = self.access;
        let names = self.names;
        // The groups' names: an open key's, or made for the check (a key is opened only once
        // the caller may use it, so a refusal says NOPERM and looks nothing up).
        let groups = keys
            .iter()
            .filter_map(|key| match key {
                KeyRef::Group(group) => Some(self.group_key_name(group)),
                _ => None,
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut groups = groups.iter().map(|name| name.as_ref());
        check_permission(
            self.ctx,
            keys.iter().map(move |key| {
                Ok(match key {
                    KeyRef::Set(set) => (names.get(*set)?, write),
                    KeyRef::ReadMeta => (names.meta()?, Access::Read),
                    KeyRef::Meta => (names.meta()?, write),
                    KeyRef::Events => (names.events()?, write),
                    KeyRef::Table(table) => (names.table(*table)?, write),
                    KeyRef::Row(name) => (*name, write),
                    KeyRef::Group(_) => (groups.next().ok_or(EmqError::Internal)?, write),
                })
            }),
        )
    }

    #[inline(always)]
    fn open_sets(&self, sets: &[Set]) -> Result<(), EmqError> {
        for &set in sets {
            let cell = &self.sets[set.index()];
            if cell.get().is_some() {
                continue;
            }
            let name = self.names.get(set)?;
            let key = match self.access {
                Access::Read => Key::open_read(self.ctx, name)?,
                Access::ReadWrite => Key::open(self.ctx, name)?,
            };
            key.expect_zset()?;
            let _ = cell.set(key);
        }
        Ok(())
    }

    #[inline]
    fn probe(&self, row: &OwnedString) -> Result<Holds, EmqError> {
        Ok(Key::probe(self.ctx, row)?.holds())
    }

    #[inline(always)]
    fn open_row<'n>(&'n self, row: &'n OwnedString) -> Result<Key<'n>, EmqError> {
        Key::open(self.ctx, row)
    }

    #[inline]
    fn len(&self, set: Set) -> u64 {
        self.set(set).map_or(0, |k| k.len())
    }

    #[inline]
    fn score(&self, set: Set, member: &Text<'a>) -> Option<f64> {
        self.set(set).ok()?.zscore(member.as_str())
    }

    #[inline]
    fn range(
        &self,
        set: Set,
        min: f64,
        max: f64,
        limit: usize,
    ) -> Result<Vec<(Text<'a>, f64)>, EmqError> {
        self.set(set)?.zrange_by_score(min, max, limit)
    }

    #[inline]
    fn holds(&self, row: &Key<'_>) -> Holds {
        row.holds()
    }

    #[inline]
    fn field(&self, row: &Key<'_>, field: Field) -> Option<Text<'a>> {
        // The field's name as a string made at load: a C-string field name would be copied into
        // a new server string on every read.
        row.hash_get(words().ok()?.field(field)).map(Text::Owned)
    }

    #[inline]
    fn fields3(&self, row: &Key<'_>, fields: [Field; 3]) -> [Option<Text<'a>>; 3] {
        Self::own_fields(fields, |names| row.hash_get3(names))
    }

    #[inline]
    fn row_len(&self, row: &Key<'_>) -> u64 {
        row.len()
    }

    #[inline]
    fn add(&self, set: Set, score: i64, member: &Text<'a>) -> Result<(), EmqError> {
        self.zadd_to(self.set(set)?, score, member)
    }

    #[inline]
    fn last_score(&self, set: Set) -> Result<Option<f64>, EmqError> {
        self.set(set)?.zlast_score()
    }

    fn group_len(&self, group: &[u8]) -> Result<u64, EmqError> {
        self.with_group(group, |key| Ok(key.len()))
    }

    fn group_range(&self, group: &[u8], limit: usize) -> Result<Vec<(Text<'a>, f64)>, EmqError> {
        self.with_group(group, |k| {
            k.zrange_by_score(f64::NEG_INFINITY, f64::INFINITY, limit)
        })
    }

    fn group_score(&self, group: &[u8], member: &Text<'a>) -> Result<Option<f64>, EmqError> {
        self.with_group(group, |key| Ok(key.zscore(member.as_str())))
    }

    fn group_add(&self, group: &[u8], score: i64, member: &Text<'a>) -> Result<(), EmqError> {
        self.with_group(group, |key| self.zadd_to(key, score, member))
    }

    fn group_remove(&self, group: &[u8], members: &[&Text<'a>]) -> Result<Removed, EmqError> {
        self.with_group(group, |key| Ok((self.zrem_from(key, members)?, key.len())))
    }

    fn remove_many(&self, set: Set, members: &[&Text<'a>]) -> Result<Vec<bool>, EmqError> {
        self.zrem_from(self.set(set)?, members)
    }

    #[inline]
    fn add_many(&self, set: Set, members: &[(i64, &Text<'a>)]) -> Result<(), EmqError> {
        self.zadd_many(self.set(set)?, members)
    }

    #[inline]
    fn remove(&self, set: Set, member: &Text<'a>) -> Result<bool, EmqError> {
        let key = self.set(set)?;
        if !key.zrem(member.as_str())? {
            return Ok(false);
        }
        notify(self.ctx, NOTIFY_ZSET, c"zrem", key.name());
        if key.is_empty() {
            notify(self.ctx, NOTIFY_GENERIC, c"del", key.name());
        }
        emit(self.ctx, c"ZREM", &[key.name().as_str(), member.as_str()]);
        Ok(true)
    }

    fn remove_upto(
        &self,
        set: Set,
        max: Option<i64>,
        members: &[Text<'a>],
    ) -> Result<(), EmqError> {
        if members.is_empty() {
            return Ok(());
        }
        let key = self.set(set)?;
        for member in members {
            key.zrem(member.as_str())?;
        }
        notify(self.ctx, NOTIFY_ZSET, c"zremrangebyscore", key.name());
        if key.is_empty() {
            notify(self.ctx, NOTIFY_GENERIC, c"del", key.name());
        }
        let max = match max {
            Some(m) => OwnedString::from_i64(self.ctx, m)?,
            None => OwnedString::new(self.ctx, b"+inf")?,
        };
        let min = OwnedString::new(self.ctx, b"-inf")?;
        emit(
            self.ctx,
            c"ZREMRANGEBYSCORE",
            &[key.name().as_str(), min.as_str(), max.as_str()],
        );
        Ok(())
    }

    #[inline]
    fn write_row(
        &self,
        row: &Key<'_>,
        state: State,
        payload: &Text<'a>,
        priority: i64,
        unique: Option<&[u8]>,
        more: &[(Field, Value<'_, Text<'a>>)],
    ) -> Result<(), EmqError> {
        let words = words()?;
        let (state, attempts, payload) = (
            (words.field(Field::State), words.state(state)),
            (words.field(Field::Attempts), words.zero),
            (words.field(Field::Payload), payload.as_str()),
        );
        if priority == 0 && unique.is_none() && more.is_empty() {
            row.hash_set(&[state, attempts, payload])?;
            let args = [
                row.name().as_str(),
                state.0,
                state.1,
                attempts.0,
                attempts.1,
                payload.0,
                payload.1,
            ];
            notify(self.ctx, NOTIFY_HASH, c"hset", row.name());
            emit(self.ctx, c"HSET", &args);
            return Ok(());
        }
        // The fields beyond the reference three, made for this row.
        let priority = match priority {
            0 => None,
            p => Some(OwnedString::from_i64(self.ctx, p)?),
        };
        let unique = unique.map(|k| OwnedString::new(self.ctx, k)).transpose()?;
        let mut made: [Option<OwnedString>; MORE_FIELDS] = Default::default();
        if more.len() > made.len() {
            return Err(EmqError::Internal);
        }
        self.make_values(more, &mut made)?;
        // Every pair, in order, in place (no allocation): the reference three, then the rest.
        let name = row.name().as_str();
        let mut pairs = [(name, name); 5 + MORE_FIELDS];
        pairs[..3].copy_from_slice(&[state, attempts, payload]);
        let mut count = 3;
        for (field, value) in [(Field::Priority, &priority), (Field::Unique, &unique)] {
            if let Some(value) = value {
                pairs[count] = (words.field(field), value.as_str());
                count += 1;
            }
        }
        for ((field, value), made) in more.iter().zip(&made) {
            pairs[count] = (words.field(*field), hash::value_str(value, made)?);
            count += 1;
        }
        let pairs = &pairs[..count];
        for some in pairs.chunks(4) {
            row.hash_set(some)?;
        }
        let mut all = [name; 1 + 2 * (5 + MORE_FIELDS)];
        for (i, (field, value)) in pairs.iter().enumerate() {
            all[1 + 2 * i] = *field;
            all[2 + 2 * i] = *value;
        }
        let all = &all[..1 + 2 * count];
        notify(self.ctx, NOTIFY_HASH, c"hset", row.name());
        emit(self.ctx, c"HSET", all);
        Ok(())
    }

    #[inline]
    fn set_fields(
        &self,
        row: &Key<'_>,
        fields: &[(Field, Value<'_, Text<'a>>)],
    ) -> Result<(), EmqError> {
        self.hset(row, None, fields)
    }

    #[inline]
    fn delete_row(&self, row: &Key<'_>) -> Result<(), EmqError> {
        row.delete()?;
        notify(self.ctx, NOTIFY_GENERIC, c"del", row.name());
        emit(self.ctx, c"DEL", &[row.name().as_str()]);
        Ok(())
    }

    #[inline]
    fn row_get_with3(
        &self,
        row: &Key<'_>,
        field: &Text<'a>,
        fields: [Field; 3],
    ) -> (Option<Text<'a>>, [Option<Text<'a>>; 3]) {
        self.named_fields(row, field, fields)
    }

    #[inline]
    fn row_get_with2(
        &self,
        row: &Key<'_>,
        field: &Text<'a>,
        fields: [Field; 2],
    ) -> (Option<Text<'a>>, [Option<Text<'a>>; 2]) {
        self.named_fields2(row, field, fields)
    }

    fn set_named(
        &self,
        row: &Key<'_>,
        named: (&Text<'a>, &[u8]),
        fields: &[(Field, Value<'_, Text<'a>>)],
    ) -> Result<(), EmqError> {
        self.hset(row, Some(named), fields)
    }

    fn row_scan(&self, row: &OwnedString, cursor: u64, count: usize) -> Result<ScanStep, EmqError> {
        hash::hscan(self.ctx, row, cursor, count)
    }

    fn defer(&self, delivery: Delivery) {
        self.deferred.borrow_mut().push(delivery);
    }

    fn take_deferred(&self) -> Vec<Delivery> {
        std::mem::take(&mut *self.deferred.borrow_mut())
    }

    #[inline]
    fn expire_row(&self, row: &Key<'_>, at_ms: i64) -> Result<(), EmqError> {
        row.expire_at(at_ms)?;
        announcing_expiry(row.name(), at_ms, || {
            notify(self.ctx, NOTIFY_GENERIC, c"expire", row.name())
        });
        emit_at(self.ctx, c"PEXPIREAT", row.name().as_str(), at_ms)
    }

    #[inline]
    fn meta(&self, field: Meta) -> Result<Option<Vec<u8>>, EmqError> {
        self.meta_fact(field)
    }

    #[inline]
    fn set_meta(&self, field: Meta, value: &[u8]) -> Result<(), EmqError> {
        self.set_meta_fact(field, value)
    }

    #[inline]
    fn del_meta(&self, field: Meta) -> Result<bool, EmqError> {
        self.del_meta_fact(field)
    }

    #[inline(always)]
    fn events(&self) -> Result<Option<u64>, EmqError> {
        self.stream_cap()
    }

    #[inline]
    fn append_event(&self, cap: u64, fields: &[(&[u8], &[u8])]) -> Result<(), EmqError> {
        self.append_to_stream(cap, fields)
    }

    #[inline]
    fn wake_claimers(&self) -> Result<(), EmqError> {
        // Claimers wait on both: `turns` exists while named groups have ready jobs.
        signal_ready(self.ctx, self.names.get(Set::Pending)?.as_str());
        signal_ready(self.ctx, self.names.get(Set::Turns)?.as_str());
        Ok(())
    }

    fn table_get(&self, table: Table, field: &[u8]) -> Result<Option<Text<'a>>, EmqError> {
        self.table_field(table, field)
    }

    fn table_add_many(&self, table: Table, counts: &[(&[u8], u64)]) -> Result<(), EmqError> {
        self.add_table_fields(table, counts)
    }

    fn table_set(&self, table: Table, field: &[u8], value: &[u8]) -> Result<(), EmqError> {
        self.set_table_field(table, field, value)
    }

    fn table_set_many(&self, table: Table, fields: &[(&[u8], &[u8])]) -> Result<(), EmqError> {
        self.set_table_fields(table, fields)
    }

    fn table_del(&self, table: Table, field: &[u8]) -> Result<bool, EmqError> {
        self.del_table_field(table, field)
    }

    fn table_len(&self, table: Table) -> Result<u64, EmqError> {
        self.table_size(table)
    }

    fn table_scan(&self, table: Table, cursor: u64, count: usize) -> Result<ScanStep, EmqError> {
        self.scan_table(table, cursor, count)
    }
}
