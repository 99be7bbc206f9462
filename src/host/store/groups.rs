//! A store's writes to one zset key, whichever it is (a set or a named group's), and the keys of
//! named groups, named at run time and opened once a call.

use std::cell::RefCell;
use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::protocol::{group_key, EmqError, Group};

use super::super::acl::Access;
use super::super::key::Key;
use super::super::propagate::{emit, notify, NOTIFY_GENERIC, NOTIFY_ZSET};
use super::super::string::{OwnedString, Text};
use super::super::words::words;
use super::ServerStore;

/// The named groups' keys a call opened, by group name: a claim from many groups reads, checks
/// and writes each group's key through one open. Every group key of the queue is opened through
/// here, so no other handle of the call changes one behind another's back.
pub(super) type OpenGroups<'s> = RefCell<FxHashMap<Vec<u8>, Rc<Key<'s>>>>;

/// A group key's name for an ACL check: held by its open key, or made for the check.
pub(super) enum GroupName<'s> {
    Open(Rc<Key<'s>>),
    Made(OwnedString),
}

impl AsRef<OwnedString> for GroupName<'_> {
    fn as_ref(&self) -> &OwnedString {
        match self {
            GroupName::Open(key) => key.name(),
            GroupName::Made(name) => name,
        }
    }
}

impl<'s, 'a> ServerStore<'s, 'a> {
    /// Group `group`'s key (a name the caller parsed; `Internal` otherwise), open as the
    /// store's sets are, and a zset or missing (`WRONGTYPE`): opened at its first use in the
    /// call.
    pub(super) fn group_key(&self, group: &[u8]) -> Result<Rc<Key<'s>>, EmqError> {
        if let Some(key) = self.groups.borrow().get(group) {
            return Ok(Rc::clone(key));
        }
        let parsed = Group::parse(group).ok_or(EmqError::Internal)?;
        let name = OwnedString::new(self.ctx, &group_key(self.queue(), parsed))?;
        let key = Key::open_owned(self.ctx, name, self.access == Access::ReadWrite)?;
        key.expect_zset()?;
        let key = Rc::new(key);
        self.groups
            .borrow_mut()
            .insert(group.to_vec(), Rc::clone(&key));
        Ok(key)
    }

    /// The name of group `group`'s key: its open key's, or one made (the key left unopened).
    pub(super) fn group_key_name(&self, group: &[u8]) -> Result<GroupName<'s>, EmqError> {
        if let Some(key) = self.groups.borrow().get(group) {
            return Ok(GroupName::Open(Rc::clone(key)));
        }
        let parsed = Group::parse(group).ok_or(EmqError::Internal)?;
        OwnedString::new(self.ctx, &group_key(self.queue(), parsed)).map(GroupName::Made)
    }

    /// `f` over group `group`'s key ([`Self::group_key`]).
    pub(super) fn with_group<R>(
        &self,
        group: &[u8],
        f: impl FnOnce(&Key<'_>) -> Result<R, EmqError>,
    ) -> Result<R, EmqError> {
        f(&*self.group_key(group)?)
    }

    /// `ZADD key score member ...`, into a small set greatest first: one event and one variadic
    /// effect.
    pub(super) fn zadd_many(
        &self,
        key: &Key<'_>,
        members: &[(i64, &Text<'a>)],
    ) -> Result<(), EmqError> {
        if members.is_empty() {
            return Ok(());
        }
        // A small zset is a listpack, and the server walks it from its head to each new member's
        // place: the batch's greatest first stops each walk where the batch begins, not past it.
        // A larger one is a skiplist, where the order costs nothing and sorting would.
        let sorted;
        let members = match key.len().saturating_add(members.len() as u64) <= LISTPACK_MEMBERS {
            true => {
                sorted = greatest_first(members);
                &sorted[..]
            }
            false => members,
        };
        let zero = words()?.zero;
        // The scores other than 0 (a priority, a claim's time), made as strings for the effect,
        // one for each run of equal scores.
        let mut scores: Vec<(i64, OwnedString)> = Vec::new();
        for &(score, _) in members {
            if score != 0 && scores.last().is_none_or(|(last, _)| *last != score) {
                scores.push((score, OwnedString::from_i64(self.ctx, score)?));
            }
        }
        let mut scores = scores.iter().peekable();
        let mut args = Vec::with_capacity(1 + members.len() * 2);
        args.push(key.name().as_str());
        for &(score, member) in members {
            key.zadd(score as f64, member.as_str())?;
            if score == 0 {
                args.push(zero);
            } else {
                while scores.peek().is_some_and(|(s, _)| *s != score) {
                    scores.next();
                }
                args.push(scores.peek().ok_or(EmqError::Internal)?.1.as_str());
            }
            args.push(member.as_str());
        }
        notify(self.ctx, NOTIFY_ZSET, c"zadd", key.name());
        emit(self.ctx, c"ZADD", &args);
        Ok(())
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

/// The most members a zset keeps as a listpack: the server's default
/// `zset-max-listpack-entries`. Another setting only moves where the sort stops paying.
const LISTPACK_MEMBERS: u64 = 128;

/// `members` as one `ZADD` would leave them, greatest first (by score, then member, the set's
/// own order): a member given twice keeps its last score, as a native `ZADD`'s would.
fn greatest_first<'m, T: AsMember>(members: &[(i64, &'m T)]) -> Vec<(i64, &'m T)> {
    let mut given: Vec<(usize, i64, &T)> = members
        .iter()
        .enumerate()
        .map(|(at, &(score, member))| (at, score, member))
        .collect();
    given.sort_unstable_by(|a, b| b.2.member().cmp(a.2.member()).then(b.0.cmp(&a.0)));
    given.dedup_by(|later, kept| later.2.member() == kept.2.member());
    given.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| b.2.member().cmp(a.2.member())));
    given
        .into_iter()
        .map(|(_, score, member)| (score, member))
        .collect()
}

/// A zset member's bytes.
trait AsMember {
    fn member(&self) -> &[u8];
}

impl AsMember for Text<'_> {
    fn member(&self) -> &[u8] {
        self.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::{greatest_first, AsMember};

    impl AsMember for &str {
        fn member(&self) -> &[u8] {
            self.as_bytes()
        }
    }

    fn order<'m>(given: &[(i64, &'m &'m str)]) -> Vec<(i64, &'m str)> {
        greatest_first(given)
            .into_iter()
            .map(|(s, m)| (s, *m))
            .collect()
    }

    #[test]
    fn a_batch_goes_in_greatest_first_by_score_then_member() {
        let (a, b, c, d, e) = (&"a", &"b", &"c", &"d", &"e");
        assert_eq!(
            order(&[(0, a), (0, c), (5, b), (0, e), (5, d)]),
            vec![(5, "d"), (5, "b"), (0, "e"), (0, "c"), (0, "a")]
        );
    }

    #[test]
    fn a_member_given_twice_keeps_its_last_score_as_a_native_zadd_would() {
        let (a, b) = (&"a", &"b");
        assert_eq!(
            order(&[(1, a), (9, b), (3, a), (2, b), (7, a)]),
            vec![(7, "a"), (2, "b")]
        );
        assert_eq!(order(&[(4, a), (4, a)]), vec![(4, "a")]);
    }
}
