//! The queues the timer watches, each with the time of its next visit, kept in two orders: by
//! queue, to update one, and by visit time, so that a tick finds what is due without reading
//! the queues that are not. A tick then costs the visits it makes, however many queues wait
//! on jobs due later.

use std::collections::{BTreeMap, BTreeSet};

/// A watched queue: its database and its name.
pub type Watched = (i32, Vec<u8>);

/// Queues with their next visit time (unix ms; 0: at the next tick).
#[derive(Default)]
pub struct Watchlist {
    by_queue: BTreeMap<Watched, i64>,
    by_time: BTreeSet<(i64, Watched)>,
}

impl Watchlist {
    pub const fn new() -> Watchlist {
        Watchlist {
            by_queue: BTreeMap::new(),
            by_time: BTreeSet::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }

    /// Visits `queue` of `db` at `at`, watching it if it was not.
    pub fn visit_at(&mut self, db: i32, queue: &[u8], at: i64) {
        let key = (db, queue.to_vec());
        match self.by_queue.get_mut(&key) {
            Some(old) if *old == at => {}
            Some(old) => {
                let mut entry = (std::mem::replace(old, at), key);
                self.by_time.remove(&entry);
                entry.0 = at;
                self.by_time.insert(entry);
            }
            None => {
                self.by_queue.insert(key.clone(), at);
                self.by_time.insert((at, key));
            }
        }
    }

    /// Visits `queue` of `db` by `at`: watches it from then if it was not, and brings its
    /// visit forward if it was due later (a visit due sooner stays).
    pub fn visit_by(&mut self, db: i32, queue: &[u8], at: i64) {
        let key = (db, queue.to_vec());
        if self.by_queue.get(&key).is_some_and(|old| *old <= at) {
            return;
        }
        self.visit_at(db, queue, at);
    }

    /// Stops watching `queue` of `db`.
    pub fn forget(&mut self, db: i32, queue: &[u8]) {
        let key = (db, queue.to_vec());
        if let Some(at) = self.by_queue.remove(&key) {
            self.by_time.remove(&(at, key));
        }
    }

    /// Up to `max` queues whose visit time has come by `now`, the longest waiting first.
    pub fn due(&self, now: i64, max: usize) -> Vec<Watched> {
        self.by_time
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(max)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// How many queues' visit time has come by `now`.
    /// The earliest time a watched queue is to be visited at (0 for one due now).
    pub fn earliest(&self) -> Option<i64> {
        self.by_time.first().map(|(at, _)| *at)
    }

    pub fn due_count(&self, now: i64) -> usize {
        self.by_time.iter().take_while(|(at, _)| *at <= now).count()
    }

    /// Visits every watched queue at the next tick.
    pub fn revisit_all(&mut self) {
        let queues: Vec<Watched> = self.by_queue.keys().cloned().collect();
        for (db, queue) in queues {
            self.visit_at(db, &queue, 0);
        }
    }

    pub fn clear(&mut self) {
        self.by_queue.clear();
        self.by_time.clear();
    }

    /// Stops watching every queue of `db` (every queue for -1): the database was emptied.
    pub fn forget_db(&mut self, db: i32) {
        self.by_queue.retain(|(d, _), _| db != -1 && *d != db);
        self.by_time.retain(|(_, (d, _))| db != -1 && *d != db);
    }

    /// `SWAPDB a b`: the queues watched in each database now live in the other.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        let swapped = |d: i32| match d {
            d if d == a => b,
            d if d == b => a,
            d => d,
        };
        let entries = std::mem::take(&mut self.by_queue);
        self.by_time.clear();
        for ((db, queue), at) in entries {
            let key = (swapped(db), queue);
            self.by_time.insert((at, key.clone()));
            self.by_queue.insert(key, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &Watchlist, now: i64, max: usize) -> Vec<(i32, String)> {
        list.due(now, max)
            .into_iter()
            .map(|(db, q)| (db, String::from_utf8_lossy(&q).into_owned()))
            .collect()
    }

    #[test]
    fn due_queues_come_earliest_first_and_later_ones_wait() {
        let mut list = Watchlist::new();
        list.visit_at(0, b"later", 500);
        list.visit_at(0, b"soon", 100);
        list.visit_at(1, b"now", 0);
        assert_eq!(list.len(), 3);
        assert_eq!(names(&list, 99, 10), vec![(1, "now".to_string())]);
        assert_eq!(
            names(&list, 100, 10),
            vec![(1, "now".to_string()), (0, "soon".to_string())]
        );
        assert_eq!(names(&list, 1000, 2).len(), 2);
        assert_eq!(list.due_count(99), 1);
        assert_eq!(list.due_count(100), 2);
        assert_eq!(list.due_count(1000), 3);
        assert_eq!(names(&list, 1000, 10).len(), 3);
    }

    #[test]
    fn a_new_visit_time_replaces_the_old_one() {
        let mut list = Watchlist::new();
        list.visit_at(0, b"q", 500);
        list.visit_at(0, b"q", 0);
        assert_eq!(list.len(), 1);
        assert_eq!(names(&list, 0, 10), vec![(0, "q".to_string())]);
        list.visit_at(0, b"q", 700);
        assert!(list.due(600, 10).is_empty(), "the earlier times are gone");
        assert_eq!(list.due(700, 10).len(), 1);
        list.forget(0, b"q");
        assert!(list.is_empty());
        assert!(list.due(i64::MAX, 10).is_empty());
    }

    #[test]
    fn a_visited_queue_goes_behind_those_still_waiting() {
        // More due than one tick visits: the queues left over come first at the next tick.
        let mut list = Watchlist::new();
        for q in [b"a", b"b", b"c"] {
            list.visit_at(0, q, 0);
        }
        let first = list.due(10, 2);
        for (db, q) in &first {
            list.visit_at(*db, q, 10);
        }
        assert_eq!(names(&list, 10, 1), vec![(0, "c".to_string())]);
    }

    #[test]
    fn every_queue_can_be_visited_again_at_once() {
        let mut list = Watchlist::new();
        list.visit_at(0, b"later", 500);
        list.visit_at(1, b"never", i64::MAX);
        assert!(list.due(100, 10).is_empty());
        list.revisit_all();
        assert_eq!(list.due(0, 10).len(), 2);
        assert_eq!(list.len(), 2);
    }

    #[test]
    fn flushing_a_database_forgets_its_queues() {
        let mut list = Watchlist::new();
        list.visit_at(0, b"q", 5);
        list.visit_at(1, b"q", 5);
        list.visit_at(2, b"r", 5);
        list.forget_db(1);
        assert_eq!(
            names(&list, 5, 10),
            vec![(0, "q".to_string()), (2, "r".to_string())]
        );
        list.forget_db(-1);
        assert!(list.is_empty());
        assert!(list.due(i64::MAX, 10).is_empty());
    }

    #[test]
    fn swapping_databases_moves_their_queues() {
        let mut list = Watchlist::new();
        list.visit_at(0, b"zero", 1);
        list.visit_at(1, b"one", 2);
        list.visit_at(2, b"two", 3);
        list.swap_dbs(0, 1);
        assert_eq!(
            names(&list, 10, 10),
            vec![
                (1, "zero".to_string()),
                (0, "one".to_string()),
                (2, "two".to_string())
            ]
        );
        list.visit_at(1, b"zero", 20);
        assert_eq!(list.len(), 3, "updated in its new database");
    }
}
