//! The queue's `meta` hash as the store reads and writes it: every fact read in one look and
//! kept for the call, from `meta_cache` while the hash is unchanged.

use valkey_module::raw;

use crate::protocol::{EmqError, Holds, Meta};

use super::super::acl::Access;
use super::super::client::{selected_db, Flags};
use super::super::key::Key;
use super::super::meta_cache::{self, MetaFacts};
use super::super::propagate::{emit, notify, NOTIFY_GENERIC, NOTIFY_HASH};
use super::super::string::OwnedString;
use super::super::words::words;
use super::ServerStore;

/// Where a `meta` hash read is not cached: inside `MULTI` or a script.
const CACHE_UNSAFE: u32 = raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA;

/// Most fields of a `meta` hash read in one walk; a bigger one (written by hand) is read a
/// fact at a time.
const META_WALK: usize = 16;

impl ServerStore<'_, '_> {
    /// A fact of the `meta` hash (`Store::meta`).
    #[inline]
    pub(super) fn meta_fact(&self, field: Meta) -> Result<Option<Vec<u8>>, EmqError> {
        // A transition looks only where a meta hash may be; a read command (`EMQ.STATS`)
        // always looks.
        if self.access == Access::ReadWrite && !meta_cache::may_exist() {
            return Ok(None);
        }
        if let Some(facts) = self.meta.borrow().as_ref() {
            return Ok(facts[field.index()].clone());
        }
        let key = Key::probe(self.ctx, self.names.meta()?)?;
        let facts: MetaFacts = match key.holds() {
            Holds::Nothing => Default::default(),
            Holds::Hash => self.cached_meta(&key)?,
            _ => return Err(EmqError::WrongType),
        };
        let value = facts[field.index()].clone();
        *self.meta.borrow_mut() = Some(facts);
        Ok(value)
    }

    /// `HSET meta field value` (`Store::set_meta`).
    #[inline]
    pub(super) fn set_meta_fact(&self, field: Meta, value: &[u8]) -> Result<(), EmqError> {
        let name = self.names.meta()?;
        meta_cache::meta_may_exist();
        *self.meta.borrow_mut() = None;
        let key = Key::open(self.ctx, name)?;
        if !matches!(key.holds(), Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
        let field = OwnedString::new(self.ctx, field.as_bytes())?;
        let value = OwnedString::new(self.ctx, value)?;
        key.hash_set(&[(field.as_str(), value.as_str())])?;
        notify(self.ctx, NOTIFY_HASH, c"hset", name);
        emit(
            self.ctx,
            c"HSET",
            &[name.as_str(), field.as_str(), value.as_str()],
        );
        Ok(())
    }

    /// `HDEL meta field` (`Store::del_meta`).
    #[inline]
    pub(super) fn del_meta_fact(&self, field: Meta) -> Result<bool, EmqError> {
        let name = self.names.meta()?;
        *self.meta.borrow_mut() = None;
        meta_cache::meta_changed();
        let key = Key::open(self.ctx, name)?;
        if !matches!(key.holds(), Holds::Nothing | Holds::Hash) {
            return Err(EmqError::WrongType);
        }
        if !key.hash_del(words()?.meta(field))? {
            return Ok(false);
        }
        notify(self.ctx, NOTIFY_HASH, c"hdel", name);
        if key.holds() == Holds::Nothing || key.is_empty() {
            notify(self.ctx, NOTIFY_GENERIC, c"del", name);
        }
        let field = OwnedString::new(self.ctx, field.as_bytes())?;
        emit(self.ctx, c"HDEL", &[name.as_str(), field.as_str()]);
        Ok(true)
    }

    /// The facts of the queue's `meta` hash, `key`: from the cache while the hash is unchanged.
    fn cached_meta(&self, key: &Key<'_>) -> Result<MetaFacts, EmqError> {
        let generation = meta_cache::generation();
        let len = key.len();
        let flags = Flags::of(self.ctx);
        let cacheable =
            !flags.has_any(CACHE_UNSAFE) && (flags.primary() || meta_cache::hash_writes_are_seen());
        let id = (selected_db(self.ctx), self.names.queue.as_bytes().to_vec());
        if cacheable {
            if let Some(facts) = meta_cache::lookup(&id, generation, len) {
                return Ok(facts);
            }
        }
        let facts = read_meta(key)?;
        if cacheable {
            meta_cache::remember(id, generation, len, facts.clone());
        }
        Ok(facts)
    }
}

/// Every fact of an open `meta` hash.
fn read_meta(key: &Key<'_>) -> Result<MetaFacts, EmqError> {
    Ok(match key.hash_fields(META_WALK) {
        // A hash of a few fields (the usual one): one walk reads them all.
        Some(fields) => {
            let mut facts = MetaFacts::default();
            for (name, value) in fields {
                if let Some(f) = Meta::ALL.iter().find(|f| f.as_bytes() == name) {
                    facts[f.index()] = Some(value);
                }
            }
            facts
        }
        None => {
            let words = words()?;
            Meta::ALL.map(|f| key.hash_get(words.meta(f)).map(|v| v.bytes().to_vec()))
        }
    })
}
