//! The queues the timer watches, each with the time of its next visit, kept in two orders: by
//! queue, to update one, and by visit time, so that a tick finds what is due without reading
//! the queues that are not. A tick then costs the visits it makes, however many queues wait
//! on jobs due later. Each queue's name is held once, shared by both orders, with what the
//! timer knows of its tables, so a queue costs the module one small entry while watched and
//! nothing after.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A watched queue: its database and its name.
pub type Watched = (i32, Arc<[u8]>);

/// What the timer last learned of a watched queue's `unique` and `cron` tables, so that a visit
/// reads a table only once it has work due there. A time of [`Tables::UNKNOWN`] is due at the
/// next visit; one of [`Tables::NEVER`], never (the queue has no such table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tables {
    /// Where the sweep of the `unique` table stands.
    pub sweep_cursor: u64,
    /// When the sweep's next step is due (unix ms).
    pub sweep_at: i64,
    /// When the next repeating job is due (unix ms).
    pub cron_at: i64,
}

impl Tables {
    pub const UNKNOWN: i64 = i64::MIN;
    pub const NEVER: i64 = i64::MAX;
    /// Nothing known: both tables are read at the next visit.
    pub const UNREAD: Tables = Tables {
        sweep_cursor: 0,
        sweep_at: Tables::UNKNOWN,
        cron_at: Tables::UNKNOWN,
    };
}

/// Queues with their next visit time (unix ms; 0: at the next tick) and their tables, and
/// those whose visit was refused, held off until their retry.
#[derive(Default)]
pub struct Watchlist {
    by_queue: BTreeMap<Watched, (i64, Tables)>,
    by_time: BTreeSet<(i64, Watched)>,
    held_off: BTreeSet<Watched>,
}

fn watched(db: i32, queue: &[u8]) -> Watched {
    (db, Arc::from(queue))
}

impl Watchlist {
    pub const fn new() -> Watchlist {
        Watchlist {
            by_queue: BTreeMap::new(),
            by_time: BTreeSet::new(),
            held_off: BTreeSet::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }

    /// Visits `queue` of `db` at `at`, watching it if it was not (its tables unread); a queue
    /// held off is so no more.
    pub fn visit_at(&mut self, db: i32, queue: &[u8], at: i64) {
        let key = watched(db, queue);
        if !self.held_off.is_empty() {
            self.held_off.remove(&key);
        }
        match self.by_queue.get_mut(&key) {
            Some((old, _)) if *old == at => {}
            Some((old, _)) => {
                let was = std::mem::replace(old, at);
                // The entry's own name, shared with the time order.
                if let Some((_, name)) = self.by_time.take(&(was, key)) {
                    self.by_time.insert((at, name));
                }
            }
            None => {
                self.by_queue.insert(key.clone(), (at, Tables::UNREAD));
                self.by_time.insert((at, key));
            }
        }
    }

    /// Visits `queue` of `db` by `at`: watches it from then if it was not, and brings its
    /// visit forward if it was due later (a visit due sooner stays).
    pub fn visit_by(&mut self, db: i32, queue: &[u8], at: i64) {
        if self
            .by_queue
            .get(&watched(db, queue))
            .is_some_and(|(old, _)| *old <= at)
        {
            return;
        }
        self.visit_at(db, queue, at);
    }

    /// Visits `queue` of `db` at `at`, a retry after a refused visit: until then (or another
    /// visit is asked for by [`Watchlist::visit_at`]), [`Watchlist::visit_by_polled`] leaves it be.
    pub fn hold_off(&mut self, db: i32, queue: &[u8], at: i64) {
        self.visit_at(db, queue, at);
        self.held_off.insert(watched(db, queue));
    }

    /// As [`Watchlist::visit_by`], for a poll of the queue's heads (`waiters`), which reads the
    /// same heads again and again: a queue held off keeps its retry.
    pub fn visit_by_polled(&mut self, db: i32, queue: &[u8], at: i64) {
        if !self.held_off.contains(&watched(db, queue)) {
            self.visit_by(db, queue, at);
        }
    }

    /// Stops watching `queue` of `db`, and forgets its tables.
    pub fn forget(&mut self, db: i32, queue: &[u8]) {
        let key = watched(db, queue);
        self.held_off.remove(&key);
        if let Some((at, _)) = self.by_queue.remove(&key) {
            self.by_time.remove(&(at, key));
        }
    }

    /// What is known of the tables of `queue` of `db` ([`Tables::UNREAD`] if it is not
    /// watched).
    pub fn tables(&self, db: i32, queue: &[u8]) -> Tables {
        self.by_queue
            .get(&watched(db, queue))
            .map_or(Tables::UNREAD, |(_, tables)| *tables)
    }

    /// Changes what is known of the tables of `queue` of `db`, if it is watched.
    pub fn update_tables(&mut self, db: i32, queue: &[u8], f: impl FnOnce(&mut Tables)) {
        if let Some((_, tables)) = self.by_queue.get_mut(&watched(db, queue)) {
            f(tables);
        }
    }

    /// Forgets what is known of every watched queue's tables: each is read at its next visit.
    pub fn unread_tables(&mut self) {
        for (_, tables) in self.by_queue.values_mut() {
            *tables = Tables::UNREAD;
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
        self.held_off.clear();
    }

    /// Stops watching every queue of `db` (every queue for -1): the database was emptied.
    pub fn forget_db(&mut self, db: i32) {
        self.by_queue.retain(|(d, _), _| db != -1 && *d != db);
        self.by_time.retain(|(_, (d, _))| db != -1 && *d != db);
        self.held_off.retain(|(d, _)| db != -1 && *d != db);
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
        let held_off = std::mem::take(&mut self.held_off);
        self.held_off = held_off
            .into_iter()
            .map(|(db, queue)| (swapped(db), queue))
            .collect();
        for ((db, queue), (at, tables)) in entries {
            let key = (swapped(db), queue);
            self.by_time.insert((at, key.clone()));
            self.by_queue.insert(key, (at, tables));
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
    fn a_queues_tables_are_kept_while_it_is_watched_and_forgotten_with_it() {
        let mut list = Watchlist::new();
        assert_eq!(list.tables(0, b"q"), Tables::UNREAD, "not watched");
        list.update_tables(0, b"q", |t| t.cron_at = 5);
        assert!(list.is_empty(), "nothing is kept for a queue not watched");
        list.visit_at(0, b"q", 10);
        assert_eq!(list.tables(0, b"q"), Tables::UNREAD);
        list.update_tables(0, b"q", |t| {
            *t = Tables {
                sweep_cursor: 7,
                sweep_at: Tables::NEVER,
                cron_at: 500,
            }
        });
        list.visit_at(0, b"q", 20);
        list.visit_by(0, b"q", 15);
        assert_eq!(list.tables(0, b"q").cron_at, 500, "kept across visits");
        assert_eq!(list.tables(0, b"q").sweep_cursor, 7);
        assert_eq!(list.tables(1, b"q"), Tables::UNREAD, "another database's");
        list.unread_tables();
        assert_eq!(list.tables(0, b"q"), Tables::UNREAD);
        list.update_tables(0, b"q", |t| t.cron_at = 9);
        list.forget(0, b"q");
        list.visit_at(0, b"q", 30);
        assert_eq!(
            list.tables(0, b"q"),
            Tables::UNREAD,
            "forgotten with the queue"
        );
        assert_eq!(names(&list, 30, 10), vec![(0, "q".to_string())]);
        assert_eq!(list.len(), 1);
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

    #[test]
    fn a_polled_head_brings_a_visit_forward_but_not_a_refused_visits_retry() {
        let mut list = Watchlist::new();
        list.visit_at(0, b"q", 500);
        list.visit_by_polled(0, b"q", 100);
        assert_eq!(list.earliest(), Some(100));
        // Refused: retried at 1,100 however often the poll reads a head due at 100.
        list.hold_off(0, b"q", 1_100);
        list.visit_by_polled(0, b"q", 100);
        assert_eq!(list.earliest(), Some(1_100));
        // Any other visit asked for ends the hold; so does forgetting the queue.
        list.visit_at(0, b"q", 900);
        list.visit_by_polled(0, b"q", 100);
        assert_eq!(list.earliest(), Some(100));
        list.hold_off(0, b"q", 1_100);
        list.forget(0, b"q");
        list.visit_by_polled(0, b"q", 200);
        assert_eq!(list.earliest(), Some(200));
        // A hold follows its queue through `SWAPDB`, and goes with its database's flush.
        list.hold_off(0, b"q", 1_100);
        list.swap_dbs(0, 1);
        list.visit_by_polled(1, b"q", 100);
        assert_eq!(list.earliest(), Some(1_100));
        list.forget_db(1);
        list.visit_by_polled(1, b"q", 300);
        assert_eq!(list.earliest(), Some(300));
    }
}
