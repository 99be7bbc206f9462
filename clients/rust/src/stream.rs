//! A queue's event stream (`emq:{<queue>}:events`, docs/commands.md's `EMQ.EVENTS`): turned
//! on and off, and read as it comes (`XREAD BLOCK`) from where a reader left it.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;

/// Entries one read asks for.
pub const READ_COUNT: usize = 100;

/// One entry of a queue's event stream: its stream id, the event (`enqueued`, `claimed`,
/// `acked`, ...), and the job's id and attempt (`None` for an event of the queue itself:
/// `paused`, `resumed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueEvent {
    pub stream_id: String,
    pub event: String,
    pub id: Option<String>,
    pub attempt: Option<i64>,
}

/// A reader of a queue's event stream ([`Queue::events`]): each [`Events::next`] reads on from
/// the last entry it returned.
pub struct Events<C> {
    queue: Queue<C>,
    key: String,
    /// The id of the last entry read (or the one the reader started after).
    pub last: String,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Turns the queue's event stream on (`EMQ.EVENTS ... ON`, capped near `maxlen` entries,
    /// 10,000 unless given): from then on each transition appends an entry. Whether it changed.
    /// A partitioned queue's partitions each (its width asked first when this handle has not
    /// learned it).
    pub async fn enable_events(&self, maxlen: Option<u32>) -> Result<bool> {
        let mut args = vec![b"ON".to_vec()];
        if let Some(n) = maxlen {
            args.extend([b"MAXLEN".to_vec(), n.to_string().into_bytes()]);
        }
        self.switch_events(&args).await
    }

    /// Turns the queue's event stream off (the stream stays; each partition's); whether it
    /// changed.
    pub async fn disable_events(&self) -> Result<bool> {
        self.switch_events(&[b"OFF".to_vec()]).await
    }

    /// `EMQ.EVENTS <queue> args...` on each partition of the width known, or on the queue.
    async fn switch_events(&self, args: &[Vec<u8>]) -> Result<bool> {
        self.resolved_width().await?;
        let mut changed = false;
        for part in self.parts()? {
            changed |= self.at(part).call("EMQ.EVENTS", args).await? == Value::Int(1);
        }
        Ok(changed)
    }

    /// A reader of the queue's events after `from` (a stream id: `"0"` from the stream's first,
    /// `"$"` what comes after its newest entry now, read here once, so an entry appended
    /// between two reads that waited for nothing is read too). A blocked read holds its
    /// connection: give the queue a connection of its own for it (a multiplexed one would hold
    /// its other calls behind the read), with no response timeout shorter than the reads'
    /// `block`. A partitioned queue's events are in its partitions' streams, each read through
    /// a handle of its name ([`Queue::partition_stats`] names them): [`Error::Argument`].
    pub async fn events(&self, from: &str) -> Result<Events<C>> {
        if self.resolved_width().await? > 0 {
            return Err(Error::Argument(format!(
                "queue {} is partitioned: read each partition's events",
                self.name
            )));
        }
        let key = format!("emq:{{{}}}:events", self.name);
        let last = match from {
            "$" => {
                let mut newest = Cmd::new();
                newest
                    .arg("XREVRANGE")
                    .arg(&key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1);
                newest_id(self.send(&newest, false).await.reply?)?
            }
            from => from.to_string(),
        };
        Ok(Events {
            queue: self.clone(),
            key,
            last,
        })
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Events<C> {
    /// The entries after the last one read, waiting up to `block` (at least 1 ms) for one; none
    /// when the wait ended first. Retried as any call.
    pub async fn next(&mut self, block: Duration) -> Result<Vec<QueueEvent>> {
        let mut read = Cmd::new();
        read.arg("XREAD")
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(block.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(&self.last);
        let found = entries(self.queue.send(&read, false).await.reply?)?;
        if let Some(e) = found.last() {
            self.last = e.stream_id.clone();
        }
        Ok(found)
    }
}

/// The newest entry's id from an `XREVRANGE ... COUNT 1` reply; `0-0` for none.
fn newest_id(reply: Value) -> Result<String> {
    let entries =
        <Vec<(String, Value)>>::from_redis_value(reply).map_err(|e| Error::Reply(e.to_string()))?;
    Ok(entries
        .into_iter()
        .next()
        .map_or("0-0".into(), |(id, _)| id))
}

/// An `XREAD` reply's entries (RESP2: `[[key, entries]]`; RESP3: a map of key to entries).
fn entries(reply: Value) -> Result<Vec<QueueEvent>> {
    let streams: Vec<Value> = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, v)| v).collect(),
        other => return Err(Error::Reply(format!("{other:?}"))),
    };
    let mut out = Vec::new();
    for found in streams {
        let Value::Array(found) = found else {
            return Err(Error::Reply(format!("{found:?}")));
        };
        for entry in found {
            let (stream_id, fields) = <(String, Vec<(String, String)>)>::from_redis_value(entry)
                .map_err(|e| Error::Reply(e.to_string()))?;
            let field = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
            out.push(QueueEvent {
                stream_id,
                event: field("event").unwrap_or_default(),
                id: field("id"),
                attempt: field("attempt").and_then(|a| a.parse().ok()),
            });
        }
    }
    Ok(out)
}
