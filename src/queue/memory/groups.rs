//! [`Memory`]'s named groups (`group:<g>`): each a zset of its own, written with the effects a
//! replica would receive.

use std::collections::BTreeMap;

use crate::protocol::{EmqError, Group, Removed};

use super::{text, MemKey, Memory};

/// Each named group's members and scores.
pub type Groups = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, f64>>;

impl Memory {
    fn group_checked(&self, group: &[u8]) -> Result<(), EmqError> {
        Group::parse(group).ok_or(EmqError::Internal)?;
        match self.other.borrow().contains(&MemKey::Group(group.to_vec())) {
            true => Err(EmqError::WrongType),
            false => Ok(()),
        }
    }

    /// A group's members, lowest first, with their scores.
    pub fn group_members(&self, group: &[u8]) -> Vec<(Vec<u8>, f64)> {
        let mut all: Vec<(Vec<u8>, f64)> = self
            .groups
            .borrow()
            .get(group)
            .map(|g| g.iter().map(|(m, s)| (m.clone(), *s)).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        all
    }

    pub(super) fn mem_group_len(&self, group: &[u8]) -> Result<u64, EmqError> {
        self.group_checked(group)?;
        Ok(self
            .groups
            .borrow()
            .get(group)
            .map_or(0, |g| g.len() as u64))
    }

    pub(super) fn mem_group_range(
        &self,
        group: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, f64)>, EmqError> {
        self.group_checked(group)?;
        let mut all = self.group_members(group);
        all.truncate(limit);
        Ok(all)
    }

    pub(super) fn mem_group_score(
        &self,
        group: &[u8],
        member: &[u8],
    ) -> Result<Option<f64>, EmqError> {
        self.group_checked(group)?;
        Ok(self
            .groups
            .borrow()
            .get(group)
            .and_then(|g| g.get(member))
            .copied())
    }

    pub(super) fn mem_group_add(
        &self,
        group: &[u8],
        score: i64,
        member: &[u8],
    ) -> Result<(), EmqError> {
        self.group_checked(group)?;
        let old = self
            .groups
            .borrow_mut()
            .entry(group.to_vec())
            .or_default()
            .insert(member.to_vec(), score as f64);
        if old != Some(score as f64) {
            self.log(format!(
                "ZADD group:{} {score} {}",
                text(group),
                text(member)
            ));
        }
        Ok(())
    }

    pub(super) fn mem_group_remove(
        &self,
        group: &[u8],
        members: &[&Vec<u8>],
    ) -> Result<Removed, EmqError> {
        self.group_checked(group)?;
        let mut groups = self.groups.borrow_mut();
        let there: Vec<bool> = match groups.get_mut(group) {
            Some(g) => members.iter().map(|m| g.remove(*m).is_some()).collect(),
            None => vec![false; members.len()],
        };
        if groups.get(group).is_some_and(|g| g.is_empty()) {
            groups.remove(group);
        }
        drop(groups);
        self.log_removed(&format!("group:{}", text(group)), members, &there);
        Ok((there, self.mem_group_len(group)?))
    }
}
