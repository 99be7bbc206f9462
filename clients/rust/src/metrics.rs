//! A queue's metrics as the server keeps them (`EMQ.METRICS`, docs/observability.md): a count of
//! each event, the wait, run and end-to-end latency histograms, and the age of the first pending
//! job; a partitioned queue's, its partitions' added up.

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::{pairs, Queue};

/// Durations counted in fixed buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    pub count: u64,
    pub sum_ms: u64,
    /// `(le, count)`: how many took at most `le` ms (`None`: any time), cumulative, ascending.
    pub buckets: Vec<(Option<u64>, u64)>,
}

/// `EMQ.METRICS`' reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Whether the server keeps metrics now (`emq.metrics`); while it does not, the counts
    /// stand still.
    pub enabled: bool,
    /// Each event's count, by the event stream's name (`enqueued`, `claimed`, `acked`, ...).
    pub events: BTreeMap<String, u64>,
    /// From ready to claimed.
    pub wait: Histogram,
    /// From claimed to settled, by how the attempt ended: `acked`, `failed`, `dead`,
    /// `timed-out`.
    pub run: BTreeMap<String, Histogram>,
    /// From the id's minting to the ack.
    pub end_to_end: Histogram,
    /// How long the default group's first pending job has waited (`None`: nothing pending).
    pub oldest_pending_ms: Option<u64>,
}

fn unexpected(v: &Value) -> Error {
    Error::Reply(format!("EMQ.METRICS: unexpected reply {v:?}"))
}

fn number(v: &Value) -> Result<u64> {
    u64::from_redis_value_ref(v).map_err(|_| unexpected(v))
}

impl Histogram {
    fn from_reply(v: &Value) -> Result<Histogram> {
        let mut h = Histogram::default();
        for (name, value) in pairs(v) {
            match name.as_str() {
                "count" => h.count = number(&value)?,
                "sum-ms" => h.sum_ms = number(&value)?,
                "buckets" => {
                    let Value::Array(items) = &value else {
                        return Err(unexpected(&value));
                    };
                    for item in items {
                        let Value::Array(pair) = item else {
                            return Err(unexpected(item));
                        };
                        let [le, n] = pair.as_slice() else {
                            return Err(unexpected(item));
                        };
                        h.buckets.push((number(le).ok(), number(n)?));
                    }
                }
                _ => {}
            }
        }
        Ok(h)
    }

    /// Two histograms added up bucket by bucket (a partitioned queue's, over its partitions,
    /// which count in the same buckets); where their bounds differ, the one with more counted.
    pub fn plus(&self, other: &Histogram) -> Histogram {
        let alike = self.buckets.len() == other.buckets.len()
            && self
                .buckets
                .iter()
                .zip(&other.buckets)
                .all(|((x, _), (y, _))| x == y);
        if !alike {
            return if self.count >= other.count {
                self.clone()
            } else {
                other.clone()
            };
        }
        Histogram {
            count: self.count.saturating_add(other.count),
            sum_ms: self.sum_ms.saturating_add(other.sum_ms),
            buckets: self
                .buckets
                .iter()
                .zip(&other.buckets)
                .map(|((le, n), (_, m))| (*le, n.saturating_add(*m)))
                .collect(),
        }
    }

    /// The least bucket bound that holds at least the fraction `q` of the durations (ms; `None`
    /// past the last bound or with nothing counted): an upper bound of the `q` quantile.
    pub fn quantile_bound(&self, q: f64) -> Option<u64> {
        let want = (q * self.count as f64).ceil() as u64;
        if self.count == 0 {
            return None;
        }
        self.buckets
            .iter()
            .find(|(_, n)| *n >= want)
            .and_then(|(le, _)| *le)
    }
}

impl Metrics {
    fn from_reply(v: &Value) -> Result<Metrics> {
        let mut m = Metrics {
            enabled: true,
            ..Metrics::default()
        };
        for (name, value) in pairs(v) {
            match name.as_str() {
                "enabled" => m.enabled = number(&value)? == 1,
                "events" => {
                    for (event, n) in pairs(&value) {
                        m.events.insert(event, number(&n)?);
                    }
                }
                "wait" => m.wait = Histogram::from_reply(&value)?,
                "run" => {
                    for (ended, h) in pairs(&value) {
                        m.run.insert(ended, Histogram::from_reply(&h)?);
                    }
                }
                "end-to-end" => m.end_to_end = Histogram::from_reply(&value)?,
                "oldest-pending-ms" => m.oldest_pending_ms = number(&value).ok(),
                _ => {}
            }
        }
        Ok(m)
    }

    /// A partitioned queue's partitions' metrics as one queue's: each event's count summed,
    /// each histogram summed bucket by bucket ([`Histogram::plus`]: where two partitions'
    /// bucket bounds differ, the one with more counted is kept; a run outcome a partition
    /// lacks counts nothing there), the oldest pending job's age the greatest, and `enabled`
    /// only when every partition's is. Default metrics for none.
    pub fn added(each: &[Metrics]) -> Metrics {
        let Some((first, rest)) = each.split_first() else {
            return Metrics::default();
        };
        let mut all = first.clone();
        for m in rest {
            all.enabled &= m.enabled;
            for (event, n) in &m.events {
                let sum = all.events.entry(event.clone()).or_default();
                *sum = sum.saturating_add(*n);
            }
            all.wait = all.wait.plus(&m.wait);
            for (ended, h) in &m.run {
                let sum = all.run.get(ended).map_or_else(|| h.clone(), |a| a.plus(h));
                all.run.insert(ended.clone(), sum);
            }
            all.end_to_end = all.end_to_end.plus(&m.end_to_end);
            all.oldest_pending_ms = all.oldest_pending_ms.max(m.oldest_pending_ms);
        }
        all
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// The queue's metrics, as the server that holds it keeps them (`EMQ.METRICS`): they start
    /// from zero when that server restarts or a replica takes over.
    ///
    /// A partitioned queue's are its partitions', each read from the primary that holds it and
    /// added up ([`Metrics::added`]). The partitions are those of the width this handle knows
    /// (learned, or given by [`Queue::knowing_width`]), read once (`EMQ.WIDTH`) when it knows
    /// none, and not read afresh at each call: a handle that held the width from before the
    /// queue was spanned again reads the old partitions. A user not allowed `EMQ.WIDTH` (or a
    /// server without it) reads width 0: an ordinary queue. Each partition's primary counts
    /// from its own start, so the sum starts over in part when one of them restarts.
    pub async fn metrics(&self) -> Result<Metrics> {
        if self.resolved_width().await? == 0 {
            return Metrics::from_reply(&self.call("EMQ.METRICS", &[]).await?);
        }
        let mut each = Vec::new();
        for part in self.parts()? {
            each.push(Metrics::from_reply(
                &self.at(part).call("EMQ.METRICS", &[]).await?,
            )?);
        }
        Ok(Metrics::added(&each))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(buckets: &[(Option<u64>, u64)], sum_ms: u64) -> Histogram {
        Histogram {
            count: buckets.last().map_or(0, |b| b.1),
            sum_ms,
            buckets: buckets.to_vec(),
        }
    }

    #[test]
    fn histograms_add_up_bucket_by_bucket() {
        let a = h(&[(Some(5), 2), (Some(250), 3), (None, 3)], 40);
        let b = h(&[(Some(5), 1), (Some(250), 4), (None, 6)], 900);
        let sum = a.plus(&b);
        assert_eq!((sum.count, sum.sum_ms), (9, 940));
        assert_eq!(sum.buckets, [(Some(5), 3), (Some(250), 7), (None, 9)]);
        let other = h(&[(Some(7), 1), (None, 1)], 7);
        assert_eq!(
            other.plus(&b),
            b,
            "bounds that differ: the one with more counted"
        );
        assert_eq!(Histogram::default().plus(&a), a);
    }

    #[test]
    fn sums_past_u64_stay_at_its_greatest() {
        let big = h(&[(Some(5), u64::MAX), (None, u64::MAX)], u64::MAX);
        let sum = big.plus(&h(&[(Some(5), 1), (None, 2)], 3));
        assert_eq!((sum.count, sum.sum_ms), (u64::MAX, u64::MAX));
        assert_eq!(sum.buckets, [(Some(5), u64::MAX), (None, u64::MAX)]);
        let events = |n| Metrics {
            events: BTreeMap::from([("acked".to_string(), n)]),
            ..Metrics::default()
        };
        let all = Metrics::added(&[events(u64::MAX), events(1)]);
        assert_eq!(all.events["acked"], u64::MAX);
    }

    #[test]
    fn partitions_metrics_add_up_as_one_queue_s() {
        let one = |enabled, acked, oldest, run: Histogram| Metrics {
            enabled,
            events: BTreeMap::from([("acked".to_string(), acked), ("claimed".to_string(), 1)]),
            wait: run.clone(),
            run: BTreeMap::from([("acked".to_string(), run.clone())]),
            end_to_end: run,
            oldest_pending_ms: oldest,
        };
        let a = one(true, 2, Some(30), h(&[(Some(5), 1), (None, 2)], 8));
        let mut b = one(false, 5, Some(900), h(&[(Some(5), 0), (None, 5)], 50));
        b.events.insert("dead".to_string(), 1);
        b.run
            .insert("dead".to_string(), h(&[(Some(5), 1), (None, 1)], 1));
        let c = one(true, 0, None, h(&[(Some(5), 0), (None, 0)], 0));
        let all = Metrics::added(&[a.clone(), b.clone(), c.clone()]);
        assert!(!all.enabled, "b's is not");
        let on = |m: &Metrics| Metrics {
            enabled: true,
            ..m.clone()
        };
        let mut each = [on(&a), on(&b), on(&c)];
        assert!(Metrics::added(&each).enabled, "every partition's is");
        for off in 0..each.len() {
            each[off].enabled = false;
            assert!(!Metrics::added(&each).enabled, "partition {off}'s is not");
            each[off].enabled = true;
        }
        assert_eq!(
            all.events,
            BTreeMap::from([
                ("acked".to_string(), 7),
                ("claimed".to_string(), 3),
                ("dead".to_string(), 1)
            ])
        );
        let summed = h(&[(Some(5), 1), (None, 7)], 58);
        assert_eq!((&all.wait, &all.end_to_end), (&summed, &summed));
        assert_eq!(all.run["acked"], summed);
        assert_eq!(all.run["dead"], h(&[(Some(5), 1), (None, 1)], 1));
        assert_eq!(all.oldest_pending_ms, Some(900), "the oldest");
        assert_eq!(Metrics::added(std::slice::from_ref(&a)), a);
        assert_eq!(Metrics::added(&[]), Metrics::default());
    }
}
