//! A [`Store`] over memory, for the transitions' unit tests: a queue's four sets and its rows,
//! keys that hold another type, permissions denied, and a log of every write (the effects a
//! replica would receive; a variadic `ZADD`'s members as given), so a test sees what it wrote.
//! The ranks the inspection commands read are in [`ranks`].

mod groups;
mod ranks;
mod tables;

pub use ranks::rank_reads;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use crate::protocol::flow::Delivery;
use crate::protocol::{
    BrandedId, EmqError, Field, Holds, KeyRef, Meta, Removed, ScanStep, Set, State, Store, Table,
    Value,
};

/// A key of the queue, as a test names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemKey {
    Set(Set),
    Meta,
    Events,
    Table(Table),
    Row(Vec<u8>),
    Group(Vec<u8>),
}

/// The tables' fields, by (table, field).
type Tables = BTreeMap<(u8, Vec<u8>), Vec<u8>>;

/// A row: its fields in the order first written, and its expiry.
type Row = (Vec<(Vec<u8>, Vec<u8>)>, Option<i64>);

#[derive(Default)]
pub struct Memory {
    pub now: Cell<i64>,
    /// Each set's members and scores.
    pub sets: RefCell<[BTreeMap<Vec<u8>, f64>; Set::COUNT]>,
    /// Rows by job id.
    pub rows: RefCell<BTreeMap<Vec<u8>, Row>>,
    /// Keys that hold another type (a string written by hand).
    pub other: RefCell<Vec<MemKey>>,
    /// Keys the caller may not touch.
    pub denied: RefCell<Vec<MemKey>>,
    /// Every write, as the effect a replica would receive.
    pub writes: RefCell<Vec<String>>,
    /// The `meta` hash.
    pub meta: RefCell<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// The event stream's entries, each as `field=value` pairs joined by spaces.
    pub stream: RefCell<Vec<String>>,
    /// Wake-ups of the claimers blocked on the pending set.
    pub wakes: Cell<usize>,
    /// The `unique` and `cron` tables.
    pub tables: RefCell<Tables>,
    /// Hand-overs the transitions kept (`Store::defer`), not yet taken.
    pub deferred: RefCell<Vec<Delivery>>,
    /// The named groups' ready jobs.
    pub groups: RefCell<groups::Groups>,
    /// The queue's name (`q` unless a test names it).
    pub name: Vec<u8>,
    opened: RefCell<[bool; Set::COUNT]>,
    events: Cell<Option<Option<u64>>>,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A value's bytes, as a write stores them.
fn value_bytes(value: &Value<'_, Vec<u8>>) -> Vec<u8> {
    match value {
        Value::State(s) => s.as_bytes().to_vec(),
        Value::Int(n) => n.to_string().into_bytes(),
        Value::Text(t) => t.to_vec(),
        Value::Bytes(b) => b.to_vec(),
    }
}

impl Memory {
    pub fn at(now: i64) -> Self {
        Self::named(b"q", now)
    }

    /// A queue called `name`, at `now`.
    pub fn named(name: &[u8], now: i64) -> Self {
        let m = Memory {
            name: name.to_vec(),
            ..Memory::default()
        };
        m.now.set(now);
        m
    }

    /// The members of `set`, lowest first, with their scores.
    pub fn members(&self, set: Set) -> Vec<(String, f64)> {
        let mut all: Vec<(String, f64)> = self.sets.borrow()[set.index()]
            .iter()
            .map(|(m, s)| (text(m), *s))
            .collect();
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        all
    }

    /// A row's field, as text.
    pub fn field(&self, id: &str, field: &str) -> Option<String> {
        let rows = self.rows.borrow();
        let (fields, _) = rows.get(id.as_bytes())?;
        fields
            .iter()
            .find(|(f, _)| f == field.as_bytes())
            .map(|(_, v)| text(v))
    }

    pub fn expiry(&self, id: &str) -> Option<i64> {
        self.rows.borrow().get(id.as_bytes()).and_then(|r| r.1)
    }

    /// Puts a job in `set` at `score` with a row of these fields, as another writer would.
    pub fn put(&self, set: Set, id: &str, score: f64, fields: &[(&str, &str)]) {
        self.sets.borrow_mut()[set.index()].insert(id.as_bytes().to_vec(), score);
        let fields = fields
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        self.rows
            .borrow_mut()
            .insert(id.as_bytes().to_vec(), (fields, None));
    }

    fn log(&self, write: String) {
        self.writes.borrow_mut().push(write);
    }

    /// The `ZREM` effect of the `members` of `key` that were `there`, if any.
    fn log_removed(&self, key: &str, members: &[&Vec<u8>], there: &[bool]) {
        let removed: Vec<String> = members
            .iter()
            .zip(there)
            .filter(|(_, there)| **there)
            .map(|(m, _)| text(m))
            .collect();
        if !removed.is_empty() {
            self.log(format!("ZREM {key} {}", removed.join(" ")));
        }
    }

    fn opened(&self, set: Set) -> Result<(), EmqError> {
        match self.opened.borrow()[set.index()] {
            true => Ok(()),
            false => Err(EmqError::Internal), // a transition must open a set before using it
        }
    }

    fn row_holds(&self, name: &[u8]) -> Holds {
        if self.other.borrow().contains(&MemKey::Row(name.to_vec())) {
            Holds::Other
        } else if self.rows.borrow().contains_key(name) {
            Holds::Hash
        } else {
            Holds::Nothing
        }
    }

    fn upsert(&self, row: &[u8], field: Field, value: Vec<u8>) {
        self.upsert_named(row, field.as_bytes(), value)
    }

    /// A field named at run time (a child's), or `None`.
    fn named_field(&self, row: &[u8], field: &[u8]) -> Option<Vec<u8>> {
        let rows = self.rows.borrow();
        let (fields, _) = rows.get(row)?;
        fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v.clone())
    }

    fn upsert_named(&self, row: &[u8], field: &[u8], value: Vec<u8>) {
        let mut rows = self.rows.borrow_mut();
        let (fields, _) = rows.entry(row.to_vec()).or_default();
        match fields.iter_mut().find(|(f, _)| f == field) {
            Some((_, v)) => *v = value,
            None => fields.push((field.to_vec(), value)),
        }
    }
}

impl Store for Memory {
    type Text = Vec<u8>;
    type Name = Vec<u8>;
    type Row<'n> = &'n Vec<u8>;

    fn now_ms(&self) -> i64 {
        self.now.get()
    }

    fn queue_name(&self) -> &[u8] {
        &self.name
    }

    fn row_get_with3(
        &self,
        row: &&Vec<u8>,
        field: &Vec<u8>,
        fields: [Field; 3],
    ) -> (Option<Vec<u8>>, [Option<Vec<u8>>; 3]) {
        (self.named_field(row, field), self.fields3(row, fields))
    }

    fn row_get_with2(
        &self,
        row: &&Vec<u8>,
        field: &Vec<u8>,
        fields: [Field; 2],
    ) -> (Option<Vec<u8>>, [Option<Vec<u8>>; 2]) {
        (
            self.named_field(row, field),
            fields.map(|f| Store::field(self, row, f)),
        )
    }

    fn set_named(
        &self,
        row: &&Vec<u8>,
        named: (&Vec<u8>, &[u8]),
        fields: &[(Field, Value<'_, Vec<u8>>)],
    ) -> Result<(), EmqError> {
        self.upsert_named(row, named.0, named.1.to_vec());
        let mut write = format!("HSET {} {} {}", text(row), text(named.0), text(named.1));
        for (field, value) in fields {
            let value = value_bytes(value);
            write.push_str(&format!(" {} {}", text(field.as_bytes()), text(&value)));
            self.upsert(row, *field, value);
        }
        self.log(write);
        Ok(())
    }

    fn row_scan(&self, row: &Vec<u8>, _cursor: u64, _count: usize) -> Result<ScanStep, EmqError> {
        let rows = self.rows.borrow();
        Ok((
            0,
            rows.get(row.as_slice())
                .map(|r| r.0.clone())
                .unwrap_or_default(),
        ))
    }

    fn defer(&self, delivery: Delivery) {
        self.deferred.borrow_mut().push(delivery);
    }

    fn take_deferred(&self) -> Vec<Delivery> {
        std::mem::take(&mut *self.deferred.borrow_mut())
    }

    fn text(&self, bytes: &[u8]) -> Result<Vec<u8>, EmqError> {
        Ok(bytes.to_vec())
    }

    fn bytes<'t>(&self, text: &'t Vec<u8>) -> &'t [u8] {
        text
    }

    fn row_name(&self, id: &BrandedId, member: &Vec<u8>) -> Result<Vec<u8>, EmqError> {
        assert_eq!(&id.encode()[..], &member[..], "a member is its id's text");
        Ok(member.clone())
    }

    fn check_access(&self, keys: &[KeyRef<'_, Vec<u8>>]) -> Result<(), EmqError> {
        let denied = self.denied.borrow();
        for key in keys {
            let key = match key {
                KeyRef::Set(set) => MemKey::Set(*set),
                KeyRef::Meta | KeyRef::ReadMeta => MemKey::Meta,
                KeyRef::Events => MemKey::Events,
                KeyRef::Table(t) => MemKey::Table(*t),
                KeyRef::Row(name) => MemKey::Row(name.to_vec()),
                KeyRef::Group(group) => MemKey::Group(group.to_vec()),
            };
            if denied.contains(&key) {
                return Err(EmqError::NoPerm);
            }
        }
        Ok(())
    }

    fn open_sets(&self, sets: &[Set]) -> Result<(), EmqError> {
        for &set in sets {
            if self.other.borrow().contains(&MemKey::Set(set)) {
                return Err(EmqError::WrongType);
            }
            self.opened.borrow_mut()[set.index()] = true;
        }
        Ok(())
    }

    fn probe(&self, row: &Vec<u8>) -> Result<Holds, EmqError> {
        Ok(self.row_holds(row))
    }

    fn open_row<'n>(&'n self, row: &'n Vec<u8>) -> Result<&'n Vec<u8>, EmqError> {
        Ok(row)
    }

    fn len(&self, set: Set) -> u64 {
        self.sets.borrow()[set.index()].len() as u64
    }

    fn score(&self, set: Set, member: &Vec<u8>) -> Option<f64> {
        self.opened(set).ok()?;
        self.sets.borrow()[set.index()].get(member).copied()
    }

    fn range(
        &self,
        set: Set,
        min: f64,
        max: f64,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, f64)>, EmqError> {
        self.opened(set)?;
        let mut all: Vec<(Vec<u8>, f64)> = self.sets.borrow()[set.index()]
            .iter()
            .filter(|(_, s)| (min..=max).contains(*s))
            .map(|(m, s)| (m.clone(), *s))
            .collect();
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(limit);
        Ok(all)
    }

    fn holds(&self, row: &&Vec<u8>) -> Holds {
        self.row_holds(row)
    }

    fn field(&self, row: &&Vec<u8>, field: Field) -> Option<Vec<u8>> {
        let rows = self.rows.borrow();
        let (fields, _) = rows.get(row.as_slice())?;
        fields
            .iter()
            .find(|(f, _)| f == field.as_bytes())
            .map(|(_, v)| v.clone())
    }

    fn last_score(&self, set: Set) -> Result<Option<f64>, EmqError> {
        Ok(self
            .range(set, f64::NEG_INFINITY, f64::INFINITY, usize::MAX)?
            .last()
            .map(|m| m.1))
    }

    fn group_len(&self, g: &[u8]) -> Result<u64, EmqError> {
        self.mem_group_len(g)
    }

    fn group_range(&self, g: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, f64)>, EmqError> {
        self.mem_group_range(g, limit)
    }

    fn group_score(&self, g: &[u8], member: &Vec<u8>) -> Result<Option<f64>, EmqError> {
        self.mem_group_score(g, member)
    }

    fn group_add(&self, g: &[u8], score: i64, member: &Vec<u8>) -> Result<(), EmqError> {
        self.mem_group_add(g, score, member)
    }

    fn group_remove(&self, g: &[u8], members: &[&Vec<u8>]) -> Result<Removed, EmqError> {
        self.mem_group_remove(g, members)
    }

    fn add(&self, set: Set, score: i64, member: &Vec<u8>) -> Result<(), EmqError> {
        self.opened(set)?;
        let old = self.sets.borrow_mut()[set.index()].insert(member.clone(), score as f64);
        if old != Some(score as f64) {
            self.log(format!("ZADD {set:?} {score} {}", text(member)));
        }
        Ok(())
    }

    fn add_many(&self, set: Set, members: &[(i64, &Vec<u8>)]) -> Result<(), EmqError> {
        self.opened(set)?;
        if members.is_empty() {
            return Ok(());
        }
        for (score, member) in members {
            self.sets.borrow_mut()[set.index()].insert(member.to_vec(), *score as f64);
        }
        let list: Vec<String> = members
            .iter()
            .map(|(score, m)| format!("{score} {}", text(m)))
            .collect();
        self.log(format!("ZADD {set:?} {}", list.join(" ")));
        Ok(())
    }

    fn remove(&self, set: Set, member: &Vec<u8>) -> Result<bool, EmqError> {
        self.opened(set)?;
        let was = self.sets.borrow_mut()[set.index()].remove(member).is_some();
        if was {
            self.log(format!("ZREM {set:?} {}", text(member)));
        }
        Ok(was)
    }

    fn remove_many(&self, set: Set, members: &[&Vec<u8>]) -> Result<Vec<bool>, EmqError> {
        self.opened(set)?;
        let there: Vec<bool> = members
            .iter()
            .map(|m| self.sets.borrow_mut()[set.index()].remove(*m).is_some())
            .collect();
        self.log_removed(&format!("{set:?}"), members, &there);
        Ok(there)
    }

    fn remove_upto(&self, set: Set, max: Option<i64>, members: &[Vec<u8>]) -> Result<(), EmqError> {
        self.opened(set)?;
        let mut sets = self.sets.borrow_mut();
        for m in members {
            sets[set.index()].remove(m);
        }
        let left = sets[set.index()]
            .values()
            .filter(|s| max.is_none_or(|max| **s <= max as f64))
            .count();
        assert_eq!(left, 0, "every member up to the score was given");
        drop(sets);
        let max = max.map_or("+inf".to_string(), |m| m.to_string());
        self.log(format!("ZREMRANGEBYSCORE {set:?} -inf {max}"));
        Ok(())
    }

    fn write_row(
        &self,
        row: &&Vec<u8>,
        state: State,
        payload: &Vec<u8>,
        priority: i64,
        unique: Option<&[u8]>,
        more: &[(Field, Value<'_, Vec<u8>>)],
    ) -> Result<(), EmqError> {
        self.upsert(row, Field::State, state.as_bytes().to_vec());
        self.upsert(row, Field::Attempts, b"0".to_vec());
        self.upsert(row, Field::Payload, payload.clone());
        let mut write = format!(
            "HSET {} state {} attempts 0 payload {}",
            text(row),
            text(state.as_bytes()),
            text(payload)
        );
        if priority != 0 {
            self.upsert(row, Field::Priority, priority.to_string().into_bytes());
            write.push_str(&format!(" priority {priority}"));
        }
        if let Some(key) = unique {
            self.upsert(row, Field::Unique, key.to_vec());
            write.push_str(&format!(" unique {}", text(key)));
        }
        for (field, value) in more {
            let value = value_bytes(value);
            write.push_str(&format!(" {} {}", text(field.as_bytes()), text(&value)));
            self.upsert(row, *field, value);
        }
        self.log(write);
        Ok(())
    }

    fn set_fields(
        &self,
        row: &&Vec<u8>,
        fields: &[(Field, Value<'_, Vec<u8>>)],
    ) -> Result<(), EmqError> {
        let mut write = format!("HSET {}", text(row));
        for (field, value) in fields {
            let value = value_bytes(value);
            write.push_str(&format!(" {} {}", text(field.as_bytes()), text(&value)));
            self.upsert(row, *field, value);
        }
        self.log(write);
        Ok(())
    }

    fn delete_row(&self, row: &&Vec<u8>) -> Result<(), EmqError> {
        self.rows.borrow_mut().remove(row.as_slice());
        self.log(format!("DEL {}", text(row)));
        Ok(())
    }

    fn expire_row(&self, row: &&Vec<u8>, at_ms: i64) -> Result<(), EmqError> {
        if let Some(r) = self.rows.borrow_mut().get_mut(row.as_slice()) {
            r.1 = Some(at_ms);
        }
        self.log(format!("PEXPIREAT {} {at_ms}", text(row)));
        Ok(())
    }

    fn meta(&self, field: Meta) -> Result<Option<Vec<u8>>, EmqError> {
        if self.other.borrow().contains(&MemKey::Meta) {
            return Err(EmqError::WrongType);
        }
        Ok(self.meta.borrow().get(field.as_bytes()).cloned())
    }

    fn set_meta(&self, field: Meta, value: &[u8]) -> Result<(), EmqError> {
        if self.other.borrow().contains(&MemKey::Meta) {
            return Err(EmqError::WrongType);
        }
        self.meta
            .borrow_mut()
            .insert(field.as_bytes().to_vec(), value.to_vec());
        self.log(format!(
            "HSET meta {} {}",
            text(field.as_bytes()),
            text(value)
        ));
        Ok(())
    }

    fn del_meta(&self, field: Meta) -> Result<bool, EmqError> {
        if self.other.borrow().contains(&MemKey::Meta) {
            return Err(EmqError::WrongType);
        }
        let was = self.meta.borrow_mut().remove(field.as_bytes()).is_some();
        if was {
            self.log(format!("HDEL meta {}", text(field.as_bytes())));
        }
        Ok(was)
    }

    fn events(&self) -> Result<Option<u64>, EmqError> {
        if let Some(cap) = self.events.get() {
            return Ok(cap);
        }
        let cap = self
            .meta(Meta::Events)?
            .and_then(|t| String::from_utf8(t).ok()?.parse::<u64>().ok());
        if cap.is_some() {
            self.check_access(&[KeyRef::Events])?;
            if self.other.borrow().contains(&MemKey::Events) {
                return Err(EmqError::WrongType);
            }
        }
        self.events.set(Some(cap));
        Ok(cap)
    }

    fn append_event(&self, cap: u64, fields: &[(&[u8], &[u8])]) -> Result<(), EmqError> {
        let entry: Vec<String> = fields
            .iter()
            .map(|(f, v)| format!("{}={}", text(f), text(v)))
            .collect();
        let mut stream = self.stream.borrow_mut();
        stream.push(entry.join(" "));
        let over = stream.len().saturating_sub(cap as usize);
        stream.drain(..over);
        Ok(())
    }

    fn wake_claimers(&self) -> Result<(), EmqError> {
        self.wakes.set(self.wakes.get() + 1);
        Ok(())
    }

    fn table_get(&self, table: Table, field: &[u8]) -> Result<Option<Vec<u8>>, EmqError> {
        self.table_type(table)?;
        Ok(self
            .tables
            .borrow()
            .get(&(table as u8, field.to_vec()))
            .cloned())
    }

    fn table_set(&self, table: Table, field: &[u8], value: &[u8]) -> Result<(), EmqError> {
        self.mem_table_set(table, field, value)
    }

    fn table_set_many(&self, table: Table, fields: &[(&[u8], &[u8])]) -> Result<(), EmqError> {
        fields
            .iter()
            .try_for_each(|(f, v)| self.mem_table_set(table, f, v))
    }

    fn table_del(&self, table: Table, field: &[u8]) -> Result<bool, EmqError> {
        self.mem_table_del(table, field)
    }

    fn table_len(&self, table: Table) -> Result<u64, EmqError> {
        self.table_type(table)?;
        Ok(self.table_fields(table).len() as u64)
    }

    fn table_scan(&self, table: Table, cursor: u64, count: usize) -> Result<ScanStep, EmqError> {
        self.mem_table_scan(table, cursor, count)
    }
}
