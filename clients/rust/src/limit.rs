//! A queue's limits (`EMQ.LIMIT`, docs/commands.md "Claim limits"): how many of its jobs may
//! be active at once, how many claims a window of time takes, and the default limit on one
//! attempt's time for jobs enqueued without their own. [`Limit`] says what to change (each
//! limit kept, set or removed), [`Limits`] is what the queue has then, and their use.

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
}

impl Limit {
    /// Every limit removed (sent as `EMQ.LIMIT <queue> OFF`).
    pub const OFF: Limit = Limit {
        concurrency: Setting::Off,
        rate: Setting::Off,
        timeout: Setting::Off,
    };

    /// The command's options: each limit to set or remove, in the order the module reads them.
    fn options(&self) -> Result<Vec<Vec<u8>>> {
        if *self == Limit::OFF {
            return Ok(vec![b"OFF".to_vec()]);
        }
        let text = |n: u128| n.to_string().into_bytes();
        let mut args = Vec::new();
        match self.concurrency {
            Setting::Keep => {}
            Setting::Set(n) => args.extend([b"CONCURRENCY".to_vec(), text(n.into())]),
            Setting::Off => args.extend([b"CONCURRENCY".to_vec(), b"OFF".to_vec()]),
        }
        match self.rate {
            Setting::Keep => {}
            Setting::Set(r) => args.extend([
                b"RATE".to_vec(),
                text(r.n.into()),
                b"PER".to_vec(),
                text(millis(r.per)),
            ]),
            Setting::Off => args.extend([b"RATE".to_vec(), b"OFF".to_vec()]),
        }
        match self.timeout {
            Setting::Keep => {}
            Setting::Set(d) => args.extend([b"TIMEOUT".to_vec(), text(timeout_ms(d)?)]),
            Setting::Off => args.extend([b"TIMEOUT".to_vec(), b"OFF".to_vec()]),
        }
        Ok(args)
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
}

impl Limits {
    /// An `EMQ.LIMIT` reply (a map: a flat array under RESP2), a limit not set null.
    fn from_reply(reply: &Value) -> Result<Limits> {
        let fields = pairs(reply);
        if fields.is_empty() {
            return Err(Error::Reply(format!("{reply:?}")));
        }
        let int = |name: &str| -> Result<Option<u64>> {
            match fields.iter().find(|(k, _)| k == name).map(|(_, v)| v) {
                None | Some(Value::Nil) => Ok(None),
                Some(v) => u64::from_redis_value_ref(v)
                    .map(Some)
                    .map_err(|_| Error::Reply(format!("{name}: {v:?}"))),
            }
        };
        let small = |n: u64| u32::try_from(n).map_err(|_| Error::Reply(format!("{n}")));
        let rate = match (int("rate")?, int("rate-per")?) {
            (Some(n), Some(per)) => Some(Rate {
                n: small(n)?,
                per: Duration::from_millis(per),
            }),
            _ => None,
        };
        Ok(Limits {
            active: int("active")?.unwrap_or(0),
            concurrency: int("concurrency")?.map(small).transpose()?,
            rate,
            rate_used: int("rate-used")?.unwrap_or(0),
            timeout: int("timeout")?.map(Duration::from_millis),
        })
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
    /// }).await?;
    /// assert_eq!(now.timeout, Some(Duration::from_secs(30)));
    /// q.limit(Limit { timeout: Setting::Off, ..Limit::default() }).await?; // the others stay
    /// q.limit(Limit::OFF).await?; // none left
    /// # Ok(())
    /// # }
    /// ```
    pub async fn limit(&self, change: Limit) -> Result<Limits> {
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
        };
        assert_eq!(words(set), "CONCURRENCY 3 RATE 100 PER 60000 TIMEOUT 1500");
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
        assert_eq!(words(two), "CONCURRENCY OFF TIMEOUT OFF");
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
        ]);
        assert_eq!(
            Limits::from_reply(&reply).unwrap(),
            Limits {
                active: 2,
                concurrency: Some(3),
                rate: None,
                rate_used: 0,
                timeout: Some(Duration::from_millis(300)),
            }
        );
        assert!(matches!(
            Limits::from_reply(&Value::Int(1)),
            Err(Error::Reply(_))
        ));
    }
}
