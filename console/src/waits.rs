//! A queue's latency between two samples of the console, from the server's histograms
//! (`EMQ.METRICS`): the durations counted since the last sample, bucket by bucket, and the
//! bucket bounds that hold their median and 99th percentile.

use echomq_client::Histogram;
use serde::Serialize;

/// Where a quantile lies: the least bucket bound (ms) that holds it; [`PAST_LAST`] past the
/// last bound (an hour); `None` where nothing was counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Quantiles {
    pub p50_ms: Option<u64>,
    pub p99_ms: Option<u64>,
}

/// A quantile past the histogram's last bound.
pub const PAST_LAST: u64 = u64::MAX;

impl Quantiles {
    pub fn of(h: &Histogram) -> Quantiles {
        let bound = |q| match h.count {
            0 => None,
            _ => Some(h.quantile_bound(q).unwrap_or(PAST_LAST)),
        };
        Quantiles {
            p50_ms: bound(0.5),
            p99_ms: bound(0.99),
        }
    }
}

/// One queue's latency between two samples: the wait of the jobs claimed, and the run of the
/// attempts acked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    pub wait: Quantiles,
    pub run: Quantiles,
}

impl Latency {
    /// Whether anything was counted.
    pub fn counted(&self) -> bool {
        self.wait.p50_ms.is_some() || self.run.p50_ms.is_some()
    }
}

/// `now` less `before`, bucket by bucket: what was counted between the two readings. `now`
/// whole where its buckets differ or a count fell (its server restarted, a replica took over).
pub fn since(now: &Histogram, before: &Histogram) -> Histogram {
    let comparable = now.buckets.len() == before.buckets.len()
        && now.count >= before.count
        && now
            .buckets
            .iter()
            .zip(&before.buckets)
            .all(|((le, n), (was, m))| le == was && n >= m);
    if !comparable {
        return now.clone();
    }
    Histogram {
        count: now.count - before.count,
        sum_ms: now.sum_ms.saturating_sub(before.sum_ms),
        buckets: now
            .buckets
            .iter()
            .zip(&before.buckets)
            .map(|((le, n), (_, m))| (*le, n - m))
            .collect(),
    }
}

/// A bound as the console prints it: `12 ms`, `2.5 s`, `1 h`, `> 1 h`, `-` for none.
pub fn show(ms: Option<u64>) -> String {
    match ms {
        None => "-".to_string(),
        Some(PAST_LAST) => "> 1 h".to_string(),
        Some(ms) if ms < 1000 => format!("{ms} ms"),
        Some(ms) if ms < 3_600_000 => format!("{} s", ms as f64 / 1000.0),
        Some(ms) => format!("{} h", ms as f64 / 3_600_000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(buckets: &[(Option<u64>, u64)]) -> Histogram {
        Histogram {
            count: buckets.last().map_or(0, |b| b.1),
            sum_ms: 0,
            buckets: buckets.to_vec(),
        }
    }

    #[test]
    fn the_quantiles_are_of_what_came_since_the_last_reading() {
        let before = h(&[(Some(5), 10), (Some(250), 10), (Some(1000), 10), (None, 10)]);
        let now = h(&[(Some(5), 10), (Some(250), 10), (Some(1000), 14), (None, 15)]);
        let between = since(&now, &before);
        assert_eq!(between.count, 5);
        assert_eq!(
            Quantiles::of(&between),
            Quantiles {
                p50_ms: Some(1000),
                p99_ms: Some(PAST_LAST)
            }
        );
        assert_eq!(
            Quantiles::of(&since(&before, &before)),
            Quantiles::default()
        );
        // A count that fell is a restart: the reading counts whole.
        assert_eq!(since(&before, &now), before);
    }

    #[test]
    fn bounds_print_in_their_unit() {
        assert_eq!(
            [None, Some(5), Some(2500), Some(3_600_000), Some(PAST_LAST)].map(show),
            ["-", "5 ms", "2.5 s", "1 h", "> 1 h"]
        );
    }
}
