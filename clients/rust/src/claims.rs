//! The worker's claims: one loop per primary over the queues it claims there (a queue, or a
//! partitioned queue's partitions on that primary, docs/cluster.md "Claiming"). A loop claims
//! each of its queues in turn without blocking while they give jobs; once a whole round gave
//! none, it blocks on the next with `WAKE` naming the others, so a worker holds one blocked
//! claim per primary, and a job ready in any of them is claimed within a round. A loop of one
//! queue blocks on it at every claim, as a worker of an ordinary queue always did.
//!
//! The worker's concurrency is one semaphore the loops share: a claim asks for as many jobs as
//! it holds permits, each job keeps one until its task ends, and a claim holds at most its
//! loop's share, so every loop can block at once while the concurrency is at least the number
//! of primaries (below it, the loops take turns, first come first served), and a primary that
//! stops answering under a claim keeps no more than its share from the others.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::children::Reader;
use crate::error::{server_full, transient, Error};
use crate::events::now_ns;
use crate::job::{jobs_of, Job};
use crate::queue::{backoff, Queue};
use crate::slot::slot;

/// One queue a loop claims: its name, a handle on it for the jobs' calls, and the reader its
/// jobs read their children with.
pub(crate) struct Part<C> {
    pub queue: Queue<C>,
    pub reader: Reader,
}

/// What a loop hands each job it claimed to: the worker, which runs it.
pub(crate) trait Dispatch<C>: Send + Sync {
    /// Runs `job`, claimed from `part` by a claim sent at `sent_ns` and answered at
    /// `answered_ns`, holding `permit` until it ends.
    fn dispatch(
        &self,
        part: &Part<C>,
        job: Job,
        permit: OwnedSemaphorePermit,
        sent_ns: u64,
        answered_ns: u64,
    );
}

/// What the loops share.
pub(crate) struct Claims<C> {
    /// The connection the claims go on (a blocked claim holds its node's).
    pub conn: C,
    pub lease_ms: u64,
    pub block_ms: u64,
    /// Most jobs one claim asks for.
    pub batch: usize,
    /// The worker's concurrency, as permits.
    pub permits: Arc<Semaphore>,
    /// Most permits a blocked claim holds.
    pub share: usize,
    /// The worker's shutdown.
    pub stop: CancellationToken,
    /// Whether a blocking claim of any loop was answered (jobs, none, or its timeout): the
    /// claims and the grouping they follow work, so the worker's regroups start their backoff
    /// again ([`Tries`]).
    pub answered: AtomicBool,
}

/// Failures in a row, each waited out with a backoff that grows with them; forgotten only when
/// a claim shows that the claims work again. A blocking claim answered shows it (with its
/// `WAKE`, it names every queue of its loop, on the primary the loop takes them for); a claim
/// without `BLOCK` that gave nothing does not: it answers from one queue, through the cluster
/// client's redirects. Were the count forgotten at every answer, a blocking claim refused again
/// and again (a `WAKE` queue's `MOVED`, a failover's `UNBLOCKED`) after a round of claims without
/// `BLOCK` would be retried, or regrouped, with no wait at all.
#[derive(Debug, Default)]
pub(crate) struct Tries(u32);

impl Tries {
    /// The wait after one more failure.
    pub fn failed(&mut self) -> Duration {
        let wait = backoff(self.0);
        self.0 = self.0.saturating_add(1);
        wait
    }

    /// A claim answered: the failures are forgotten when it shows the claims work (`proven`).
    pub fn answered(&mut self, proven: bool) {
        if proven {
            self.0 = 0;
        }
    }
}

/// How a loop ended.
pub(crate) enum LoopEnd {
    /// The worker stops, or another loop asked for a regroup.
    Stopped,
    /// The queue's width or the cluster's slots changed: the queues are to be grouped again.
    Regroup,
    /// The queue named was refused as partitioned (`EMQSPANNED <width>`: spanned since the
    /// worker read its width): the worker learns the width, and groups its queues again.
    Spanned { queue: String, width: u16 },
    /// A claim failed for good.
    Failed(Error),
}

/// Why a claim of `queue` ending in error `e` ends the loop, if it does.
fn ending(e: RedisError, queue: &str, woke: bool) -> Option<LoopEnd> {
    if transient(&e) || server_full(&e) {
        return None;
    }
    // A `WAKE` queue another node owns now ends the wait with MOVED: the slots moved.
    if woke && matches!(e.code(), Some("MOVED" | "ASK")) {
        return Some(LoopEnd::Regroup);
    }
    match Error::from_redis(e) {
        // The queue was partitioned since the worker read its width.
        Error::Spanned { width, .. } => Some(LoopEnd::Spanned {
            queue: queue.to_string(),
            width,
        }),
        e => Some(LoopEnd::Failed(e)),
    }
}

/// Up to `want` permits (at least 1, waited for); `None` when `stop` or `regroup` came first.
async fn permits(
    claims: &Claims<impl Sized>,
    want: usize,
    regroup: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    let first = claims.permits.clone().acquire_owned();
    let mut held = tokio::select! {
        p = first => p.ok()?,
        _ = claims.stop.cancelled() => return None,
        _ = regroup.cancelled() => return None,
    };
    let more = want
        .saturating_sub(1)
        .min(claims.permits.available_permits());
    if more > 0 {
        if let Ok(extra) = claims.permits.clone().try_acquire_many_owned(more as u32) {
            held.merge(extra);
        }
    }
    Some(held)
}

/// Claims around `parts` (one primary's queues) until the worker stops or `regroup` is
/// cancelled (a loop that ends otherwise cancels it, for every loop), handing each job to
/// `dispatch`. A claim sent is always awaited: its jobs would be leased to no one.
pub(crate) async fn claim_loop<C>(
    claims: Arc<Claims<C>>,
    parts: Vec<Part<C>>,
    dispatch: Arc<dyn Dispatch<C>>,
    regroup: CancellationToken,
) -> LoopEnd
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let (mut next, mut misses, mut failures) = (0, 0, Tries::default());
    while !claims.stop.is_cancelled() && !regroup.is_cancelled() {
        let part = &parts[next];
        let blocking = parts.len() == 1 || misses >= parts.len();
        // At most the loop's share, blocking or not: a primary that stops answering under a
        // claim keeps no more than its share of the permits from the other loops.
        let want = claims.batch.min(claims.share);
        let Some(mut held) = permits(&claims, want, &regroup).await else {
            break;
        };
        let mut claim = Cmd::new();
        claim
            .arg("EMQ.CLAIM")
            .arg(&part.queue.name)
            .arg("COUNT")
            .arg(held.num_permits())
            .arg("LEASE")
            .arg(claims.lease_ms);
        let woke = blocking && parts.len() > 1;
        if blocking {
            claim.arg("BLOCK").arg(claims.block_ms);
        }
        if woke {
            claim.arg("WAKE").arg(parts.len() - 1);
            for other in parts.iter().filter(|p| p.queue.name != part.queue.name) {
                claim.arg(&other.queue.name);
            }
        }
        let sent_ns = now_ns();
        let reply: Value = match claim.query_async(&mut claims.conn.clone()).await {
            Ok(v) => v,
            Err(e) => match ending(e, &part.queue.name, woke) {
                Some(ended) => {
                    regroup.cancel(); // the other loops end with this one
                    return ended;
                }
                None => {
                    // A failover, a reshard, a lost connection, a server out of memory or
                    // disk: claim again after a while.
                    drop(held);
                    tokio::select! {
                        _ = tokio::time::sleep(failures.failed()) => {}
                        _ = claims.stop.cancelled() => {}
                        _ = regroup.cancelled() => {}
                    }
                    continue;
                }
            },
        };
        let answered_ns = now_ns();
        let jobs = match jobs_of(reply, &part.reader, &part.queue.name) {
            Ok(jobs) => jobs,
            Err(e) => {
                regroup.cancel();
                return LoopEnd::Failed(e);
            }
        };
        // Jobs show the claims work too (a loop that never blocks, busy, forgets its failures).
        failures.answered(blocking || !jobs.is_empty());
        if blocking {
            claims.answered.store(true, Ordering::SeqCst);
        }
        // A round that gave nothing ends in a blocked claim, whose end starts a new round.
        misses = match (jobs.is_empty(), blocking) {
            (true, false) => misses + 1,
            _ => 0,
        };
        for job in jobs {
            let Some(permit) = held.split(1) else {
                break; // never more jobs than asked for
            };
            dispatch.dispatch(part, job, permit, sent_ns, answered_ns);
        }
        next = (next + 1) % parts.len();
    }
    LoopEnd::Stopped
}

/// `names` grouped by the primary that owns each one's slot, as `CLUSTER SLOTS` on `conn`
/// answers; one group where it is refused (a server that is no cluster's node), and a name
/// whose slot no primary owns is a group of its own.
pub(crate) async fn by_primary<C>(conn: &C, names: Vec<String>) -> Vec<Vec<String>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut cmd = Cmd::new();
    cmd.arg("CLUSTER").arg("SLOTS");
    let ranges = match cmd.query_async::<Value>(&mut conn.clone()).await {
        Ok(reply) => slot_ranges(&reply),
        Err(_) => return vec![names],
    };
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for name in names {
        let s = slot(&name);
        let owner = ranges
            .iter()
            .find(|(from, to, _)| (*from..=*to).contains(&s))
            .map_or_else(|| format!("slot {s}"), |(_, _, node)| node.clone());
        match groups.iter_mut().find(|(node, _)| *node == owner) {
            Some((_, group)) => group.push(name),
            None => groups.push((owner, vec![name])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// The ranges of a `CLUSTER SLOTS` reply: first and last slot, and the primary's
/// `host:port`.
fn slot_ranges(reply: &Value) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        _ => String::new(),
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Value::Int(from), Value::Int(to), Value::Array(primary)) =
                (fields.first()?, fields.get(1)?, fields.get(2)?)
            else {
                return None;
            };
            let node = format!("{}:{}", text(primary.first()?), text(primary.get(1)?));
            Some((u16::try_from(*from).ok()?, u16::try_from(*to).ok()?, node))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_forgotten_only_when_a_claim_shows_the_claims_work() {
        let mut tries = Tries::default();
        assert!(tries.failed() <= Duration::from_millis(50));
        tries.failed();
        // Claims without BLOCK that gave nothing, as after each regroup: still two failures.
        tries.answered(false);
        tries.answered(false);
        assert_eq!(tries.0, 2);
        assert!(tries.failed() <= Duration::from_millis(200));
        assert_eq!(tries.0, 3);
        tries.answered(true);
        assert_eq!(tries.0, 0);
        for _ in 0..100 {
            assert!(tries.failed() <= Duration::from_secs(2), "capped");
        }
    }

    #[test]
    fn a_cluster_slots_reply_reads_as_ranges_and_their_primaries() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let range = |from, to, port| {
            Value::Array(vec![
                Value::Int(from),
                Value::Int(to),
                Value::Array(vec![text("127.0.0.1"), Value::Int(port), text("id")]),
                Value::Array(vec![text("127.0.0.1"), Value::Int(port + 1), text("r")]),
            ])
        };
        let reply = Value::Array(vec![range(0, 5460, 7000), range(5461, 16383, 7002)]);
        assert_eq!(
            slot_ranges(&reply),
            vec![
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 16383, "127.0.0.1:7002".to_string())
            ]
        );
        assert!(slot_ranges(&Value::Nil).is_empty());
    }
}
