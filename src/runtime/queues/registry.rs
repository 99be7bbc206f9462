//! The registry of known queues, per database, in name order: pure, with no server types.
//! A queue is known while it has keys of its own, or lingers while a job row with a time to
//! live may remain (docs/architecture.md, "The queues a node holds").

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::protocol::KeyType;

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
    /// A key of queue `name`, of type `ty`, seen by a scan as of `now`, expiring at
    /// `expires`: a set, hash or stream makes the queue present, a row holds it until it runs
    /// out, a row without an expiry holds nothing (it belongs to no set), and a key whose time
    /// ran out counts for nothing.
    pub fn learn_key(&mut self, db: i32, name: &[u8], ty: KeyType, expires: Option<i64>, now: i64) {
        match (ty, expires) {
            (_, Some(at)) if at <= now => {}
            (KeyType::Job, Some(at)) => self.row_until(db, name, at),
            (KeyType::Job, None) => {}
            _ => self.present(db, name),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads every name a page may hold.
    const MAX_READ: usize = usize::MAX;

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
}
