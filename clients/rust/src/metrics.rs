//! A queue's metrics as the server keeps them (`EMQ.METRICS`, docs/observability.md): a count of
//! each event, the wait, run and end-to-end latency histograms, and the age of the first pending
//! job.

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
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// The queue's metrics, as the server that holds it keeps them (`EMQ.METRICS`): they start
    /// from zero when that server restarts or a replica takes over.
    pub async fn metrics(&self) -> Result<Metrics> {
        Metrics::from_reply(&self.call("EMQ.METRICS", &[]).await?)
    }
}
