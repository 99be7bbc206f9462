//! A queue's metrics, kept in the server's memory (docs/observability.md): a count of each event
//! and latency histograms with fixed buckets, in a fixed number of bytes per queue.

use super::branded_id::BrandedId;
use super::job::Event;

/// The buckets' upper bounds, in ms, from 1 ms to 1 h; a last bucket holds the rest.
pub const BUCKETS_MS: [u64; 20] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000,
    300_000, 600_000, 1_800_000, 3_600_000,
];

/// A duration past this is not counted: it measures from an id no EchoMQ client minted (a
/// hand-chosen id reads as a time in 2024), not a job's life.
pub const MAX_DURATION_MS: i64 = 30 * 24 * 3_600_000;

/// Every event a queue counts, in the order replies list them.
pub const EVENTS: [Event; 15] = [
    Event::Enqueued,
    Event::Scheduled,
    Event::Promoted,
    Event::Expired,
    Event::Claimed,
    Event::Acked,
    Event::Retrying,
    Event::Dead,
    Event::Cancelled,
    Event::Requeued,
    Event::Purged,
    Event::Paused,
    Event::Resumed,
    Event::Waiting,
    Event::Released,
];

/// How an attempt ended, as its run time is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Acked,
    /// Failed (by `EMQ.FAIL` or its lease run out), with attempts left.
    Failed,
    /// Failed on its last attempt.
    Dead,
    /// Ended by the server at its deadline, whether retried or dead.
    TimedOut,
    /// Ended by `EMQ.CANCEL` while it ran: not a run time.
    Cancelled,
}

impl Ended {
    /// The run-time histograms, in the order replies list them.
    pub const TIMED: [Ended; 4] = [Ended::Acked, Ended::Failed, Ended::Dead, Ended::TimedOut];

    pub fn name(self) -> &'static str {
        match self {
            Ended::Acked => "acked",
            Ended::Failed => "failed",
            Ended::Dead => "dead",
            Ended::TimedOut => "timed-out",
            Ended::Cancelled => "cancelled",
        }
    }
}

/// What a transition tells the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// An event of the event stream happened to a job (or to the queue).
    Event(Event),
    /// A job was claimed this long after it became ready.
    Wait(i64),
    /// An attempt ended this long after its claim.
    Run(Ended, i64),
    /// A job was acked this long after its id was minted.
    EndToEnd(i64),
    /// A transition wrote a row's `ready`: claims read it from then on.
    Readied,
}

/// A claim or an attempt's end as a transition tells it, by the job's id (`None`: a member
/// that is no id, not timed by its claim): a store counts it once the call's writes are done,
/// where the attempt's claim time is kept or taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timed {
    /// Claimed at `at`; `readied`: when it last became ready, where the claim read its row's.
    Claimed {
        id: Option<BrandedId>,
        at: i64,
        readied: Option<i64>,
    },
    /// Its attempt ended, as `ended`.
    Ended { id: BrandedId, ended: Ended },
}

/// Counts of durations by bucket, with their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last is past [`BUCKETS_MS`].
    pub counts: [u64; BUCKETS_MS.len() + 1],
    pub sum_ms: u64,
}

impl Histogram {
    /// Counts one duration; a negative one (a clock stepped back) as 0, one past
    /// [`MAX_DURATION_MS`] not at all.
    pub fn observe(&mut self, ms: i64) {
        if ms > MAX_DURATION_MS {
            return;
        }
        let ms = ms.max(0) as u64;
        let at = BUCKETS_MS.partition_point(|&le| le < ms);
        self.counts[at] = self.counts[at].saturating_add(1);
        self.sum_ms = self.sum_ms.saturating_add(ms);
    }

    /// How many durations it counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.saturating_add(*c))
    }

    /// The cumulative count at each bound of [`BUCKETS_MS`] (at most `le` ms), then the total.
    pub fn cumulative(&self) -> [u64; BUCKETS_MS.len() + 1] {
        let mut out = [0; BUCKETS_MS.len() + 1];
        let mut sum = 0u64;
        for (o, c) in out.iter_mut().zip(self.counts) {
            sum = sum.saturating_add(c);
            *o = sum;
        }
        out
    }
}

/// One queue's metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueMetrics {
    /// By [`EVENTS`]' order.
    pub events: [u64; EVENTS.len()],
    pub wait: Histogram,
    /// By [`Ended::TIMED`]' order.
    pub run: [Histogram; Ended::TIMED.len()],
    pub end_to_end: Histogram,
    /// Whether a transition wrote a row's `ready` since the server started: until one does, a
    /// claim reads no `ready` (no row of a job ready since its enqueue has one).
    pub readied: bool,
}

impl QueueMetrics {
    pub fn observe(&mut self, what: Observed) {
        match what {
            Observed::Event(event) => {
                // `EVENTS` lists the events in their declaration order.
                let i = event as usize;
                self.events[i] = self.events[i].saturating_add(1);
            }
            Observed::Wait(ms) => self.wait.observe(ms),
            Observed::Run(ended, ms) => {
                if let Some(i) = Ended::TIMED.iter().position(|e| *e == ended) {
                    self.run[i].observe(ms);
                }
            }
            Observed::EndToEnd(ms) => self.end_to_end.observe(ms),
            Observed::Readied => self.readied = true,
        }
    }

    /// Adds `counts` (by [`EVENTS`]' order) to the events' counts.
    pub fn count_events(&mut self, counts: &[u64; EVENTS.len()]) {
        for (kept, n) in self.events.iter_mut().zip(counts) {
            *kept = kept.saturating_add(*n);
        }
    }

    /// The count of `event`.
    pub fn events_of(&self, event: Event) -> u64 {
        EVENTS
            .iter()
            .position(|e| *e == event)
            .map_or(0, |i| self.events[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_falls_in_the_first_bucket_whose_bound_holds_it() {
        let mut h = Histogram::default();
        for ms in [0, 1, 2, 3, 1_000, 1_001, 3_600_000, 3_600_001] {
            h.observe(ms);
        }
        assert_eq!(h.counts[0], 2, "0 and 1 ms: le 1");
        assert_eq!(h.counts[1], 1, "2 ms: le 2");
        assert_eq!(h.counts[2], 1, "3 ms: le 5");
        assert_eq!(h.counts[9], 1, "1000 ms: le 1000");
        assert_eq!(h.counts[10], 1, "1001 ms: le 2500");
        assert_eq!(h.counts[19], 1, "an hour: le 3600000");
        assert_eq!(h.counts[20], 1, "past an hour: the last bucket");
        assert_eq!(h.count(), 8);
        assert_eq!(h.sum_ms, 1 + 2 + 3 + 1_000 + 1_001 + 3_600_000 + 3_600_001);
        let c = h.cumulative();
        assert_eq!(c[0], 2);
        assert_eq!(c[BUCKETS_MS.len()], 8);
        assert!(c.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn events_lists_every_event_in_its_declaration_order() {
        for (i, e) in EVENTS.iter().enumerate() {
            assert_eq!(*e as usize, i, "{e:?}");
        }
    }

    #[test]
    fn a_queue_s_metrics_take_the_fixed_size_observability_md_gives() {
        assert_eq!(std::mem::size_of::<QueueMetrics>(), 1184);
    }

    #[test]
    fn a_negative_duration_counts_as_zero_and_one_past_the_bound_not_at_all() {
        let mut h = Histogram::default();
        h.observe(-5);
        h.observe(MAX_DURATION_MS + 1);
        assert_eq!(h.count(), 1);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.sum_ms, 0);
    }

    #[test]
    fn a_queue_counts_its_events_and_its_run_times_by_how_they_ended() {
        let mut m = QueueMetrics::default();
        m.observe(Observed::Event(Event::Acked));
        m.observe(Observed::Event(Event::Acked));
        m.observe(Observed::Run(Ended::Dead, 40));
        m.observe(Observed::Run(Ended::Cancelled, 40));
        assert_eq!(m.events_of(Event::Acked), 2);
        assert_eq!(m.events_of(Event::Claimed), 0);
        assert_eq!(m.run[2].count(), 1, "dead");
        assert_eq!(m.run.iter().map(Histogram::count).sum::<u64>(), 1);
    }
}
