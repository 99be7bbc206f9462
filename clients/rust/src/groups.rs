//! A queue's groups (docs/groups.md): one group's own limits (`EMQ.LIMIT <queue> GROUP
//! <group>`), pausing and resuming one group (`EMQ.PAUSE`/`EMQ.RESUME <queue> GROUP <group>`),
//! and the listing of the named groups, the largest backlog first (`EMQ.GROUPS`). The queue's
//! defaults for every group are [`Limit::group_concurrency`](crate::Limit::group_concurrency)
//! and [`Limit::group_rate`](crate::Limit::group_rate).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::limit::{count_option, rate_option, Fields, Rate, Setting};
use crate::queue::{duration_ms, Queue};

/// A change of one group's own limits, for [`Queue::group_limit`]; `GroupLimit::default()`
/// changes nothing (a report). A limit of its own stands instead of the queue's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupLimit {
    /// The group's jobs active at once (`CONCURRENCY <n>`); `Off`: the default applies again.
    pub concurrency: Setting<u32>,
    /// The group's claims in a sliding window (`RATE <n> PER <ms>`).
    pub rate: Setting<Rate>,
}

/// One group's limits and their use, as `EMQ.LIMIT <queue> GROUP <group>` answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupLimits {
    pub group: String,
    /// Its jobs active now, and ready (waiting for a claim).
    pub active: u64,
    pub ready: u64,
    /// Its own concurrency limit (`None`: the queue's default applies).
    pub concurrency: Option<u32>,
    /// The queue's default for every group.
    pub group_concurrency: Option<u32>,
    /// Its limit holds it back now: claims pass over it until one of its jobs leaves `active`.
    pub held: bool,
    /// Its own rate (`None`: the default applies; `None` too from a server without rates).
    pub rate: Option<Rate>,
    /// Its claims in the rate window now.
    pub rate_used: u64,
    /// The queue's default rate for every group.
    pub group_rate: Option<Rate>,
}

impl GroupLimit {
    /// The command's options after `GROUP <group>`.
    fn options(&self) -> Vec<Vec<u8>> {
        let mut args = count_option(b"CONCURRENCY", self.concurrency);
        args.extend(rate_option(b"RATE", self.rate));
        args
    }
}

impl GroupLimits {
    fn from_reply(reply: &Value) -> Result<GroupLimits> {
        let fields = Fields::of(reply)?;
        Ok(GroupLimits {
            group: fields.text("group")?,
            active: fields.count("active")?,
            ready: fields.count("ready")?,
            concurrency: fields.small("concurrency")?,
            group_concurrency: fields.small("group-concurrency")?,
            held: fields.flag("held")?,
            rate: fields.rate("rate", "rate-per")?,
            rate_used: fields.count("rate-used")?,
            group_rate: fields.rate("group-rate", "group-rate-per")?,
        })
    }
}

/// One named group of a queue, as [`Queue::groups`] lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub group: String,
    pub ready: u64,
    pub active: u64,
    /// Its concurrency limit in effect: its own, or the queue's default (`None`: none).
    pub concurrency: Option<u32>,
    pub paused: bool,
    /// When a pause given a time ends (unix ms); `None` for one until resumed, or no pause.
    pub paused_until: Option<u64>,
    /// Its limit holds it back now.
    pub held: bool,
    /// Its rate in effect, own or default (`None` too from a server without rates).
    pub rate: Option<Rate>,
    /// Its claims in the rate window now.
    pub rate_used: u64,
}

impl Group {
    fn from_reply(reply: &Value) -> Result<Group> {
        let fields = Fields::of(reply)?;
        Ok(Group {
            group: fields.text("group")?,
            ready: fields.count("ready")?,
            active: fields.count("active")?,
            concurrency: fields.small("concurrency")?,
            paused: fields.flag("paused")?,
            paused_until: fields.int("paused-until")?,
            held: fields.flag("held")?,
            rate: fields.rate("rate", "rate-per")?,
            rate_used: fields.count("rate-used")?,
        })
    }
}

/// `EMQ.GROUPS`' `[<next-cursor>, [<group>, ...]]`.
fn groups_page(reply: &Value) -> Result<(String, Vec<Group>)> {
    let malformed = || Error::Reply(format!("{reply:?}"));
    let Value::Array(parts) = reply else {
        return Err(malformed());
    };
    let [cursor, Value::Array(found)] = parts.as_slice() else {
        return Err(malformed());
    };
    let cursor = String::from_redis_value_ref(cursor).map_err(|_| malformed())?;
    let groups = found.iter().map(Group::from_reply).collect::<Result<_>>()?;
    Ok((cursor, groups))
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Changes one group's own limits as `change` says (`EMQ.LIMIT <queue> GROUP <group>`), and
    /// reports the group's limits and use then. A limit raised or removed gives a group held
    /// at it its turn back.
    /// A group lives in one partition of a partitioned queue: the calls on one group go there,
    /// by the width this handle knows.
    ///
    /// ```no_run
    /// # use echomq_client::{GroupLimit, Limit, Queue, Setting};
    /// # async fn example(q: Queue<redis::aio::MultiplexedConnection>) -> echomq_client::Result<()> {
    /// q.limit(Limit { group_concurrency: Setting::Set(4), ..Limit::default() }).await?;
    /// let big = q.group_limit("bigcorp", GroupLimit {
    ///     concurrency: Setting::Set(20),
    ///     ..GroupLimit::default()
    /// }).await?;
    /// assert_eq!((big.concurrency, big.group_concurrency), (Some(20), Some(4)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn group_limit(&self, group: &str, change: GroupLimit) -> Result<GroupLimits> {
        let mut args = vec![b"GROUP".to_vec(), group.as_bytes().to_vec()];
        args.extend(change.options());
        GroupLimits::from_reply(&self.located(group).await?.call("EMQ.LIMIT", &args).await?)
    }

    /// One group's limits and their use, changing nothing.
    pub async fn group_limits(&self, group: &str) -> Result<GroupLimits> {
        self.group_limit(group, GroupLimit::default()).await
    }

    /// Stops claims taking the group's jobs (it keeps them, and takes enqueues): for `time`
    /// (sent rounded to the nearest ms; a positive one under half a ms is refused before
    /// anything is sent, [`Error::Argument`]), after which the server resumes it, or until
    /// [`Queue::resume_group`]. Whether it was not paused already.
    pub async fn pause_group(&self, group: &str, time: Option<Duration>) -> Result<bool> {
        let mut args = vec![b"GROUP".to_vec(), group.as_bytes().to_vec()];
        if let Some(d) = time {
            let ms = duration_ms(d, "a pause")?;
            args.extend([b"FOR".to_vec(), ms.to_string().into_bytes()]);
        }
        Ok(self.located(group).await?.call("EMQ.PAUSE", &args).await? == Value::Int(1))
    }

    /// Lets claims take the group's jobs again; whether it was paused.
    pub async fn resume_group(&self, group: &str) -> Result<bool> {
        let args = [b"GROUP".to_vec(), group.as_bytes().to_vec()];
        Ok(self.located(group).await?.call("EMQ.RESUME", &args).await? == Value::Int(1))
    }

    /// One page of the queue's named groups (`EMQ.GROUPS`), the largest backlog first, after
    /// `cursor` (`"0"`: from the start), up to `count` (the server's default: 100): the next
    /// cursor (`"0"` at the end) and the groups. A group is listed while it has jobs, a limit of
    /// its own or a pause; one whose backlog changes between two pages may come twice, or not
    /// at all, in one walk.
    ///
    /// A partitioned queue's groups are walked partition by partition (each group lives in
    /// one), the largest backlog first within each: the cursor is `"<partition>:<cursor>"`, a
    /// page comes from one partition, and a page is empty only at the end (walk.rs).
    /// The width read, and a cursor refused, as [`Queue::listing`] has them.
    pub async fn groups(&self, cursor: &str, count: Option<u32>) -> Result<(String, Vec<Group>)> {
        self.listing(cursor, |queue, inner| async move {
            let mut args = vec![b"CURSOR".to_vec(), inner.into_bytes()];
            if let Some(n) = count {
                args.extend([b"COUNT".to_vec(), n.to_string().into_bytes()]);
            }
            groups_page(&queue.call("EMQ.GROUPS", &args).await?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_group_change_sends_only_what_it_sets_or_removes() {
        let words = |change: GroupLimit| -> String {
            let words: Vec<String> = change
                .options()
                .into_iter()
                .map(|w| String::from_utf8(w).unwrap())
                .collect();
            words.join(" ")
        };
        assert_eq!(words(GroupLimit::default()), "");
        let both = GroupLimit {
            concurrency: Setting::Off,
            rate: Setting::Set(Rate {
                n: 2,
                per: Duration::from_secs(60),
            }),
        };
        assert_eq!(words(both), "CONCURRENCY OFF RATE 2 PER 60000");
    }

    #[test]
    fn a_page_reads_as_its_cursor_and_groups_with_nulls_not_set() {
        // RESP2: each group a flat array; a server without group rates sends none of theirs.
        let group = Value::Array(vec![
            bulk("group"),
            bulk("acme"),
            bulk("ready"),
            Value::Int(5),
            bulk("active"),
            Value::Int(1),
            bulk("concurrency"),
            Value::Int(2),
            bulk("paused"),
            Value::Int(1),
            bulk("paused-until"),
            Value::Int(1_796_491_628_157),
            bulk("held"),
            Value::Int(0),
        ]);
        let reply = Value::Array(vec![bulk("2"), Value::Array(vec![group])]);
        let (cursor, groups) = groups_page(&reply).unwrap();
        assert_eq!(cursor, "2");
        assert_eq!(
            groups,
            vec![Group {
                group: "acme".into(),
                ready: 5,
                active: 1,
                concurrency: Some(2),
                paused: true,
                paused_until: Some(1_796_491_628_157),
                held: false,
                rate: None,
                rate_used: 0,
            }]
        );
        assert!(matches!(groups_page(&Value::Int(0)), Err(Error::Reply(_))));
    }

    #[test]
    fn a_group_report_reads_its_name_and_use() {
        let reply = Value::Map(vec![
            (bulk("group"), bulk("bigcorp")),
            (bulk("active"), Value::Int(3)),
            (bulk("ready"), Value::Int(7)),
            (bulk("concurrency"), Value::Nil),
            (bulk("group-concurrency"), Value::Int(4)),
            (bulk("held"), Value::Int(1)),
            (bulk("rate"), Value::Int(2)),
            (bulk("rate-per"), Value::Int(60_000)),
            (bulk("rate-used"), Value::Int(2)),
            (bulk("group-rate"), Value::Nil),
            (bulk("group-rate-per"), Value::Nil),
        ]);
        let rate = Rate {
            n: 2,
            per: Duration::from_secs(60),
        };
        assert_eq!(
            GroupLimits::from_reply(&reply).unwrap(),
            GroupLimits {
                group: "bigcorp".into(),
                active: 3,
                ready: 7,
                concurrency: None,
                group_concurrency: Some(4),
                held: true,
                rate: Some(rate),
                rate_used: 2,
                group_rate: None,
            }
        );
    }
}
