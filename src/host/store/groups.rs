//! A store's writes to one zset key, whichever it is (a set or a named group's), and the keys of
//! named groups, named at run time and opened for one operation each.

use crate::protocol::{group_key, EmqError, Group};

use super::super::acl::Access;
use super::super::key::Key;
use super::super::propagate::{emit, notify, NOTIFY_GENERIC, NOTIFY_ZSET};
use super::super::string::{OwnedString, Text};
use super::super::words::words;
use super::ServerStore;

impl<'s, 'a> ServerStore<'s, 'a> {
    /// The key name of group `group` (a name the caller parsed; `Internal` otherwise).
    pub(super) fn group_name(&self, group: &[u8]) -> Result<OwnedString, EmqError> {
        let group = Group::parse(group).ok_or(EmqError::Internal)?;
        OwnedString::new(self.ctx, &group_key(self.queue(), group))
    }

    /// `f` over group `group`'s key, open as the store's sets are, and a zset or missing
    /// (`WRONGTYPE`).
    pub(super) fn with_group<R>(
        &self,
        group: &[u8],
        f: impl FnOnce(&Key<'_>) -> Result<R, EmqError>,
    ) -> Result<R, EmqError> {
        let name = self.group_name(group)?;
        let key = match self.access {
            Access::Read => Key::open_read(self.ctx, &name)?,
            Access::ReadWrite => Key::open(self.ctx, &name)?,
        };
        key.expect_zset()?;
        f(&key)
    }

    /// `ZADD key score member`: no event and no effect when the member had that score.
    pub(super) fn zadd_to(
        &self,
        key: &Key<'_>,
        score: i64,
        member: &Text<'a>,
    ) -> Result<(), EmqError> {
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

    /// `ZREM key member ...` of the members that are there: one `zrem` event (and `del` when
    /// the key is left empty) and one variadic effect; whether each was there.
    pub(super) fn zrem_from(
        &self,
        key: &Key<'_>,
        members: &[&Text<'a>],
    ) -> Result<Vec<bool>, EmqError> {
        if members.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = Vec::with_capacity(1 + members.len());
        args.push(key.name().as_str());
        let mut there = Vec::with_capacity(members.len());
        for member in members {
            let removed = key.zrem(member.as_str())?;
            if removed {
                args.push(member.as_str());
            }
            there.push(removed);
        }
        if args.len() > 1 {
            notify(self.ctx, NOTIFY_ZSET, c"zrem", key.name());
            if key.is_empty() {
                notify(self.ctx, NOTIFY_GENERIC, c"del", key.name());
            }
            emit(self.ctx, c"ZREM", &args);
        }
        Ok(there)
    }
}
