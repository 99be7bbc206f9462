//! The producer's side: `Queue` enqueues jobs and operates a queue, over a multiplexed or a
//! cluster connection.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisError, Value};

use crate::error::{transient, Error, Result};
use crate::ids;

/// Jobs one `EMQ.MENQUEUE` carries (the server takes up to 10,000).
pub const CHUNK: usize = 1000;

/// How an enqueue places its job.
#[derive(Clone, Debug, Default)]
pub struct Enqueue {
    /// The job's id; minted here when `None`, so a retried call stays one job.
    pub id: Option<String>,
    /// Due after this long.
    pub delay: Option<Duration>,
    /// Ahead of (lower) or behind (higher) the default 0.
    pub priority: Option<i64>,
    /// Written only while no job holds this key (then the holder's id is the answer), for
    /// `unique_for` or until the holder is done or dead.
    pub unique: Option<String>,
    pub unique_for: Option<Duration>,
}

/// One queue of a deployment. Calls are retried with jittered backoff through failovers and
/// slot migrations (`TRYAGAIN`, `READONLY`, `LOADING`, lost connections).
#[derive(Clone)]
pub struct Queue<C> {
    pub(crate) conn: C,
    pub(crate) name: String,
    retries: u32,
}

/// Seconds to wait before try `attempt` (0-based): exponential, capped at 2 s, full jitter.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let cap = (50u64 << attempt.min(6)).min(2000);
    Duration::from_millis(rand::random_range(0..=cap))
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
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `command <queue> args...`, retried while the failure is transient; a refusal as its
    /// typed error.
    pub async fn call(&self, command: &str, args: &[Vec<u8>]) -> Result<Value> {
        let mut cmd = Cmd::new();
        cmd.arg(command).arg(&self.name);
        for a in args {
            cmd.arg(a.as_slice());
        }
        let mut attempt = 0;
        loop {
            let mut conn = self.conn.clone();
            match cmd.query_async::<Value>(&mut conn).await {
                Ok(v) => return Ok(v),
                Err(e) if transient(&e) && attempt < self.retries => {
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(Error::from_redis(e)),
            }
        }
    }

    /// `EMQ.MACK`: acknowledges many claimed jobs (`(id, token, result)` each) in one call,
    /// retried while the failure is transient; each job's outcome in its place (`LeaseLost` for
    /// a stale token, the others acknowledged). A call retried after the server applied it
    /// answers `LeaseLost` for its jobs.
    pub async fn ack_many(&self, jobs: &[(&str, i64, Option<&[u8]>)]) -> Result<Vec<Result<()>>> {
        let mut cmd = Cmd::new();
        cmd.arg("EMQ.MACK").arg(&self.name);
        for (id, token, result) in jobs {
            cmd.arg(*id).arg(*token);
            if let Some(result) = result {
                cmd.arg("RESULT").arg(*result);
            }
        }
        let mut attempt = 0;
        let reply = loop {
            let mut conn = self.conn.clone();
            // The raw reply: `query_async` would make an error in one place the whole reply's.
            let e = match conn.req_packed_command(&cmd).await {
                Ok(Value::ServerError(e)) => RedisError::from(e),
                Ok(v) => break v,
                Err(e) => e,
            };
            if transient(&e) && attempt < self.retries {
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
            return Err(Error::from_redis(e));
        };
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

    /// Enqueues one job now; its id.
    pub async fn enqueue(&self, payload: impl AsRef<[u8]>) -> Result<String> {
        self.enqueue_with(payload, Enqueue::default()).await
    }

    /// Enqueues one job as `how` says; its id, or the holder's for a held unique key.
    pub async fn enqueue_with(&self, payload: impl AsRef<[u8]>, how: Enqueue) -> Result<String> {
        let id = how.id.unwrap_or_else(ids::mint);
        let mut args = vec![id.clone().into_bytes(), payload.as_ref().to_vec()];
        let ms = |d: Duration| d.as_millis().to_string().into_bytes();
        if let Some(d) = how.delay {
            args.extend([b"DELAY".to_vec(), ms(d)]);
        }
        if let Some(p) = how.priority {
            args.extend([b"PRIORITY".to_vec(), p.to_string().into_bytes()]);
        }
        if let Some(key) = how.unique {
            args.extend([b"UNIQUE".to_vec(), key.into_bytes()]);
            if let Some(d) = how.unique_for {
                args.extend([b"FOR".to_vec(), ms(d)]);
            }
        }
        match self.call("EMQ.ENQUEUE", &args).await? {
            // 1: written; 0: this id was enqueued already; an id: the unique key's holder.
            Value::Int(_) => Ok(id),
            Value::BulkString(holder) => Ok(String::from_utf8_lossy(&holder).into_owned()),
            other => Err(Error::Reply(format!("{other:?}"))),
        }
    }

    /// Enqueues every payload, `CHUNK` to an atomic `EMQ.MENQUEUE`; their ids, in order.
    pub async fn enqueue_many<P: AsRef<[u8]>>(
        &self,
        payloads: impl IntoIterator<Item = P>,
    ) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut args = Vec::new();
        for p in payloads {
            let id = ids::mint();
            args.extend([id.clone().into_bytes(), p.as_ref().to_vec()]);
            out.push(id);
            if args.len() >= 2 * CHUNK {
                self.call("EMQ.MENQUEUE", &std::mem::take(&mut args))
                    .await?;
            }
        }
        if !args.is_empty() {
            self.call("EMQ.MENQUEUE", &args).await?;
        }
        Ok(out)
    }

    /// The counts of each set, the pause flag, and the limits and their use (`None`: not set).
    pub async fn stats(&self) -> Result<HashMap<String, Option<i64>>> {
        let v = self.call("EMQ.STATS", &[]).await?;
        Ok(pairs(&v)
            .into_iter()
            .map(|(k, v)| (k, i64::from_redis_value(v).ok()))
            .collect())
    }

    pub async fn cancel(&self, id: &str) -> Result<bool> {
        Ok(self.call("EMQ.CANCEL", &[id.as_bytes().to_vec()]).await? == Value::Int(1))
    }

    pub async fn requeue(&self, id: &str) -> Result<bool> {
        Ok(self.call("EMQ.REQUEUE", &[id.as_bytes().to_vec()]).await? == Value::Int(1))
    }

    /// A job's row, its set and score, as text; `None` when there is no such job.
    pub async fn job(&self, id: &str) -> Result<Option<HashMap<String, String>>> {
        let v = self.call("EMQ.JOB", &[id.as_bytes().to_vec()]).await?;
        if v == Value::Nil {
            return Ok(None);
        }
        Ok(Some(
            pairs(&v)
                .into_iter()
                .map(|(k, v)| (k, String::from_redis_value(v).unwrap_or_default()))
                .collect(),
        ))
    }

    pub async fn pause(&self) -> Result<bool> {
        Ok(self.call("EMQ.PAUSE", &[]).await? == Value::Int(1))
    }

    pub async fn resume(&self) -> Result<bool> {
        Ok(self.call("EMQ.RESUME", &[]).await? == Value::Int(1))
    }
}
