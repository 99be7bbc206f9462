//! A rolling minute of samples of the deployment, which the rates and sparklines of `emq top`
//! and `emq web` come from; each sample is read through [`crate::overview`].

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::deployment::Deployment;
use crate::error::Result;

use crate::overview::{now_ms, overview, Flow, QueueRow};
use crate::waits::{self, Latency, Quantiles};
use echomq_client::Histogram;

/// How long the rates and sparklines look back.
pub const WINDOW_MS: u64 = 60_000;
/// Samples a history keeps at most, whatever the refresh interval.
const MAX_SAMPLES: usize = 600;

/// The deployment at one moment: its queues and its summed `INFO emq` counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub at_ms: u64,
    pub queues: Vec<QueueRow>,
    pub counters: BTreeMap<String, i64>,
    /// Why there are no counters: a user who may not run `INFO` sees the queues without them.
    pub counters_error: Option<String>,
}

impl Sample {
    /// The queue's row in this sample, if it was listed.
    pub fn row(&self, queue: &str) -> Option<&QueueRow> {
        self.queues.iter().find(|q| q.name == queue)
    }
}

/// Takes the samples of one view: it remembers each queue's counts and histograms at its last
/// sample.
#[derive(Default)]
pub struct Sampler {
    seen: BTreeMap<String, Seen>,
}

/// A queue's counts and its wait and acked runs' histograms, as last read.
struct Seen {
    counts: Flow,
    wait: Histogram,
    run: Histogram,
}

/// One queue's counts and histograms as the server keeps them now (`EMQ.METRICS`); `None`
/// when they cannot be read or the server keeps none now.
async fn seen(dep: &Deployment, queue: &str, width: u16) -> Option<Seen> {
    let m = dep
        .queue(queue)
        .knowing_width(width)
        .metrics()
        .await
        .ok()
        .filter(|m| m.enabled)?;
    let count = |event: &str| m.events.get(event).copied().unwrap_or(0);
    Some(Seen {
        counts: Flow {
            enqueued: count("enqueued"),
            claimed: count("claimed"),
            acked: count("acked"),
            ..Flow::default()
        },
        run: m.run.get("acked").cloned().unwrap_or_default(),
        wait: m.wait,
    })
}

impl Sampler {
    pub async fn sample(&mut self, dep: &Deployment) -> Result<Sample> {
        let at_ms = now_ms();
        let mut queues = overview(dep).await?;
        for q in &mut queues {
            q.flow = self.flow(dep, &q.name, q.width()).await;
        }
        // A queue no longer listed is forgotten: its next reading starts afresh.
        self.seen
            .retain(|name, _| queues.iter().any(|q| &q.name == name));
        let (counters, counters_error) = match dep.counters().await {
            Ok(c) => (c, None),
            Err(e) => (BTreeMap::new(), Some(e.to_string())),
        };
        Ok(Sample {
            at_ms,
            queues,
            counters,
            counters_error,
        })
    }

    /// The queue's transitions since this sampler last looked, from the server's own counts
    /// (`EMQ.METRICS`), kept for every queue with no setting; `None` when they cannot be read
    /// or the server keeps none now (`emq.metrics no`).
    /// A queue first seen has none yet (a zero flow); counts that fell (its server restarted,
    /// a replica took over) start again from there. A partitioned queue's (`width` its
    /// partitions) are its partitions' added up, by the client.
    async fn flow(&mut self, dep: &Deployment, queue: &str, width: u16) -> Option<Flow> {
        let now = seen(dep, queue, width).await?;
        let Some(before) = self.seen.get(queue) else {
            self.seen.insert(queue.to_string(), now);
            return Some(Flow::default());
        };
        let less = |now: u64, before: u64| now.checked_sub(before).unwrap_or(now);
        let (was, counts) = (&before.counts, &now.counts);
        let flow = Flow {
            enqueued: less(counts.enqueued, was.enqueued),
            claimed: less(counts.claimed, was.claimed),
            acked: less(counts.acked, was.acked),
            latency: Latency {
                wait: Quantiles::of(&waits::since(&now.wait, &before.wait)),
                run: Quantiles::of(&waits::since(&now.run, &before.run)),
            },
        };
        self.seen.insert(queue.to_string(), now);
        Some(flow)
    }
}

/// The counters whose rates the console shows, with their labels.
pub const RATES: [(&str, &str); 3] = [
    ("emq_enqueued", "enqueued"),
    ("emq_claimed", "claimed"),
    ("emq_acked", "acked"),
];

/// The last minute of samples, oldest first.
#[derive(Clone, Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    pub fn push(&mut self, sample: Sample) {
        let horizon = sample.at_ms.saturating_sub(WINDOW_MS);
        self.samples.push_back(sample);
        while self.samples.len() > MAX_SAMPLES
            || (self.samples.len() > 2 && self.samples.get(1).is_some_and(|s| s.at_ms <= horizon))
        {
            self.samples.pop_front();
        }
    }

    pub fn latest(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// A counter's rate per second over the window (`None` before two samples). A counter that
    /// went down was reset (a restarted server, a failover) and counts again from 0.
    pub fn rate(&self, counter: &str) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        last.counters.get(counter)?;
        let seconds = last.at_ms.checked_sub(first.at_ms)? as f64 / 1000.0;
        if seconds <= 0.0 {
            return None;
        }
        Some(self.increases(counter).iter().sum::<i64>() as f64 / seconds)
    }

    /// A counter's rate per second between each two samples, oldest first.
    pub fn rate_series(&self, counter: &str) -> Vec<f64> {
        let gaps = self
            .samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| b.at_ms.saturating_sub(a.at_ms).max(1) as f64 / 1000.0);
        self.increases(counter)
            .into_iter()
            .zip(gaps)
            .map(|(delta, seconds)| delta as f64 / seconds)
            .collect()
    }

    /// How much a counter grew between each two samples, a reset counting from 0.
    fn increases(&self, counter: &str) -> Vec<i64> {
        let get = |s: &Sample| s.counters.get(counter).copied().unwrap_or(0);
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| {
                if get(b) >= get(a) {
                    get(b) - get(a)
                } else {
                    get(b)
                }
            })
            .collect()
    }

    /// One queue's rate of one event (`enqueued`, `claimed`, `acked`) per second over the
    /// window, from the server's counts; `None` where they could not be read.
    pub fn queue_rate(&self, queue: &str, event: &str) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        let flow_of = |s: &Sample| s.row(queue).and_then(|q| q.flow);
        flow_of(last)?;
        let seconds = last.at_ms.checked_sub(first.at_ms)? as f64 / 1000.0;
        if seconds <= 0.0 {
            return None;
        }
        let total: u64 = self
            .samples
            .iter()
            .skip(1)
            .filter_map(flow_of)
            .map(|f| f.get(event))
            .sum();
        Some(total as f64 / seconds)
    }

    /// One queue's rate of one event between each two samples, oldest first (0 where its
    /// counts could not be read).
    pub fn queue_rate_series(&self, queue: &str, event: &str) -> Vec<f64> {
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| {
                let seconds = b.at_ms.saturating_sub(a.at_ms).max(1) as f64 / 1000.0;
                let n = b
                    .row(queue)
                    .and_then(|q| q.flow)
                    .map_or(0, |f| f.get(event));
                n as f64 / seconds
            })
            .collect()
    }

    /// Each sample's age, in seconds before the latest (0 for it), oldest first: a chart's x.
    pub fn ages(&self) -> Vec<f64> {
        let last = self.samples.back().map_or(0, |s| s.at_ms);
        self.samples
            .iter()
            .map(|s| last.saturating_sub(s.at_ms) as f64 / 1000.0)
            .collect()
    }

    /// One queue's latency at each sample (since the one before), oldest first: `None` where
    /// nothing was counted or its metrics could not be read.
    pub fn latency_series(&self, queue: &str) -> Vec<Option<Latency>> {
        self.samples
            .iter()
            .map(|s| {
                s.row(queue)
                    .and_then(|q| q.flow)
                    .map(|f| f.latency)
                    .filter(Latency::counted)
            })
            .collect()
    }

    /// One queue's latest latency in the window: its wait at the latest sample that counted a
    /// claim, and its run at the latest that counted an ack (a claim and its ack often fall in
    /// different samples); `None` when neither was counted.
    pub fn latest_latency(&self, queue: &str) -> Option<Latency> {
        let series = self.latency_series(queue);
        let latest = |pick: fn(&Latency) -> Quantiles| {
            series
                .iter()
                .rev()
                .flatten()
                .map(pick)
                .find(|q| q.p50_ms.is_some())
                .unwrap_or_default()
        };
        let out = Latency {
            wait: latest(|l| l.wait),
            run: latest(|l| l.run),
        };
        out.counted().then_some(out)
    }

    /// One queue's count of one set at each sample, oldest first.
    pub fn backlog_series(&self, queue: &str, set: &str) -> Vec<f64> {
        self.samples
            .iter()
            .map(|s| s.row(queue).map_or(0.0, |q| q.count(set) as f64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, enqueued: i64, pending: i64) -> Sample {
        Sample {
            at_ms: ms,
            queues: vec![QueueRow {
                name: "q".into(),
                pending,
                ..QueueRow::default()
            }],
            counters: [("emq_enqueued".to_string(), enqueued)].into(),
            counters_error: None,
        }
    }

    fn with_flow(ms: u64, acked: Option<u64>) -> Sample {
        Sample {
            at_ms: ms,
            queues: vec![QueueRow {
                name: "q".into(),
                flow: acked.map(|acked| Flow {
                    acked,
                    ..Flow::default()
                }),
                ..QueueRow::default()
            }],
            ..Sample::default()
        }
    }

    #[test]
    fn rates_are_over_the_window_and_a_reset_counter_counts_from_zero() {
        let mut h = History::default();
        assert_eq!(h.rate("emq_enqueued"), None);
        h.push(at(1_000, 0, 0));
        h.push(at(2_000, 10, 5));
        h.push(at(3_000, 30, 7));
        assert_eq!(h.rate("emq_enqueued"), Some(15.0));
        assert_eq!(h.rate_series("emq_enqueued"), vec![10.0, 20.0]);
        assert_eq!(h.backlog_series("q", "pending"), vec![0.0, 5.0, 7.0]);
        h.push(at(4_000, 3, 0));
        assert_eq!(h.rate("emq_enqueued"), Some(11.0));
        assert_eq!(h.rate_series("emq_enqueued"), vec![10.0, 20.0, 3.0]);
    }

    #[test]
    fn a_queue_s_rates_come_from_its_flows_and_are_none_while_its_stream_is_off() {
        let mut h = History::default();
        h.push(with_flow(0, None));
        assert_eq!(h.queue_rate("q", "acked"), None);
        h.push(with_flow(1_000, Some(0)));
        h.push(with_flow(2_000, Some(6)));
        h.push(with_flow(3_000, Some(3)));
        assert_eq!(h.queue_rate("q", "acked"), Some(3.0));
        assert_eq!(h.queue_rate_series("q", "acked"), vec![0.0, 6.0, 3.0]);
        assert_eq!(h.queue_rate("other", "acked"), None);
    }

    #[test]
    fn a_history_keeps_one_minute() {
        let mut h = History::default();
        for s in 0..200 {
            h.push(at(s * 1_000, s as i64, 0));
        }
        let first = h.samples.front().map(|s| s.at_ms).unwrap_or_default();
        assert_eq!(first, 199_000 - WINDOW_MS);
        assert_eq!(h.rate("emq_enqueued"), Some(1.0));
    }
}
