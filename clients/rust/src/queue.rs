//! The producer's side: `Queue` enqueues jobs and operates a queue, over a multiplexed or a
//! cluster connection; with `wait_replicas`, each write is followed by `WAIT` on its connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisError, Value};

use crate::children::{read_children, Children};
use crate::error::{transient, Error, Result};
use crate::events::{answered, now_ns};
use crate::headers;
use crate::span::{summed, Width};

pub use crate::enqueue::{Enqueue, CHUNK, REROUTES};

/// One queue of a deployment. Calls are retried with jittered backoff through failovers and
/// slot migrations (`TRYAGAIN`, `READONLY`, `LOADING`, lost connections).
///
/// A partitioned queue (docs/cluster.md, "A queue bigger than one primary") is reached through
/// its name as any other: the handle learns its width from the first refusal
/// (`EMQSPANNED`), from [`Queue::width`] or from its own [`Queue::span`], keeps it for its
/// clones too, and sends each job to its partition (by its group, else its id). A call on one
/// job by id ([`Queue::job`], [`Queue::cancel`], [`Queue::requeue`], [`Queue::children`]) goes
/// to the partition its id routes to once the width is known: a grouped job routes by its
/// group, so reach it through its group's partition, or through a worker's [`Job`] handle,
/// which carries the queue it was claimed from. A schedule goes to the partition its name
/// routes to ([`Queue::cron`]); the listings walk the partitions ([`Queue::jobs`],
/// [`Queue::groups`]) and [`Queue::crons`] and [`Queue::metrics`] gather them
/// ([`Queue::stats`] adds them up once the width is known). `uncron`, `crons` and a walk from
/// `"0"` read the width afresh (`EMQ.WIDTH`), unless the handle was given it
/// ([`Queue::knowing_width`]); the others read it once, when unknown. A user not allowed
/// `EMQ.WIDTH` (or a server without it) reads width 0 there: an ordinary queue.
///
/// [`Job`]: crate::Job
#[derive(Clone)]
pub struct Queue<C> {
    pub(crate) conn: C,
    pub(crate) name: String,
    pub(crate) retries: u32,
    /// The width learned, shared by the clones.
    pub(crate) width: Width,
    /// This handle was given its width ([`Queue::knowing_width`]): the calls that read the
    /// width afresh (`uncron`, `crons`, a listing from `"0"`) use it instead.
    pub(crate) width_given: bool,
    /// The widths of the queues of parents named, read once and kept (shared by the clones).
    pub(crate) parents: Arc<Mutex<HashMap<String, u16>>>,
    /// Replicas each write waits for (`WAIT n timeout`), and the timeout; 0: no wait.
    pub(crate) wait_replicas: usize,
    pub(crate) wait_timeout: Duration,
}

/// What one call came to, over its tries.
pub(crate) struct Sent {
    /// The reply; a server error as its typed `Err`, and so is a lost connection or a timeout.
    pub reply: Result<Value>,
    /// A try before the last got no answer: it may have been applied, so a refusal after it
    /// may be the answer to that try's effect.
    pub unsure: bool,
    /// What `WAIT` reported after the last try (0 when it was refused or never answered);
    /// `None` without a wait.
    pub replicas: Option<i64>,
    /// When the first try was sent and the last one answered (Unix-epoch nanoseconds).
    pub sent_ns: u64,
    pub answered_ns: u64,
}

/// Seconds to wait before try `attempt` (0-based): exponential, capped at 2 s, full jitter.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let cap = (50u64 << attempt.min(6)).min(2000);
    Duration::from_millis(rand::random_range(0..=cap))
}

/// A duration in whole milliseconds, the nearest (a half up): what the server is sent.
pub(crate) fn millis(d: Duration) -> u128 {
    (d.as_nanos() + 500_000) / 1_000_000
}

/// A timeout in milliseconds; a positive one that rounds to 0 is refused before sending
/// ([`Error::Argument`]) rather than sent as 0. Zero itself is sent, and the server refuses it.
pub(crate) fn timeout_ms(d: Duration) -> Result<u128> {
    duration_ms(d, "a timeout")
}

/// `timeout_ms` for any duration the server takes from 1 ms, `what` naming it in the refusal.
pub(crate) fn duration_ms(d: Duration, what: &str) -> Result<u128> {
    match millis(d) {
        0 if !d.is_zero() => Err(Error::Argument(format!(
            "{what} of {d:?} rounds to 0 ms: the least is 1 ms"
        ))),
        ms => Ok(ms),
    }
}

/// An `EMQ.MACK` reply as each job's outcome in its place.
pub(crate) fn places(reply: Result<Value>) -> Result<Vec<Result<()>>> {
    let reply = reply?;
    let Value::Array(places) = reply else {
        return Err(Error::Reply(format!("{reply:?}")));
    };
    Ok(places
        .into_iter()
        .map(|place| match place {
            Value::Int(1) => Ok(()),
            Value::ServerError(e) => Err(Error::from_redis(e.into())),
            other => Err(Error::Reply(format!("{other:?}"))),
        })
        .collect())
}

/// The error of a pipeline that came back short.
fn no_reply(what: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "a pipeline came back short",
        what.to_string(),
    ))
}

/// A map reply (a flat array under RESP2, a map under RESP3) as pairs.
pub(crate) fn pairs(v: &Value) -> Vec<(String, Value)> {
    let text = |k: &Value| String::from_redis_value_ref(k).unwrap_or_default();
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?), kv.get(1)?.clone())))
            .collect(),
        _ => Vec::new(),
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    pub fn new(conn: C, name: impl Into<String>) -> Self {
        Queue {
            conn,
            name: name.into(),
            retries: 8,
            width: Width::unknown(),
            width_given: false,
            parents: Arc::default(),
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
        }
    }

    /// Follows each enqueue with `WAIT replicas timeout` on the same connection (pipelined: on
    /// a cluster connection it reaches the primary that took the write, the node of the
    /// queue's slot), and answers [`Error::NotReplicated`] when fewer replicas confirmed it.
    /// `WAIT` holds the connection it is sent on until it answers, up to `timeout` (at least
    /// 1 ms; `WAIT` with 0 would wait for ever). 0 replicas: no wait (the default).
    pub fn wait_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How often a call is tried again after a transient failure (a failover, a reshard, a
    /// lost connection), with jittered backoff: 8 unless set ([`Worker::retries`] for a
    /// worker's calls).
    ///
    /// [`Worker::retries`]: crate::Worker::retries
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The widths of parent queues kept (`resolve`, flow.rs).
    pub(crate) fn parent_widths(&self) -> MutexGuard<'_, HashMap<String, u16>> {
        self.parents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `command <queue> args...`, retried while the failure is transient; a refusal as its
    /// typed error.
    pub async fn call(&self, command: &str, args: &[Vec<u8>]) -> Result<Value> {
        self.send(&self.command(command, args), false).await.reply
    }

    /// `command <queue> args...` as a command.
    pub(crate) fn command(&self, command: &str, args: &[Vec<u8>]) -> Cmd {
        let mut cmd = Cmd::new();
        cmd.arg(command).arg(&self.name);
        for a in args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// Sends `cmd`, followed by `WAIT` in the same pipeline when `wait` and the queue waits for
    /// replicas, retried while the failure is transient. The raw reply is kept (`query_async`
    /// would make an error in one place of an `EMQ.MACK` reply the whole reply's).
    pub(crate) async fn send(&self, cmd: &Cmd, wait: bool) -> Sent {
        let waiting = wait && self.wait_replicas > 0;
        let mut pipe = redis::pipe();
        if waiting {
            pipe.add_command(cmd.clone())
                .cmd("WAIT")
                .arg(self.wait_replicas)
                .arg(self.wait_timeout.as_millis().max(1) as u64);
        }
        let sent_ns = now_ns();
        let mut attempt = 0;
        let mut unsure = false;
        loop {
            let mut conn = self.conn.clone();
            let (reply, replicas) = if waiting {
                match conn.req_packed_commands(&pipe, 0, 2).await {
                    Ok(mut values) => {
                        let confirmed = values
                            .pop()
                            .and_then(|v| i64::from_redis_value(v).ok())
                            .unwrap_or(0);
                        (
                            values.pop().ok_or_else(|| no_reply("WAIT")),
                            Some(confirmed),
                        )
                    }
                    Err(e) => (Err(e), Some(0)),
                }
            } else {
                (conn.req_packed_command(cmd).await, None)
            };
            let e = match reply {
                Ok(Value::ServerError(e)) => RedisError::from(e),
                Ok(v) => {
                    return Sent {
                        reply: Ok(v),
                        unsure,
                        replicas,
                        sent_ns,
                        answered_ns: now_ns(),
                    }
                }
                Err(e) => e,
            };
            if transient(&e) && attempt < self.retries {
                unsure |= !answered(&e);
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
            return Sent {
                reply: Err(Error::from_redis(e)),
                unsure,
                replicas,
                sent_ns,
                answered_ns: now_ns(),
            };
        }
    }

    /// `EMQ.MACK`: acknowledges many claimed jobs (`(id, token, result)` each) in one call,
    /// retried while the failure is transient; each job's outcome in its place (`LeaseLost` for
    /// a stale token, `Cancelled` for a job cancelled while it ran, the others acknowledged). A
    /// call retried after the server applied it answers `LeaseLost` for its jobs.
    pub async fn ack_many(&self, jobs: &[(&str, i64, Option<&[u8]>)]) -> Result<Vec<Result<()>>> {
        let sent = self.mack(jobs, false).await;
        places(sent.reply)
    }

    /// `EMQ.MACK` for `jobs`, followed by `WAIT` when `wait` and the queue waits for replicas.
    pub(crate) async fn mack(&self, jobs: &[(&str, i64, Option<&[u8]>)], wait: bool) -> Sent {
        let mut cmd = Cmd::new();
        cmd.arg("EMQ.MACK").arg(&self.name);
        for (id, token, result) in jobs {
            cmd.arg(*id).arg(*token);
            if let Some(result) = result {
                cmd.arg("RESULT").arg(*result);
            }
        }
        self.send(&cmd, wait).await
    }

    /// One `EMQ.MENQUEUE` of `args`; the replicas its wait reported when they fell short.
    pub(crate) async fn menqueue(&self, args: Vec<Vec<u8>>) -> Result<Option<i64>> {
        let sent = self.send(&self.command("EMQ.MENQUEUE", &args), true).await;
        sent.reply?;
        Ok(self.confirmed(sent.replicas).err())
    }

    /// The replicas a wait reported, as an `Err` when they fell short of the queue's.
    pub(crate) fn confirmed(&self, replicas: Option<i64>) -> std::result::Result<(), i64> {
        match replicas {
            Some(r) if r < self.wait_replicas as i64 => Err(r),
            _ => Ok(()),
        }
    }

    /// The outcomes of a parent's children (`EMQ.CHILDREN`, paged to the end).
    pub async fn children(&self, id: &str) -> Result<Children> {
        let at = self.located(id).await?;
        let at = at.as_ref();
        read_children(|cursor| async move {
            let args = [id.as_bytes().to_vec(), b"CURSOR".to_vec(), cursor];
            at.call("EMQ.CHILDREN", &args).await
        })
        .await
    }

    /// The counts of each set (`waiting`: the parents waiting for children; `pending`: every
    /// ready job, grouped or not), how many named groups the queue knows (`groups`: with ready
    /// or active jobs, a limit of their own or a pause; [`Queue::groups`]), the pause flag,
    /// and the limits and their use, `timeout` in ms (`None`: not set); typed, [`Queue::limits`].
    /// Of a partitioned queue (its width read first by a handle that knows none), the
    /// partitions' added up (the counts and
    /// the concurrency and rate limits; `paused` when any is; the rest the first partition's;
    /// each one's: [`Queue::partition_stats`]).
    pub async fn stats(&self) -> Result<HashMap<String, Option<i64>>> {
        if self.resolved_width().await? > 0 {
            return Ok(summed(&self.partition_stats().await?));
        }
        self.own_stats().await
    }

    /// `EMQ.STATS` of this queue's own name.
    pub(crate) async fn own_stats(&self) -> Result<HashMap<String, Option<i64>>> {
        let v = self.call("EMQ.STATS", &[]).await?;
        Ok(pairs(&v)
            .into_iter()
            .map(|(k, v)| (k, i64::from_redis_value(v).ok()))
            .collect())
    }

    /// Removes a pending, scheduled or waiting job, a waiting parent with the unstarted
    /// children of its flow ([`Queue::cancel_flow`]); whether the job went. A running (active)
    /// job's attempt is ended at once: the job goes to `dead` with the error `cancelled`, and
    /// its worker's next renewal or settle is refused [`Error::Cancelled`] (a worker of this
    /// client then drops the handler's future, sends nothing for it, and frees its slot). A
    /// cancelled job can be requeued ([`Queue::requeue`]) to run again.
    pub async fn cancel(&self, id: &str) -> Result<bool> {
        Ok(self.cancel_flow(id).await? > 0)
    }

    pub async fn requeue(&self, id: &str) -> Result<bool> {
        Ok(self
            .located(id)
            .await?
            .call("EMQ.REQUEUE", &[id.as_bytes().to_vec()])
            .await?
            == Value::Int(1))
    }

    /// A job's row, its set and score, as text (its `headers` as the row keeps them, a
    /// `key:value` line each); `None` when there is no such job.
    pub async fn job(&self, id: &str) -> Result<Option<HashMap<String, String>>> {
        let v = self
            .located(id)
            .await?
            .call("EMQ.JOB", &[id.as_bytes().to_vec()])
            .await?;
        if v == Value::Nil {
            return Ok(None);
        }
        Ok(Some(
            pairs(&v)
                .into_iter()
                .map(|(k, v)| {
                    let text = match k.as_str() {
                        // A map of its own: its lines as the row keeps them, `key:value`.
                        "headers" => headers::pairs_of(&v)
                            .into_iter()
                            .map(|(k, v)| format!("{k}:{v}"))
                            .collect::<Vec<_>>()
                            .join("\n"),
                        _ => String::from_redis_value(v).unwrap_or_default(),
                    };
                    (k, text)
                })
                .collect(),
        ))
    }

    /// Pauses the queue's claims; whether it changed. A partitioned queue's partitions are
    /// paused each (its width asked first when this handle has not learned it).
    pub async fn pause(&self) -> Result<bool> {
        self.on_every_part("EMQ.PAUSE").await
    }

    /// Resumes the queue's claims, each partition's of a partitioned queue; whether it changed.
    pub async fn resume(&self) -> Result<bool> {
        self.on_every_part("EMQ.RESUME").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_sent_as_the_nearest_whole_ms() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(499)), 0);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_micros(1499)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs_f64(0.2999999)), 300);
        assert_eq!(millis(Duration::from_secs(60)), 60_000);
    }

    #[test]
    fn a_positive_timeout_that_rounds_to_nothing_is_refused_before_sending() {
        assert!(matches!(
            timeout_ms(Duration::from_micros(499)),
            Err(Error::Argument(_))
        ));
        assert!(matches!(
            timeout_ms(Duration::from_nanos(1)),
            Err(Error::Argument(_))
        ));
        assert_eq!(timeout_ms(Duration::from_micros(500)).unwrap(), 1);
        assert_eq!(timeout_ms(Duration::from_micros(2600)).unwrap(), 3);
        // Zero is the server's to refuse, as any other timeout out of its bounds.
        assert_eq!(timeout_ms(Duration::ZERO).unwrap(), 0);
    }
}
