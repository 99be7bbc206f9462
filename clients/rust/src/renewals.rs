//! When a running job's lease is renewed: at a regular interval, and just after a lease that
//! ends sooner (an attempt's deadline caps it), backing off when the answer does not move, so
//! a server clock behind this host's cannot make the renewals spin. Pure, so tested here.

use std::time::Duration;

/// The first wait past a lease's end before a job is renewed early (see [`Renewals`]).
const LATE_RENEWAL: Duration = Duration::from_millis(10);

/// When one job's renewals come: every `every`, and early, just after its lease ends, when a
/// renewal answers that it ends sooner than that, as it does when the attempt's deadline caps
/// it: the renewal that learns of the deadline comes as it passes. A server clock behind this
/// host's answers the same end again and again; each early renewal of the job waits twice as
/// long past it as the one before ([`LATE_RENEWAL`] first), and once that would pass the next
/// regular renewal the job has only those: a skewed clock costs a few renewals a job, not ten
/// times as many for as long as it runs.
pub(crate) struct Renewals {
    every: Duration,
    /// Early renewals of this job so far.
    early: u32,
}

impl Renewals {
    pub(crate) fn new(every: Duration) -> Self {
        Renewals { every, early: 0 }
    }

    /// How long after a renewal to renew again, the lease ending at `ends_ms` (Unix ms, as the
    /// renewal answered; `None` when it did not) and this host's clock at `now_ms`.
    pub(crate) fn after(&mut self, ends_ms: Option<i64>, now_ms: i64) -> Duration {
        let Some(ends_ms) = ends_ms else {
            return self.every;
        };
        let left = Duration::from_millis(ends_ms.saturating_sub(now_ms).max(0) as u64);
        let late = 1u32
            .checked_shl(self.early)
            .map_or(Duration::MAX, |n| LATE_RENEWAL.saturating_mul(n));
        let wait = left.saturating_add(late);
        if wait >= self.every {
            return self.every;
        }
        self.early += 1;
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_capped_by_its_deadline_is_renewed_as_it_ends() {
        let every = Duration::from_millis(1000);
        let mut schedule = Renewals::new(every);
        // A lease a renewal carried on a whole lease: the next renewal is the usual one.
        assert_eq!(schedule.after(Some(13_000), 10_000), every);
        assert_eq!(schedule.after(None, 10_000), every);
        // Capped by the deadline 400 ms away: renewed just after it, to learn of it.
        assert_eq!(
            schedule.after(Some(10_400), 10_000),
            Duration::from_millis(410)
        );
        // The same end answered again (the server's clock a little behind): twice as late.
        assert_eq!(
            schedule.after(Some(10_400), 10_410),
            Duration::from_millis(20)
        );
        // An end that would come after the next regular renewal: that one.
        assert_eq!(schedule.after(Some(10_400), 9_000), every);
    }

    #[test]
    fn a_server_clock_far_behind_costs_a_job_a_few_early_renewals_then_none() {
        // This host's clock ahead of the server's by more than the lease: each renewal answers
        // an end already past here.
        let every = Duration::from_millis(1000);
        let lease_ms = 3000;
        let mut schedule = Renewals::new(every);
        let mut now_ms = 1_000_000;
        let mut waits = Vec::new();
        for _ in 0..20 {
            let wait = schedule.after(Some(now_ms - lease_ms - 1), now_ms);
            waits.push(wait.as_millis());
            now_ms += wait.as_millis() as i64;
        }
        // 10, 20, ... ms past the end, each twice the last, until the next would pass the
        // regular renewal; then only those, for as long as the job runs.
        assert_eq!(waits[..7], [10, 20, 40, 80, 160, 320, 640]);
        assert_eq!(waits[7..], [1000; 13]);
    }

    #[test]
    fn early_renewals_back_off_until_they_would_pass_the_regular_one() {
        // The deadline's cap, then the same end answered again: the early waits past it double,
        // and a job that used them up is left to the regular renewals, even near a deadline.
        let every = Duration::from_millis(100);
        let mut schedule = Renewals::new(every);
        let early: Vec<u128> = (0..5)
            .map(|_| schedule.after(Some(500), 500).as_millis())
            .collect();
        assert_eq!(early, [10, 20, 40, 80, 100]);
        assert_eq!(schedule.after(Some(510), 500), every);
        // A renewal interval under the first late wait: never early.
        let mut tiny = Renewals::new(Duration::from_millis(5));
        assert_eq!(tiny.after(Some(500), 500), Duration::from_millis(5));
        // However many came, the doubling does not overflow.
        let mut many = Renewals { every, early: 200 };
        assert_eq!(many.after(Some(500), 500), every);
    }
}
