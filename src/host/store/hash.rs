//! The store's hashes read and written by field name: a parent's `child:<queue>:<id>` fields
//! beside its counters, the queue's tables (`unique`, `cron`, `outbox`), and a row's writes of
//! several fields in one `HSET`; `HSCAN` for the pages of either.

use valkey_module::{CallOptionsBuilder, CallReply, CallResult, Context};

use crate::protocol::{EmqError, Field, Holds, ScanStep, Table, Value};

use super::super::acl::Access;
use super::super::key::Key;
use super::super::propagate::{emit, notify, NOTIFY_GENERIC, NOTIFY_HASH};
use super::super::string::{OwnedString, Str, Text};
use super::super::words::words;
use super::ServerStore;

impl<'a> ServerStore<'_, 'a> {
    /// `HMGET row a b ...` of `N` of the row's own fields, by their names through `get` (a
    /// row's `Key::hash_get3`: `Store::fields3`).
    #[inline(always)]
    pub(super) fn own_fields<const N: usize>(
        fields: [Field; N],
        get: impl FnOnce([Str<'_>; N]) -> [Option<OwnedString>; N],
    ) -> [Option<Text<'a>>; N] {
        let Ok(words) = words() else {
            return [(); N].map(|()| None);
        };
        get(fields.map(|f| words.field(f))).map(|v| v.map(Text::Owned))
    }

    /// `HMGET row field a b c`, a field named at run time and three of the row's own
    /// (`Store::row_get_with3`).
    #[inline]
    pub(super) fn named_fields(
        &self,
        row: &Key<'_>,
        field: &Text<'a>,
        fields: [Field; 3],
    ) -> (Option<Text<'a>>, [Option<Text<'a>>; 3]) {
        let Ok(words) = words() else {
            return (None, [None, None, None]);
        };
        let [a, b, c] = fields.map(|f| words.field(f));
        let [v, x, y, z] = row
            .hash_get4([field.as_str(), a, b, c])
            .map(|v| v.map(Text::Owned));
        (v, [x, y, z])
    }

    /// `HMGET row field a b` (`Store::row_get_with2`).
    #[inline]
    pub(super) fn named_fields2(
        &self,
        row: &Key<'_>,
        field: &Text<'a>,
        fields: [Field; 2],
    ) -> (Option<Text<'a>>, [Option<Text<'a>>; 2]) {
        let Ok(words) = words() else {
            return (None, [None, None]);
        };
        let [a, b] = fields.map(|f| words.field(f));
        let [v, x, y] = row
            .hash_get3([field.as_str(), a, b])
            .map(|v| v.map(Text::Owned));
        (v, [x, y])
    }

    /// `HSET row [named value] field value ...`: at most four pairs in all, in the order given,
    /// in one call, with one event and one effect.
    #[inline]
    pub(super) fn hset(
        &self,
        row: &Key<'_>,
        named: Option<(&Text<'a>, &[u8])>,
        fields: &[(Field, Value<'_, Text<'a>>)],
    ) -> Result<(), EmqError> {
        let words = words()?;
        let lead = usize::from(named.is_some());
        // The strings made for this write (a number past the small ones, an error text, the
        // named field's value), kept until it is done.
        let mut made: [Option<OwnedString>; 4] = Default::default();
        let count = lead + fields.len();
        if count == 0 || count > made.len() {
            return Err(EmqError::Internal);
        }
        if let Some((_, value)) = named {
            made[0] = Some(OwnedString::new(self.ctx, value)?);
        }
        self.make_values(fields, &mut made[lead..])?;
        let name = row.name().as_str();
        let mut pairs = [(name, name); 4];
        if let (Some((field, _)), Some(value)) = (named, &made[0]) {
            pairs[0] = (field.as_str(), value.as_str());
        }
        for (pair, ((field, value), made)) in pairs[lead..]
            .iter_mut()
            .zip(fields.iter().zip(&made[lead..]))
        {
            *pair = (words.field(*field), value_str(value, made)?);
        }
        let pairs = &pairs[..count];
        // One call for every field, in the order given.
        row.hash_set(pairs)?;
        // The effect: `HSET row field value ...`.
        let mut args = [name; 9];
        for (i, (field, value)) in pairs.iter().enumerate() {
            args[1 + 2 * i] = *field;
            args[2 + 2 * i] = *value;
        }
        notify(self.ctx, NOTIFY_HASH, c"hset", row.name());
        emit(self.ctx, c"HSET", &args[..1 + 2 * pairs.len()]);
        Ok(())
    }

    /// The strings `fields`' values need made for a write (one in `made` for each value but a
    /// small number, a state or a text, whose strings exist already).
    pub(super) fn make_values(
        &self,
        fields: &[(Field, Value<'_, Text<'a>>)],
        made: &mut [Option<OwnedString>],
    ) -> Result<(), EmqError> {
        let words = words()?;
        for ((_, value), slot) in fields.iter().zip(made.iter_mut()) {
            *slot = match value {
                Value::Int(n) if words.small(*n).is_some() => None,
                Value::State(_) | Value::Text(_) => None,
                Value::Int(n) => Some(OwnedString::from_i64(self.ctx, *n)?),
                Value::Bytes(b) => Some(OwnedString::new(self.ctx, b)?),
            };
        }
        Ok(())
    }

    /// `HGET table field` (`Store::table_get`).
    pub(super) fn table_field(
        &self,
        table: Table,
        field: &[u8],
    ) -> Result<Option<Text<'a>>, EmqError> {
        let key = self.open_table(table)?;
        let field = OwnedString::new(self.ctx, field)?;
        Ok(key.hash_get(field.as_str()).map(Text::Owned))
    }

    /// `HINCRBY table field n` for each count (`Store::table_add_many`): the table opened once,
    /// each field's string made once, one event and one effect.
    pub(super) fn add_table_fields(
        &self,
        table: Table,
        counts: &[(&[u8], u64)],
    ) -> Result<(), EmqError> {
        if counts.is_empty() {
            return Ok(());
        }
        let key = self.open_table(table)?;
        let mut made = Vec::with_capacity(counts.len());
        for &(field, n) in counts {
            let field = OwnedString::new(self.ctx, field)?;
            let old = key.hash_get(field.as_str());
            let old = old
                .as_ref()
                .and_then(|t| std::str::from_utf8(t.bytes()).ok()?.parse::<u64>().ok())
                .unwrap_or(0);
            let now = old.saturating_add(n).min(i64::MAX as u64) as i64;
            let value = OwnedString::from_i64(self.ctx, now)?;
            made.push((field, value));
        }
        self.hset_made(&key, &made)
    }

    /// `HSET table field value` (`Store::table_set`).
    pub(super) fn set_table_field(
        &self,
        table: Table,
        field: &[u8],
        value: &[u8],
    ) -> Result<(), EmqError> {
        self.set_table_fields(table, &[(field, value)])
    }

    /// `HSET table field value [field value ...]` (`Store::table_set_many`): one event and one
    /// effect.
    pub(super) fn set_table_fields(
        &self,
        table: Table,
        fields: &[(&[u8], &[u8])],
    ) -> Result<(), EmqError> {
        if fields.is_empty() {
            return Ok(());
        }
        let key = self.open_table(table)?;
        let made = fields
            .iter()
            .map(|(f, v)| {
                Ok((
                    OwnedString::new(self.ctx, f)?,
                    OwnedString::new(self.ctx, v)?,
                ))
            })
            .collect::<Result<Vec<_>, EmqError>>()?;
        self.hset_made(&key, &made)
    }

    /// `HSET key field value ...` of strings made for it: one event and one effect.
    fn hset_made(
        &self,
        key: &Key<'_>,
        made: &[(OwnedString, OwnedString)],
    ) -> Result<(), EmqError> {
        let pairs: Vec<_> = made.iter().map(|(f, v)| (f.as_str(), v.as_str())).collect();
        for some in pairs.chunks(4) {
            key.hash_set(some)?;
        }
        notify(self.ctx, NOTIFY_HASH, c"hset", key.name());
        let mut args = Vec::with_capacity(1 + 2 * pairs.len());
        args.push(key.name().as_str());
        for (f, v) in &pairs {
            args.extend([*f, *v]);
        }
        emit(self.ctx, c"HSET", &args);
        Ok(())
    }

    /// `HDEL table field` (`Store::table_del`).
    pub(super) fn del_table_field(&self, table: Table, field: &[u8]) -> Result<bool, EmqError> {
        let key = self.open_table(table)?;
        let field = OwnedString::new(self.ctx, field)?;
        if !key.hash_del(field.as_str())? {
            return Ok(false);
        }
        notify(self.ctx, NOTIFY_HASH, c"hdel", key.name());
        if key.is_empty() {
            notify(self.ctx, NOTIFY_GENERIC, c"del", key.name());
        }
        emit(self.ctx, c"HDEL", &[key.name().as_str(), field.as_str()]);
        Ok(true)
    }

    /// How many fields a table has (`Store::table_len`).
    pub(super) fn table_size(&self, table: Table) -> Result<u64, EmqError> {
        Ok(self.open_table(table)?.len())
    }

    /// One step of `HSCAN table` (`Store::table_scan`).
    pub(super) fn scan_table(
        &self,
        table: Table,
        cursor: u64,
        count: usize,
    ) -> Result<ScanStep, EmqError> {
        let name = self.names.table(table)?;
        if self.open_table(table)?.holds() == Holds::Nothing {
            return Ok((0, Vec::new()));
        }
        hscan(self.ctx, name, cursor, count)
    }

    /// Opens a table, a hash or missing (`WRONGTYPE` otherwise).
    fn open_table(&self, table: Table) -> Result<Key<'_>, EmqError> {
        let name = self.names.table(table)?;
        let key = match self.access {
            Access::Read => Key::open_read(self.ctx, name)?,
            Access::ReadWrite => Key::open(self.ctx, name)?,
        };
        match key.holds() {
            Holds::Nothing | Holds::Hash => Ok(key),
            _ => Err(EmqError::WrongType),
        }
    }
}

/// A value's server string: the one made for it (`make_values`), or one made at load.
#[inline]
pub(super) fn value_str<'v>(
    value: &'v Value<'_, Text<'_>>,
    made: &'v Option<OwnedString>,
) -> Result<Str<'v>, EmqError> {
    let words = words()?;
    Ok(match (value, made) {
        (_, Some(s)) => s.as_str(),
        (Value::State(s), None) => words.state(*s),
        (Value::Text(t), None) => t.as_str(),
        (Value::Int(n), None) => words.small(*n).ok_or(EmqError::Internal)?,
        (Value::Bytes(_), None) => return Err(EmqError::Internal),
    })
}

/// One step of `HSCAN name cursor COUNT count`: the next cursor and the fields with their values.
pub(super) fn hscan(
    ctx: &Context,
    name: &OwnedString,
    cursor: u64,
    count: usize,
) -> Result<ScanStep, EmqError> {
    let (cursor, count) = (cursor.to_string(), count.to_string());
    let args: [&[u8]; 4] = [name.bytes(), cursor.as_bytes(), b"COUNT", count.as_bytes()];
    // The crate has no safe `RM_ScanKey`, whose cursor cannot outlive the call; `HSCAN`'s
    // is a number, so a sweep resumes on the next visit. A read: nothing to replicate.
    let options = CallOptionsBuilder::new().build();
    let reply: CallResult = ctx.call_ext("HSCAN", &options, &args[..]);
    let Ok(CallReply::Array(reply)) = reply else {
        return Err(EmqError::Internal);
    };
    let bytes = |r: Option<CallResult<'_>>| match r {
        Some(Ok(CallReply::String(s))) => Some(s.as_bytes().to_vec()),
        _ => None,
    };
    let next = bytes(reply.get(0))
        .and_then(|c| std::str::from_utf8(&c).ok()?.parse::<u64>().ok())
        .ok_or(EmqError::Internal)?;
    let Some(Ok(CallReply::Array(items))) = reply.get(1) else {
        return Err(EmqError::Internal);
    };
    let mut fields = Vec::with_capacity(items.len() / 2);
    for i in (0..items.len()).step_by(2) {
        if let (Some(f), Some(v)) = (bytes(items.get(i)), bytes(items.get(i + 1))) {
            fields.push((f, v));
        }
    }
    Ok((next, fields))
}
