//! Keys of the grammar that the command filter saw a command about to write: looked for once
//! the command ran, for a while, to learn queues no subscribed event reports.

use std::collections::BTreeMap;

/// How long a key the command filter noted is looked for: its command may wait, queued in a
/// transaction or postponed while writes are paused, before it runs.
pub const NOTED_FOR_MS: i64 = 10_000;
/// Most keys noted at once; more are not noted until some are settled.
const MAX_NOTED: usize = 4096;

/// Keys of the grammar that a command was about to write, with the database it runs in
/// (`None`: not known, a script's), each with when it was noted.
#[derive(Default)]
pub struct Noted {
    keys: BTreeMap<(Option<i32>, Vec<u8>), i64>,
}

impl Noted {
    pub const fn new() -> Noted {
        Noted {
            keys: BTreeMap::new(),
        }
    }

    /// Notes `key` of `db` at `now`; whether there was room.
    pub fn note(&mut self, db: Option<i32>, key: &[u8], now: i64) -> bool {
        let entry = (db, key.to_vec());
        if self.keys.contains_key(&entry) {
            return true;
        }
        if self.keys.len() >= MAX_NOTED {
            return false;
        }
        self.keys.insert(entry, now);
        true
    }

    /// The keys noted, with their database.
    pub fn keys(&self) -> Vec<(Option<i32>, Vec<u8>)> {
        self.keys.keys().cloned().collect()
    }

    /// Stops looking for `key` of `db`.
    pub fn settle(&mut self, db: Option<i32>, key: &[u8]) {
        self.keys.remove(&(db, key.to_vec()));
    }

    /// Stops looking for the keys noted [`NOTED_FOR_MS`] or longer before `now`.
    pub fn expire(&mut self, now: i64) {
        self.keys.retain(|_, at| now - *at < NOTED_FOR_MS);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_keys_are_bounded_and_looked_for_a_while() {
        let mut n = Noted::new();
        assert!(n.note(Some(0), b"emq:{a}:meta", 0));
        assert!(n.note(Some(0), b"emq:{a}:meta", 5), "once");
        assert!(n.note(None, b"emq:{a}:meta", 5));
        assert_eq!(n.len(), 2);
        n.settle(None, b"emq:{a}:meta");
        assert_eq!(n.keys(), vec![(Some(0), b"emq:{a}:meta".to_vec())]);
        n.expire(NOTED_FOR_MS - 1);
        assert_eq!(n.len(), 1);
        n.expire(NOTED_FOR_MS);
        assert!(n.is_empty());
        for i in 0..MAX_NOTED {
            assert!(n.note(Some(0), format!("k{i}").as_bytes(), 0));
        }
        assert!(!n.note(Some(0), b"one too many", 0));
    }
}
