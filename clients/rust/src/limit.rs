//! A queue's limits (`EMQ.LIMIT`, docs/commands.md "Claim limits"): how many of its jobs may
//! be active at once, how many claims a window of time takes, the default limit on one
//! attempt's time for jobs enqueued without their own, and the default limits of each of its
//! groups (docs/groups.md; a group's own are [`GroupLimit`](crate::GroupLimit)'s). [`Limit`]
//! says what to change (each limit kept, set or removed), [`Limits`] is what the queue has
//! then, and their use.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::{millis, pairs, timeout_ms, Queue};

/// What a change does to one limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Setting<T> {
    /// Left as it is.
    #[default]
    Keep,
    /// Set to this.
    Set(T),
    /// Removed (`OFF`).
    Off,
}

/// At most `n` claims in any window of `per`, across the queue's workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// 1 to 10,000.
    pub n: u32,
    /// 1 ms to a day.
    pub per: Duration,
}

/// A change of a queue's limits, for [`Queue::limit`]; `Limit::default()` changes nothing
/// (a report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limit {
    /// Jobs active at once (`CONCURRENCY <n>`, 1 to 1,000,000).
    pub concurrency: Setting<u32>,
    /// Claims in a sliding window (`RATE <n> PER <ms>`).
    pub rate: Setting<Rate>,
    /// The limit on one attempt of a job enqueued without a timeout of its own, counted from
    /// its claim (`TIMEOUT <ms>`, 1 ms to 365 days, sent rounded to the nearest ms; a
    /// positive one under half a ms is refused before anything is sent, [`Error::Argument`]),
    /// read by each claim: a change does not move the deadline of an attempt running already.
    pub timeout: Setting<Duration>,
    /// Jobs of each group active at once (`GROUP-CONCURRENCY <n>`), for the groups without a
    /// limit of their own: a group at it is held back while the others' jobs are claimed.
    pub group_concurrency: Setting<u32>,
    /// Claims of each group in a sliding window (`GROUP-RATE <n> PER <ms>`), for the groups
    /// without a rate of their own.
    pub group_rate: Setting<Rate>,
}

impl Limit {
    /// Every limit removed (sent as `EMQ.LIMIT <queue> OFF`); the groups' own limits stay.
    pub const OFF: Limit = Limit {
        concurrency: Setting::Off,
        rate: Setting::Off,
        timeout: Setting::Off,
        group_concurrency: Setting::Off,
        group_rate: Setting::Off,
    };

    /// The command's options: each limit to set or remove, in the order the module reads them.
    fn options(&self) -> Result<Vec<Vec<u8>>> {
        if *self == Limit::OFF {
            return Ok(vec![b"OFF".to_vec()]);
        }
        let mut args = count_option(b"CONCURRENCY", self.concurrency);
        args.extend(rate_option(b"RATE", self.rate));
        match self.timeout {
            Setting::Keep => {}
            Setting::Set(d) => args.extend([b"TIMEOUT".to_vec(), text(timeout_ms(d)?)]),
            Setting::Off => args.extend([b"TIMEOUT".to_vec(), b"OFF".to_vec()]),
        }
        args.extend(count_option(b"GROUP-CONCURRENCY", self.group_concurrency));
        args.extend(rate_option(b"GROUP-RATE", self.group_rate));
        Ok(args)
    }
}

/// A number as the wire's text.
fn text(n: u128) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// `<word> <n>`, `<word> OFF`, or nothing to keep it.
pub(crate) fn count_option(word: &[u8], setting: Setting<u32>) -> Vec<Vec<u8>> {
    match setting {
        Setting::Keep => Vec::new(),
        Setting::Set(n) => vec![word.to_vec(), text(n.into())],
        Setting::Off => vec![word.to_vec(), b"OFF".to_vec()],
    }
}

/// `<word> <n> PER <ms>` (the window rounded to the nearest ms), `<word> OFF`, or nothing.
pub(crate) fn rate_option(word: &[u8], setting: Setting<Rate>) -> Vec<Vec<u8>> {
    match setting {
        Setting::Keep => Vec::new(),
        Setting::Set(r) => vec![
            word.to_vec(),
            text(r.n.into()),
            b"PER".to_vec(),
            text(millis(r.per)),
        ],
        Setting::Off => vec![word.to_vec(), b"OFF".to_vec()],
    }
}

/// A map reply's fields (a flat array under RESP2), read by name: a field missing or null is
/// `None`, one of another type than asked [`Error::Reply`].
pub(crate) struct Fields(Vec<(String, Value)>);

impl Fields {
    /// The fields of `reply`; [`Error::Reply`] for a reply that is no map, or an empty one.
    pub(crate) fn of(reply: &Value) -> Result<Fields> {
        let fields = pairs(reply);
        if fields.is_empty() {
            return Err(Error::Reply(format!("{reply:?}")));
        }
        Ok(Fields(fields))
    }

    /// A field as `T`; `None` when missing or null.
    pub(crate) fn read<T: FromRedisValue>(&self, name: &str) -> Result<Option<T>> {
        match self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v) {
            None | Some(Value::Nil) => Ok(None),
            Some(v) => T::from_redis_value_ref(v)
                .map(Some)
                .map_err(|_| Error::Reply(format!("{name}: {v:?}"))),
        }
    }

    pub(crate) fn int(&self, name: &str) -> Result<Option<u64>> {
        self.read(name)
    }

    /// An integer that fits a `u32` (a limit).
    pub(crate) fn small(&self, name: &str) -> Result<Option<u32>> {
        self.int(name)?
            .map(|n| u32::try_from(n).map_err(|_| Error::Reply(format!("{name}: {n}"))))
            .transpose()
    }

    /// An integer that is a count: 0 when missing.
    pub(crate) fn count(&self, name: &str) -> Result<u64> {
        Ok(self.int(name)?.unwrap_or(0))
    }

    /// `1` (true) or `0`.
    pub(crate) fn flag(&self, name: &str) -> Result<bool> {
        Ok(self.count(name)? == 1)
    }

    pub(crate) fn text(&self, name: &str) -> Result<String> {
        self.read(name)?
            .ok_or_else(|| Error::Reply(format!("no {name} in {:?}", self.0)))
    }

    /// A rate of two fields, `<n>` and its window in ms; `None` unless both are set.
    pub(crate) fn rate(&self, n: &str, per: &str) -> Result<Option<Rate>> {
        Ok(match (self.small(n)?, self.int(per)?) {
            (Some(n), Some(per)) => Some(Rate {
                n,
                per: Duration::from_millis(per),
            }),
            _ => None,
        })
    }
}

/// A queue's limits and their use, as `EMQ.LIMIT` answers (`None`: not set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Jobs active now.
    pub active: u64,
    pub concurrency: Option<u32>,
    pub rate: Option<Rate>,
    /// Claims in the rate window now (0 without a rate limit).
    pub rate_used: u64,
    /// The default limit on one attempt.
    pub timeout: Option<Duration>,
    /// The default limit of each group's active jobs.
    pub group_concurrency: Option<u32>,
    /// The default limit of each group's claims (`None` too from a server without group rates).
    pub group_rate: Option<Rate>,
}

impl Limits {
    /// An `EMQ.LIMIT` reply (a map: a flat array under RESP2), a limit not set null.
    fn from_reply(reply: &Value) -> Result<Limits> {
        let fields = Fields::of(reply)?;
        Ok(Limits {
            active: fields.count("active")?,
            concurrency: fields.small("concurrency")?,
            rate: fields.rate("rate", "rate-per")?,
            rate_used: fields.count("rate-used")?,
            timeout: fields.int("timeout")?.map(Duration::from_millis),
            group_concurrency: fields.small("group-concurrency")?,
            group_rate: fields.rate("group-rate", "group-rate-per")?,
        })
    }

    /// The limits of a partitioned queue's partitions as one queue's: the active jobs, the
    /// concurrency, the rate's claims and their use added up, the rest the first partition's.
    pub(crate) fn added(each: &[Limits]) -> Limits {
        let mut all = each.first().copied().unwrap_or_default();
        let sum = |f: fn(&Limits) -> Option<u32>| {
            each.iter().filter_map(f).reduce(|a, b| a.saturating_add(b))
        };
        all.active = each.iter().map(|l| l.active).sum();
        all.rate_used = each.iter().map(|l| l.rate_used).sum();
        all.concurrency = sum(|l| l.concurrency);
        all.rate = sum(|l| l.rate.map(|r| r.n))
            .zip(all.rate)
            .map(|(n, r)| Rate { n, ..r });
        all
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Changes the queue's limits as `change` says (`EMQ.LIMIT`; all at once, or none when
    /// one is refused), and reports what the queue has then. A limit raised or removed lets
    /// the workers waiting for room claim at once.
    ///
    /// ```no_run
    /// # use echomq_client::{Limit, Queue, Rate, Setting};
    /// # use std::time::Duration;
    /// # async fn example(q: Queue<redis::aio::MultiplexedConnection>) -> echomq_client::Result<()> {
    /// let rate = Rate { n: 100, per: Duration::from_secs(60) };
    /// let now = q.limit(Limit {
    ///     concurrency: Setting::Set(3),
    ///     rate: Setting::Set(rate),
    ///     timeout: Setting::Set(Duration::from_secs(30)),
    ///     group_concurrency: Setting::Set(2), // each group's jobs: 2 active at most
    ///     ..Limit::default()
    /// }).await?;
    /// assert_eq!(now.timeout, Some(Duration::from_secs(30)));
    /// q.limit(Limit { timeout: Setting::Off, ..Limit::default() }).await?; // the others stay
    /// q.limit(Limit::OFF).await?; // none left
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// On a partitioned queue (its width asked first when this handle has not learned it),
    /// each partition gets its share of a concurrency or rate limit, the shares adding up to
    /// it (docs/cluster.md, "Limits"; under one limit a partition is refused,
    /// [`Error::Argument`]), and the report adds the partitions' up.
    pub async fn limit(&self, change: Limit) -> Result<Limits> {
        let width = self.resolved_width().await?;
        if width > 0 {
            return self.limit_partitions(change, width).await;
        }
        self.own_limit(change).await
    }

    /// `EMQ.LIMIT` of this queue's own name.
    pub(crate) async fn own_limit(&self, change: Limit) -> Result<Limits> {
        let reply = self.call("EMQ.LIMIT", &change.options()?).await?;
        Limits::from_reply(&reply)
    }

    /// The queue's limits and their use, changing nothing.
    pub async fn limits(&self) -> Result<Limits> {
        self.limit(Limit::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(change: Limit) -> String {
        let words: Vec<String> = change
            .options()
            .unwrap()
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect();
        words.join(" ")
    }

    #[test]
    fn a_change_sends_only_what_it_sets_or_removes() {
        assert_eq!(words(Limit::default()), "");
        let set = Limit {
            concurrency: Setting::Set(3),
            rate: Setting::Set(Rate {
                n: 100,
                per: Duration::from_secs(60),
            }),
            timeout: Setting::Set(Duration::from_millis(1500)),
            group_concurrency: Setting::Set(2),
            group_rate: Setting::Set(Rate {
                n: 5,
                per: Duration::from_millis(1500),
            }),
        };
        assert_eq!(
            words(set),
            "CONCURRENCY 3 RATE 100 PER 60000 TIMEOUT 1500 GROUP-CONCURRENCY 2 GROUP-RATE 5 PER 1500"
        );
        assert_eq!(words(Limit::OFF), "OFF");
        let one = Limit {
            timeout: Setting::Off,
            ..Limit::default()
        };
        assert_eq!(words(one), "TIMEOUT OFF");
        let two = Limit {
            rate: Setting::Keep,
            ..Limit::OFF
        };
        assert_eq!(
            words(two),
            "CONCURRENCY OFF TIMEOUT OFF GROUP-CONCURRENCY OFF GROUP-RATE OFF"
        );
        let groups = Limit {
            group_concurrency: Setting::Off,
            ..Limit::default()
        };
        assert_eq!(words(groups), "GROUP-CONCURRENCY OFF");
    }

    #[test]
    fn durations_are_sent_rounded_and_a_timeout_rounding_to_nothing_is_refused() {
        let rounded = Limit {
            rate: Setting::Set(Rate {
                n: 1,
                per: Duration::from_micros(2500),
            }),
            timeout: Setting::Set(Duration::from_micros(299_600)),
            ..Limit::default()
        };
        assert_eq!(words(rounded), "RATE 1 PER 3 TIMEOUT 300");
        let tiny = Limit {
            concurrency: Setting::Set(3),
            timeout: Setting::Set(Duration::from_micros(400)),
            ..Limit::default()
        };
        assert!(matches!(tiny.options(), Err(Error::Argument(_))));
    }

    #[test]
    fn a_reply_reads_as_limits_with_nulls_not_set() {
        let reply = Value::Map(vec![
            (Value::SimpleString("active".into()), Value::Int(2)),
            (Value::SimpleString("concurrency".into()), Value::Int(3)),
            (Value::SimpleString("rate".into()), Value::Nil),
            (Value::SimpleString("rate-per".into()), Value::Nil),
            (Value::SimpleString("rate-used".into()), Value::Int(0)),
            (Value::SimpleString("timeout".into()), Value::Int(300)),
            (
                Value::SimpleString("group-concurrency".into()),
                Value::Int(4),
            ),
            (Value::SimpleString("group-rate".into()), Value::Int(10)),
            (
                Value::SimpleString("group-rate-per".into()),
                Value::Int(1000),
            ),
        ]);
        assert_eq!(
            Limits::from_reply(&reply).unwrap(),
            Limits {
                active: 2,
                concurrency: Some(3),
                rate: None,
                rate_used: 0,
                timeout: Some(Duration::from_millis(300)),
                group_concurrency: Some(4),
                group_rate: Some(Rate {
                    n: 10,
                    per: Duration::from_secs(1)
                }),
            }
        );
        assert!(matches!(
            Limits::from_reply(&Value::Int(1)),
            Err(Error::Reply(_))
        ));
    }
}
