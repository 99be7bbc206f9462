//! The host's [`Store`]: one queue's keys in the server. Every write fires the keyspace event
//! its native command would and replicates its effect (through the effects gate); names of the
//! queue's sets come from the name cache, so the hot paths create no string for them.

use std::cell::{Cell, OnceCell};
use std::marker::PhantomData;

use valkey_module::Context;

use crate::protocol::{
    BrandedId, EmqError, Field, Holds, KeyBuf, KeyRef, Queue, RowPrefix, Set, State, Store, Value,
};

use super::acl::{check_permission, Access};
use super::key::Key;
use super::propagate::{emit, notify, NOTIFY_GENERIC, NOTIFY_HASH, NOTIFY_ZSET};
use super::server::now_ms;
use super::string::{OwnedString, Text};
use super::words::words;

/// The names of a queue's sets, each made when first asked for.
pub struct QueueNames<'q> {
    ctx: &'q Context,
    queue: Queue<'q>,
    names: [OnceCell<OwnedString>; 4],
}

impl<'q> QueueNames<'q> {
    pub fn new(ctx: &'q Context, queue: Queue<'q>) -> Self {
        Self {
            ctx,
            queue,
            names: Default::default(),
        }
    }

    pub fn get(&self, set: Set) -> Result<&OwnedString, EmqError> {
        let cell = &self.names[set.index()];
        if let Some(name) = cell.get() {
            return Ok(name);
        }
        let name = OwnedString::cached(
            self.ctx,
            KeyBuf::queue(self.queue, set.key_type()).as_bytes(),
        )?;
        Ok(cell.get_or_init(|| name))
    }
}

/// Runs `f` over the store of `queue`, whose permissions are checked for `access`. The store
/// writes strings that live for `'a` (a command's arguments) without copying them.
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
        prefix: Cell::new(None),
        texts: PhantomData,
    };
    f(&store)
}

/// One queue's keys, open for one call (`'s`), writing strings that live for `'a`.
pub struct ServerStore<'s, 'a> {
    ctx: &'s Context,
    names: &'s QueueNames<'s>,
    access: Access,
    sets: [OnceCell<Key<'s>>; 4],
    prefix: Cell<Option<RowPrefix>>,
    texts: PhantomData<Text<'a>>,
}

impl<'s> ServerStore<'s, '_> {
    /// An open set (`Internal` before `open_sets`).
    pub(crate) fn set(&self, set: Set) -> Result<&Key<'s>, EmqError> {
        self.sets[set.index()].get().ok_or(EmqError::Internal)
    }

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

    fn now_ms(&self) -> i64 {
        now_ms() as i64
    }

    fn text(&self, bytes: &[u8]) -> Result<Text<'a>, EmqError> {
        OwnedString::new(self.ctx, bytes).map(Text::Owned)
    }

    fn bytes<'t>(&self, text: &'t Text<'a>) -> &'t [u8] {
        text.bytes()
    }

    fn row_name(&self, id: &BrandedId, member: &Text<'a>) -> Result<OwnedString, EmqError> {
        OwnedString::new(
            self.ctx,
            self.prefix().row_arg(id, member.bytes()).as_bytes(),
        )
    }

    fn check_access(&self, keys: &[KeyRef<'_, OwnedString>]) -> Result<(), EmqError> {
        for key in keys {
            if let KeyRef::Set(set) = key {
                self.names.get(*set)?;
            }
        }
        let names = keys.iter().filter_map(|key| match key {
            KeyRef::Set(set) => self.names.get(*set).ok(),
            KeyRef::Row(name) => Some(*name),
        });
        check_permission(self.ctx, names, self.access)
    }

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

    fn probe(&self, row: &OwnedString) -> Result<Holds, EmqError> {
        Ok(Key::probe(self.ctx, row)?.holds())
    }

    fn open_row<'n>(&'n self, row: &'n OwnedString) -> Result<Key<'n>, EmqError> {
        Key::open(self.ctx, row)
    }

    fn len(&self, set: Set) -> u64 {
        self.set(set).map_or(0, |k| k.len())
    }

    fn score(&self, set: Set, member: &Text<'a>) -> Option<f64> {
        self.set(set).ok()?.zscore(member.as_str())
    }

    fn range(
        &self,
        set: Set,
        min: f64,
        max: f64,
        limit: usize,
    ) -> Result<Vec<(Text<'a>, f64)>, EmqError> {
        self.set(set)?.zrange_by_score(min, max, limit)
    }

    fn holds(&self, row: &Key<'_>) -> Holds {
        row.holds()
    }

    fn field(&self, row: &Key<'_>, field: Field) -> Option<Text<'a>> {
        row.hash_get(field.as_cstr()).map(Text::Owned)
    }

    fn add(&self, set: Set, score: i64, member: &Text<'a>) -> Result<(), EmqError> {
        let key = self.set(set)?;
        if !key.zadd(score as f64, member.as_str())? {
            // Already there with this score: as a native `ZADD`, no event and no effect.
            return Ok(());
        }
        notify(self.ctx, NOTIFY_ZSET, c"zadd", key.name());
        // Pending scores are always 0: no string to make for those.
        let text = match score {
            0 => None,
            n => Some(OwnedString::from_i64(self.ctx, n)?),
        };
        let score = text.as_ref().map_or(words()?.zero, OwnedString::as_str);
        emit(
            self.ctx,
            c"ZADD",
            &[key.name().as_str(), score, member.as_str()],
        );
        Ok(())
    }

    fn add_ready(&self, set: Set, members: &[&Text<'a>]) -> Result<(), EmqError> {
        if members.is_empty() {
            return Ok(());
        }
        let key = self.set(set)?;
        let zero = words()?.zero;
        let mut args = Vec::with_capacity(1 + members.len() * 2);
        args.push(key.name().as_str());
        for member in members {
            key.zadd(0.0, member.as_str())?;
            args.push(zero);
            args.push(member.as_str());
        }
        notify(self.ctx, NOTIFY_ZSET, c"zadd", key.name());
        emit(self.ctx, c"ZADD", &args);
        Ok(())
    }

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

    fn write_row(&self, row: &Key<'_>, state: State, payload: &Text<'a>) -> Result<(), EmqError> {
        let words = words()?;
        let (state, attempts, payload) = (
            (words.field(Field::State), words.state(state)),
            (words.field(Field::Attempts), words.zero),
            (words.field(Field::Payload), payload.as_str()),
        );
        row.hash_set3([state, attempts, payload])?;
        notify(self.ctx, NOTIFY_HASH, c"hset", row.name());
        let args = [
            row.name().as_str(),
            state.0,
            state.1,
            attempts.0,
            attempts.1,
            payload.0,
            payload.1,
        ];
        emit(self.ctx, c"HSET", &args);
        Ok(())
    }

    fn set_fields(
        &self,
        row: &Key<'_>,
        fields: &[(Field, Value<'_, Text<'a>>)],
    ) -> Result<(), EmqError> {
        let words = words()?;
        // The strings made for this write (a number, an error text), kept until it is done.
        let mut made: [Option<OwnedString>; 4] = Default::default();
        if fields.len() > made.len() {
            return Err(EmqError::Internal);
        }
        for ((_, value), slot) in fields.iter().zip(made.iter_mut()) {
            *slot = match value {
                Value::Int(0) | Value::State(_) | Value::Text(_) => None,
                Value::Int(n) => Some(OwnedString::from_i64(self.ctx, *n)?),
                Value::Bytes(b) => Some(OwnedString::new(self.ctx, b)?),
            };
        }
        let mut args = Vec::with_capacity(1 + fields.len() * 2);
        args.push(row.name().as_str());
        for ((field, value), made) in fields.iter().zip(&made) {
            let value = match (value, made) {
                (_, Some(s)) => s.as_str(),
                (Value::State(s), None) => words.state(*s),
                (Value::Text(t), None) => t.as_str(),
                (Value::Int(_) | Value::Bytes(_), None) => words.zero,
            };
            let field = words.field(*field);
            row.hash_set(field, value)?;
            args.push(field);
            args.push(value);
        }
        notify(self.ctx, NOTIFY_HASH, c"hset", row.name());
        emit(self.ctx, c"HSET", &args);
        Ok(())
    }

    fn delete_row(&self, row: &Key<'_>) -> Result<(), EmqError> {
        row.delete()?;
        notify(self.ctx, NOTIFY_GENERIC, c"del", row.name());
        emit(self.ctx, c"DEL", &[row.name().as_str()]);
        Ok(())
    }

    fn expire_row(&self, row: &Key<'_>, at_ms: i64) -> Result<(), EmqError> {
        row.expire_at(at_ms)?;
        notify(self.ctx, NOTIFY_GENERIC, c"expire", row.name());
        let at = OwnedString::from_i64(self.ctx, at_ms)?;
        emit(self.ctx, c"PEXPIREAT", &[row.name().as_str(), at.as_str()]);
        Ok(())
    }
}
