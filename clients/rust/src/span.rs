//! A partitioned queue from a [`Queue`]'s side (docs/cluster.md, "A queue bigger than one
//! primary"): the width it knows (from an `EMQSPANNED` refusal, [`Queue::width`] or its own
//! [`Queue::span`]), shared by its clones; where a job or a call on one job goes; marking and
//! unmarking the partitions; and the calls on the whole queue, sent to every partition.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisError, Value};

use crate::error::{Error, Result};
use crate::limit::{Limit, Limits, Rate, Setting};
use crate::partition::{name, route, MAX_PARTITIONS};
use crate::queue::{pairs, Queue};

/// The width a queue's handle has not learned yet (widths are at most 1,024).
const UNKNOWN: u16 = u16::MAX;

/// Counts `EMQ.STATS` gives that add up over the partitions; the others are the first
/// partition's, but `paused`, set when any is.
const SUMMED: [&str; 9] = [
    "pending",
    "active",
    "scheduled",
    "dead",
    "waiting",
    "groups",
    "concurrency",
    "rate",
    "rate-used",
];

/// A queue's place in a partitioned queue, as `EMQ.WIDTH` answers: `width` (0 for an ordinary
/// queue or a retired partition), the queue it is a partition of (`of`; a retired partition
/// keeps it) and its place there (`index`; none once retired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub width: u16,
    pub of: Option<String>,
    pub index: Option<u16>,
}

/// The width a queue's handles know, shared by the clones of one [`Queue`].
#[derive(Clone, Debug)]
pub(crate) struct Width(Arc<AtomicU16>);

impl Width {
    pub(crate) fn unknown() -> Width {
        Width(Arc::new(AtomicU16::new(UNKNOWN)))
    }

    /// An ordinary queue's (a partition's among them): known to be 0.
    pub(crate) fn ordinary() -> Width {
        Width(Arc::new(AtomicU16::new(0)))
    }

    /// The width learned, `None` before any.
    pub(crate) fn known(&self) -> Option<u16> {
        Some(self.0.load(Ordering::SeqCst)).filter(|w| *w != UNKNOWN)
    }

    pub(crate) fn learn(&self, width: u16) {
        self.0.store(width, Ordering::SeqCst);
    }

    /// The width learned, else `width`, learned now.
    pub(crate) fn known_or(&self, width: u16) -> u16 {
        match self
            .0
            .compare_exchange(UNKNOWN, width, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => width,
            Err(known) => known,
        }
    }
}

/// Whether `EMQ.WIDTH` was refused to the user as a command (`NOPERM User <u> has no
/// permissions to run the 'emq.width' command`, or Redis's "this user has no permissions to
/// run ...") or is a command the server does not know (`ERR unknown command ...`): errors
/// `Error::from_redis` leaves as [`Error::Redis`]. Any other `NOPERM` (a key the user may not
/// access) is a real error.
fn width_unreadable(e: &RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => e
            .detail()
            .is_some_and(|d| d.to_ascii_lowercase().contains("has no permissions to run")),
        Some("ERR") => e
            .detail()
            .is_some_and(|d| d.to_ascii_lowercase().starts_with("unknown command")),
        _ => false,
    }
}

/// The names of the `width` partitions of `queue`, in order; [`Error::Argument`] for a name
/// that cannot be partitioned or a width out of 1–1,024.
pub(crate) fn partitions(queue: &str, width: u16) -> Result<Vec<String>> {
    (0..width)
        .map(|i| name(queue, i, width))
        .collect::<Option<Vec<_>>>()
        .filter(|names| !names.is_empty())
        .ok_or_else(|| {
            Error::Argument(format!(
                "no partitions of {queue:?} over {width}: a name of 1-112 printable bytes \
                 without braces, 1 to {MAX_PARTITIONS} partitions"
            ))
        })
}

/// Whether `queue` is named as a partition of some queue over `width` (`<q>~<i>-<j>`, as
/// [`name`] names them).
pub(crate) fn is_partition(queue: &str, width: u16) -> bool {
    let Some((base, place)) = queue.rsplit_once('~') else {
        return false;
    };
    let index = place
        .split_once('-')
        .and_then(|(i, _)| i.parse::<u16>().ok());
    index.and_then(|i| name(base, i, width)).as_deref() == Some(queue)
}

/// Partition `index`'s share of a limit `total` over `width`: ⌊total/width⌋, plus one for the
/// first `total mod width`, so the shares add up to `total`.
pub(crate) fn share_of(total: u32, index: u16, width: u16) -> u32 {
    let width = u32::from(width.max(1));
    total / width + u32::from(u32::from(index) < total % width)
}

/// `change` as partition `index` of `width` takes it: a concurrency or rate split evenly.
fn limit_share(change: Limit, index: u16, width: u16) -> Limit {
    let concurrency = match change.concurrency {
        Setting::Set(n) => Setting::Set(share_of(n, index, width)),
        other => other,
    };
    let rate = match change.rate {
        Setting::Set(r) => Setting::Set(Rate {
            n: share_of(r.n, index, width),
            per: r.per,
        }),
        other => other,
    };
    Limit {
        concurrency,
        rate,
        ..change
    }
}

/// Refuses a concurrency or rate limit below `width`, which would leave a partition none.
fn check_split(change: &Limit, width: u16) -> Result<()> {
    let below = |n: u32| n < u32::from(width);
    let small = match (change.concurrency, change.rate) {
        (Setting::Set(n), _) if below(n) => Some(("concurrency", n)),
        (_, Setting::Set(r)) if below(r.n) => Some(("rate", r.n)),
        _ => None,
    };
    match small {
        Some((what, n)) => Err(Error::Argument(format!(
            "a {what} limit of {n} over {width} partitions leaves a partition none: the least \
             is {width}"
        ))),
        None => Ok(()),
    }
}

/// The stats of the partitions as one queue's: [`SUMMED`] added up (a limit none of them has
/// stays `None`), `paused` when any is, the rest the first partition's.
pub(crate) fn summed(
    each: &[(String, HashMap<String, Option<i64>>)],
) -> HashMap<String, Option<i64>> {
    let mut all = each.first().map(|(_, s)| s.clone()).unwrap_or_default();
    for key in SUMMED {
        let values = each
            .iter()
            .filter_map(|(_, s)| s.get(key).copied().flatten());
        let total = values.fold(None, |sum: Option<i64>, v| Some(sum.unwrap_or(0) + v));
        all.insert(key.to_string(), total);
    }
    let paused = each.iter().any(|(_, s)| s.get("paused") == Some(&Some(1)));
    all.insert("paused".to_string(), Some(i64::from(paused)));
    all
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// A handle on partition (or any other ordinary queue) `queue` of the same connection and
    /// settings.
    pub(crate) fn at(&self, queue: impl Into<String>) -> Queue<C> {
        Queue {
            name: queue.into(),
            width: Width::ordinary(),
            width_given: false,
            ..self.clone()
        }
    }

    /// Where a job, or a call on one, with this key (its group, else its id) goes: this queue,
    /// or its partition by the width known.
    pub(crate) fn placed(&self, key: &str) -> Cow<'_, Queue<C>> {
        match self.width.known().filter(|w| *w > 0) {
            Some(w) => match name(&self.name, route(w, key), w) {
                Some(partition) => Cow::Owned(self.at(partition)),
                None => Cow::Borrowed(self),
            },
            None => Cow::Borrowed(self),
        }
    }

    /// [`Queue::placed`] once the width is known: read first ([`Queue::resolved_width`]) by a
    /// handle that knows none yet, as the other clients do, so a fresh handle finds a job of a
    /// partitioned queue in its partition.
    pub(crate) async fn located(&self, key: &str) -> Result<Cow<'_, Queue<C>>> {
        self.resolved_width().await?;
        Ok(self.placed(key))
    }

    /// Learns `width` from an `EMQSPANNED` refusal; whether the job is to be routed again. Not
    /// when this handle's queue is itself a partition of that width: it refused a job that
    /// routes to another of its queue's partitions, which routing by its name would not find.
    /// Width 0 comes from a retired partition (docs/cluster.md, "Changing the width"): send to
    /// the queue's own name; not again when the job went there already (this handle knew no
    /// width, so its queue's own name is the retired partition).
    pub(crate) fn relearn(&self, width: u16) -> bool {
        if width == 0 && self.width.known().unwrap_or(0) == 0 {
            return false;
        }
        if is_partition(&self.name, width) {
            return false;
        }
        self.width.learn(width);
        true
    }

    /// The width this handle (and its clones) knows: learned from a refusal, [`Queue::width`]
    /// or [`Queue::span`]; `None` before any. Enqueues treat `None` as an ordinary queue.
    pub fn known_width(&self) -> Option<u16> {
        self.width.known()
    }

    /// This handle, knowing `width` (0: an ordinary queue, or a partition) as read elsewhere,
    /// so it sends no `EMQ.WIDTH`. The calls that otherwise read the width afresh
    /// ([`Queue::uncron`], [`Queue::crons`], a [`Queue::jobs`] or [`Queue::groups`] walk from
    /// `"0"`) and [`Queue::metrics`] use the width given instead, on this handle and the clones
    /// made from it. These reads are never refused on a stale width: a handle given one reads
    /// stale results (the partitions of the old width, or the queue's own name), and nothing
    /// corrects it. So it is for short-lived handles built from a width just read: the console
    /// builds one per reading. The width is learned into what this handle shares with its
    /// clones (a clone taken before the call knows it too); an enqueue's or claim's refusal
    /// relearns it there, as any learned width.
    pub fn knowing_width(mut self, width: u16) -> Self {
        self.width.learn(width);
        self.width_given = true;
        self
    }

    /// The queues that hold this queue's jobs: its partitions by the width known, else itself.
    pub(crate) fn parts(&self) -> Result<Vec<String>> {
        match self.width.known().filter(|w| *w > 0) {
            Some(w) => partitions(&self.name, w),
            None => Ok(vec![self.name.clone()]),
        }
    }

    /// The queue's place (`EMQ.WIDTH`), as the server has it; nothing learned.
    pub(crate) async fn place(&self) -> Result<Place> {
        let reply = self.call("EMQ.WIDTH", &[]).await?;
        let fields = pairs(&reply);
        let field = |k: &str| {
            fields
                .iter()
                .find(|(f, _)| f == k)
                .map(|(_, v)| v)
                .filter(|v| **v != Value::Nil)
        };
        let width = field("width")
            .and_then(|v| u16::from_redis_value_ref(v).ok())
            .ok_or_else(|| Error::Reply(format!("{reply:?}")))?;
        Ok(Place {
            width,
            of: field("of").and_then(|v| String::from_redis_value_ref(v).ok()),
            index: field("index").and_then(|v| u16::from_redis_value_ref(v).ok()),
        })
    }

    /// The queue's partitions (`EMQ.WIDTH`): 0 for an ordinary queue, a partition itself
    /// included (a worker or producer on a partition's name treats it as any queue). The width
    /// is learned, for the enqueues and calls after it.
    pub async fn width(&self) -> Result<u16> {
        let place = self.place().await?;
        let width = if place.of.is_some() { 0 } else { place.width };
        self.width.learn(width);
        Ok(width)
    }

    /// The width as [`Queue::width`] reads and learns it; but where `EMQ.WIDTH` is refused to
    /// the user as a command (`NOPERM ... has no permissions to run`: a user without
    /// `+emq.width`) or a server lacks it (`ERR unknown command`), the width this handle and
    /// its clones know already (learned from an `EMQSPANNED` refusal), else 0, an ordinary
    /// queue, learned so: such a user can still use its calls on an ordinary queue, and on a
    /// partitioned one once a refusal taught it the width.
    pub(crate) async fn read_width(&self) -> Result<u16> {
        match self.width().await {
            Err(Error::Redis(e)) if width_unreadable(&e) => Ok(self.width.known_or(0)),
            read => read,
        }
    }

    /// The width known, else read ([`Queue::read_width`]).
    pub(crate) async fn resolved_width(&self) -> Result<u16> {
        match self.width.known() {
            Some(w) => Ok(w),
            None => self.read_width().await,
        }
    }

    /// The width as the server has it now ([`Queue::read_width`]), for the calls that must not
    /// miss a span or unspan since the width was learned; a handle given its width
    /// ([`Queue::knowing_width`]) uses that.
    pub(crate) async fn current_width(&self) -> Result<u16> {
        match self.width_given {
            true => self.resolved_width().await,
            false => self.read_width().await,
        }
    }

    /// Spreads this empty queue over `width` partitions (1 to 1,024; docs/cluster.md): marks
    /// each partition, on its own node (`EMQ.SPAN <partition> <width> OF <queue> INDEX <i>`),
    /// then the queue (`EMQ.SPAN <queue> <width>`); whether anything changed (marking again
    /// with the same width changes nothing). A queue spanned over another width, a partition,
    /// or a queue that holds jobs is refused [`Error::Span`] before any partition is marked
    /// (its `EMQ.WIDTH` and `EMQ.STATS` read first). The width is learned.
    pub async fn span(&self, width: u16) -> Result<bool> {
        let names = partitions(&self.name, width)?;
        self.check_span(width).await?;
        let mut changed = false;
        for (i, partition) in names.iter().enumerate() {
            let mut cmd = Cmd::new();
            cmd.arg("EMQ.SPAN")
                .arg(partition)
                .arg(width)
                .arg("OF")
                .arg(&self.name)
                .arg("INDEX")
                .arg(i);
            changed |= self.send(&cmd, false).await.reply? == Value::Int(1);
        }
        let args = [width.to_string().into_bytes()];
        changed |= self.call("EMQ.SPAN", &args).await? == Value::Int(1);
        self.width.learn(width);
        Ok(changed)
    }

    /// Refuses, as the server's `EMQ.SPAN` of the queue would, a span over `width` of a queue
    /// spanned over another, of a partition, or of a queue that holds jobs: so that a refused
    /// span leaves no partition marked as this queue's. (A retired partition may be spanned.)
    async fn check_span(&self, width: u16) -> Result<()> {
        let place = self.place().await?;
        let refused = |why: String| Err(Error::Span(format!("EMQSPAN {why}")));
        if let (Some(of), Some(index)) = (&place.of, place.index) {
            let n = place.width;
            return refused(format!(
                "the queue is partition {index} of {n} of {of}; EMQ.UNSPAN it first to change that"
            ));
        }
        match place.width {
            0 => {}
            n if n == width => return Ok(()),
            n => {
                return refused(format!(
                    "the queue is spanned over {n} partitions; EMQ.UNSPAN it first to change that"
                ))
            }
        }
        let stats = self.own_stats().await?;
        let held: i64 = ["pending", "active", "scheduled", "dead", "waiting"]
            .iter()
            .filter_map(|k| stats.get(*k).copied().flatten())
            .sum();
        if held > 0 {
            return refused(
                "the queue holds jobs; span an empty queue (drain or purge it first)".into(),
            );
        }
        Ok(())
    }

    /// Makes the queue an ordinary one again (docs/cluster.md, "Changing the width"):
    /// `EMQ.UNSPAN` of each partition of the width it has, which retires it, then of the queue;
    /// whether anything changed. A partition that holds jobs is refused [`Error::Span`], and
    /// the queue stays partitioned, its partitions before that one retired: drain it and call
    /// again. A partition retired already is left so (a second `EMQ.UNSPAN` would make it an
    /// ordinary queue, which takes the jobs of a producer that still holds the old width);
    /// such a producer is refused by a retired partition with width 0, and learns the queue's
    /// width anew from its own name.
    pub async fn unspan(&self) -> Result<bool> {
        let width = self.width().await?;
        let mut changed = false;
        if width > 0 {
            for partition in partitions(&self.name, width)? {
                let part = self.at(partition);
                let place = part.place().await?;
                if place.of.as_deref() == Some(self.name.as_str()) && place.index.is_some() {
                    changed |= part.call("EMQ.UNSPAN", &[]).await? == Value::Int(1);
                }
            }
        }
        changed |= self.call("EMQ.UNSPAN", &[]).await? == Value::Int(1);
        self.width.learn(0);
        Ok(changed)
    }

    /// Each partition's stats ([`Queue::stats`]), in order, by the width known; the queue's
    /// own, under its name, when it knows none.
    pub async fn partition_stats(&self) -> Result<Vec<(String, HashMap<String, Option<i64>>)>> {
        let mut each = Vec::new();
        for part in self.parts()? {
            let stats = self.at(part.clone()).own_stats().await?;
            each.push((part, stats));
        }
        Ok(each)
    }

    /// [`Queue::limit`] on each partition: a concurrency or rate `L` split so that partition
    /// `i` gets ⌊L/n⌋, plus one for `i < L mod n`; a limit under `n` is refused before
    /// anything is sent ([`Error::Argument`]). What the partitions have then, added up as
    /// [`Queue::stats`] adds them.
    pub(crate) async fn limit_partitions(&self, change: Limit, width: u16) -> Result<Limits> {
        check_split(&change, width)?;
        let mut each = Vec::new();
        for (i, part) in partitions(&self.name, width)?.into_iter().enumerate() {
            let share = limit_share(change, i as u16, width);
            each.push(self.at(part).own_limit(share).await?);
        }
        Ok(Limits::added(&each))
    }

    /// `command` (`EMQ.PAUSE`, `EMQ.RESUME`) on each partition of the width known (asked when
    /// unknown), or on the queue; whether any changed.
    pub(crate) async fn on_every_part(&self, command: &str) -> Result<bool> {
        self.resolved_width().await?;
        let mut changed = false;
        for part in self.parts()? {
            changed |= self.at(part).call(command, &[]).await? == Value::Int(1);
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_limit_is_split_into_shares_that_add_up_to_it() {
        for (total, width) in [(10u32, 4u16), (12, 12), (1000, 7), (5, 5)] {
            let shares: Vec<u32> = (0..width).map(|i| share_of(total, i, width)).collect();
            assert_eq!(shares.iter().sum::<u32>(), total);
            assert!(shares.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
        }
        assert_eq!(share_of(10, 0, 4), 3);
        assert_eq!(share_of(10, 1, 4), 3);
        assert_eq!(share_of(10, 2, 4), 2);
        let change = Limit {
            concurrency: Setting::Set(10),
            rate: Setting::Set(Rate {
                n: 7,
                per: Duration::from_secs(1),
            }),
            timeout: Setting::Set(Duration::from_secs(5)),
            ..Limit::default()
        };
        let last = limit_share(change, 3, 4);
        assert_eq!(last.concurrency, Setting::Set(2));
        assert_eq!(
            last.rate,
            Setting::Set(Rate {
                n: 1,
                per: Duration::from_secs(1)
            })
        );
        assert_eq!(last.timeout, change.timeout);
    }

    #[test]
    fn a_width_refused_for_want_of_permission_or_of_the_command_reads_as_none() {
        let refusal = |line: &str| -> RedisError {
            match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
                Ok(Value::ServerError(e)) => e.into(),
                other => panic!("a server error: {other:?}"),
            }
        };
        for line in [
            "NOPERM User viewer has no permissions to run the 'emq.width' command",
            "NOPERM this user has no permissions to run the 'emq.width' command or its subcommand",
            "ERR unknown command 'EMQ.WIDTH', with args beginning with: 'q' ",
        ] {
            let e = refusal(line);
            assert!(width_unreadable(&e), "{line}");
            assert!(matches!(Error::from_redis(e), Error::Redis(_)), "{line}");
        }
        for line in [
            "NOPERM No permissions to access a key",
            "NOPERM No permissions to access a channel",
            "ERR wrong number of arguments for 'emq.width' command",
            "EMQQUEUE the queue name is not 1-128 printable bytes",
            "LOADING the server is loading",
        ] {
            assert!(!width_unreadable(&refusal(line)), "{line}");
        }
    }

    #[test]
    fn a_width_unreadable_keeps_the_one_known() {
        let width = Width::unknown();
        assert_eq!(width.known_or(0), 0, "none known: 0, learned");
        assert_eq!(width.known(), Some(0));
        let shared = width.clone();
        shared.learn(3);
        assert_eq!(width.known_or(0), 3, "a clone's learned width kept");
        assert_eq!(width.known(), Some(3));
    }

    #[test]
    fn a_limit_below_the_width_is_refused() {
        let concurrency = |n| Limit {
            concurrency: Setting::Set(n),
            ..Limit::default()
        };
        assert!(matches!(
            check_split(&concurrency(3), 4),
            Err(Error::Argument(_))
        ));
        assert!(check_split(&concurrency(4), 4).is_ok());
        assert!(check_split(&Limit::OFF, 4).is_ok());
    }

    #[test]
    fn the_partitions_stats_add_up() {
        let stats = |pending, paused, concurrency: Option<i64>| {
            HashMap::from([
                ("pending".to_string(), Some(pending)),
                ("paused".to_string(), Some(paused)),
                ("concurrency".to_string(), concurrency),
                ("timeout".to_string(), Some(300)),
            ])
        };
        let all = summed(&[
            ("a".into(), stats(2, 0, None)),
            ("b".into(), stats(5, 1, None)),
        ]);
        assert_eq!(all["pending"], Some(7));
        assert_eq!(all["paused"], Some(1));
        assert_eq!(all["concurrency"], None);
        assert_eq!(all["timeout"], Some(300));
        assert!(partitions("q{x}", 2).is_err());
        let third = name("orders~x", 2, 12).unwrap();
        assert!(is_partition(&third, 12));
        assert!(!is_partition(&third, 3), "partition 2 of 3 has other slots");
        assert!(!is_partition("orders~x", 12));
        assert!(!is_partition("orders", 12));
        assert!(partitions("q", 0).is_err());
        assert_eq!(partitions("q", 3).unwrap().len(), 3);
    }
}
