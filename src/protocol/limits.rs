//! A queue's limits (protocol.md §9): how many of its jobs may be active at once, how many claims
//! any window of a given length may hold, and how long one attempt may run. All live in the
//! queue's `meta` hash; the rate limit's window is the queue's `rate` zset, one member a claim.
//!
//! The rate limit is a **sliding log**: a claim at `t` is allowed while fewer than `n` claims
//! were made in `(t - per, t]`. Unlike a fixed window it allows no burst at a window's edge,
//! and unlike a token bucket it lets a batch of up to `n` go at once, exactly.

/// Most jobs a concurrency limit allows active at once.
pub const MAX_CONCURRENCY: i64 = 1_000_000;
/// Most claims a rate limit allows in one window: the window's zset holds at most this many
/// members, and a claim trims at most this many.
pub const MAX_RATE: i64 = 10_000;
/// Longest rate window, in ms: a day.
pub const MAX_PER_MS: i64 = 86_400_000;
/// Longest limit on one attempt, in ms: a year (`emq`'s longest duration).
pub const MAX_TIMEOUT_MS: i64 = super::settings::MAX_DURATION_MS;

/// `RATE <n> PER <ms>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub n: i64,
    pub per_ms: i64,
}

impl Rate {
    /// `RATE <n> PER <ms>` from its two values as stored; `None` where either is missing or out
    /// of bounds.
    pub fn from_meta(n: Option<&[u8]>, per: Option<&[u8]>) -> Option<Rate> {
        match (bounded(n, MAX_RATE), bounded(per, MAX_PER_MS)) {
            (Some(n), Some(per_ms)) => Some(Rate { n, per_ms }),
            _ => None,
        }
    }
}

/// The limits a queue has (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub concurrency: Option<i64>,
    pub rate: Option<Rate>,
    /// The limit on one attempt of a job without one of its own, in ms.
    pub timeout: Option<i64>,
    /// Whether a job of the queue may carry a deadline (the `meta` flag `timed`).
    pub timed: bool,
    /// Whether the queue routes its ready jobs by group (the `meta` flag `groups`).
    pub grouped: bool,
    /// How many jobs of one group may be active at once, for a group without its own limit.
    pub group_concurrency: Option<i64>,
    /// The rate limit of each group without its own.
    pub group_rate: Option<Rate>,
}

/// The `meta` fields' values the limits are read from, each as it was (`None`: no field).
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaLimits<'a> {
    pub concurrency: Option<&'a [u8]>,
    pub rate: Option<&'a [u8]>,
    pub per: Option<&'a [u8]>,
    pub timeout: Option<&'a [u8]>,
    pub timed: Option<&'a [u8]>,
    pub groups: Option<&'a [u8]>,
    pub group_concurrency: Option<&'a [u8]>,
    pub group_rate: Option<&'a [u8]>,
    pub group_per: Option<&'a [u8]>,
}

/// A positive whole number up to `max`, as a `meta` or row field holds it.
pub fn bounded(v: Option<&[u8]>, max: i64) -> Option<i64> {
    v.and_then(|b| std::str::from_utf8(b).ok()?.parse::<i64>().ok())
        .filter(|n| (1..=max).contains(n))
}

impl Limits {
    /// No claim limit (a timeout limits no claim).
    pub fn is_none(&self) -> bool {
        self.concurrency.is_none() && self.rate.is_none()
    }

    /// Reads the limits from their `meta` fields' values; a value outside its bounds (written
    /// by hand) counts as no limit.
    pub fn from_meta(meta: MetaLimits<'_>) -> Limits {
        Limits {
            concurrency: bounded(meta.concurrency, MAX_CONCURRENCY),
            rate: Rate::from_meta(meta.rate, meta.per),
            timeout: bounded(meta.timeout, MAX_TIMEOUT_MS),
            timed: meta.timed.is_some(),
            grouped: meta.groups.is_some(),
            group_concurrency: bounded(meta.group_concurrency, MAX_CONCURRENCY),
            group_rate: Rate::from_meta(meta.group_rate, meta.group_per),
        }
    }

    /// How many more jobs a claim may take, given `active` jobs and `in_window` claims in the
    /// rate window (`usize::MAX` without limits).
    pub fn room(&self, active: u64, in_window: u64) -> usize {
        let left = |limit: i64, used: u64| {
            usize::try_from((limit as u64).saturating_sub(used)).unwrap_or(usize::MAX)
        };
        let by_concurrency = self.concurrency.map_or(usize::MAX, |n| left(n, active));
        let by_rate = self.rate.map_or(usize::MAX, |r| left(r.n, in_window));
        by_concurrency.min(by_rate)
    }
}

/// The rate window's member for a claim: `<id>:<attempt>`, unique to the claim (each claim of
/// a job raises its attempt).
pub fn rate_member(id: &[u8], attempt: i64) -> Vec<u8> {
    let mut m = Vec::with_capacity(id.len() + 21);
    m.extend_from_slice(id);
    m.push(b':');
    m.extend_from_slice(attempt.to_string().as_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_the_tighter_limit() {
        let none = Limits::default();
        assert_eq!(none.room(5, 5), usize::MAX);
        let l = Limits {
            concurrency: Some(3),
            rate: Some(Rate {
                n: 10,
                per_ms: 1000,
            }),
            ..Limits::default()
        };
        assert_eq!(l.room(0, 0), 3);
        assert_eq!(l.room(2, 0), 1);
        assert_eq!(
            l.room(5, 0),
            0,
            "over the limit (lowered) is no room, not negative"
        );
        assert_eq!(l.room(0, 9), 1);
        assert_eq!(l.room(0, 10), 0);
    }

    #[test]
    fn values_out_of_bounds_are_no_limit() {
        let meta = |concurrency, rate, per| MetaLimits {
            concurrency,
            rate,
            per,
            ..MetaLimits::default()
        };
        let l = Limits::from_meta(meta(Some(b"0"), Some(b"5"), None));
        assert!(l.is_none(), "0 and a rate without its window are no limit");
        let l = Limits::from_meta(meta(Some(b"x"), Some(b"5"), Some(b"1000")));
        assert_eq!(l.concurrency, None);
        assert_eq!(l.rate, Some(Rate { n: 5, per_ms: 1000 }));
        assert!(Limits::from_meta(meta(None, Some(b"10001"), Some(b"1"))).is_none());
        let timed = Limits::from_meta(MetaLimits {
            timeout: Some(b"0"),
            timed: Some(b"1"),
            ..MetaLimits::default()
        });
        assert_eq!(
            (timed.timeout, timed.timed),
            (None, true),
            "0 is no timeout"
        );
    }

    #[test]
    fn each_meta_fact_has_its_place() {
        use crate::protocol::Meta;
        for (i, m) in Meta::ALL.iter().enumerate() {
            assert_eq!(m.index(), i, "{m:?}");
        }
    }

    #[test]
    fn a_claims_window_member_names_its_attempt() {
        assert_eq!(rate_member(b"JOB0abc", 12), b"JOB0abc:12");
    }
}
