//! Clearing a set: `purge` deletes a set's jobs, `requeue_dead` moves the oldest dead jobs back
//! to pending; each bounded a call by the server, a partitioned queue's partitions each in turn.

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;

/// Jobs one `EMQ.PURGE` deletes unless told otherwise (the server's default).
pub const PURGE_COUNT: u32 = 1000;

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Deletes the jobs of `set` (`pending`, `scheduled`, `dead` or `waiting`; `active` is
    /// refused, [`crate::Error::Set`]): `EMQ.PURGE ... COUNT <count>` (1,000 unless given; 0 is
    /// refused before anything is sent, [`crate::Error::Argument`]) until
    /// a call deletes fewer, or as many calls as the set's size at the start takes, so jobs that
    /// keep arriving cannot hold it in the loop; how many in all. A partitioned queue's
    /// partitions are purged each (its width asked first when this handle has not learned it).
    pub async fn purge(&self, set: &str, count: Option<u32>) -> Result<u64> {
        let step = count.unwrap_or(PURGE_COUNT);
        if step == 0 {
            return Err(Error::Argument(
                "a purge deletes at least 1 job a call".into(),
            ));
        }
        self.resolved_width().await?;
        let mut total = 0;
        for part in self.parts()? {
            let queue = self.at(part);
            let size = queue.own_stats().await?.get(set).copied().flatten();
            let rounds = size.unwrap_or(0).max(0) as u64 / u64::from(step) + 2;
            for _ in 0..rounds {
                let args = [
                    set.as_bytes().to_vec(),
                    b"COUNT".to_vec(),
                    step.to_string().into_bytes(),
                ];
                let deleted = counted(queue.call("EMQ.PURGE", &args).await?)?;
                total += deleted;
                if deleted < u64::from(step) {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// Moves up to `count` (the server's default: 1,000) of the oldest dead jobs back to pending,
    /// of each partition of a partitioned queue; how many.
    pub async fn requeue_dead(&self, count: Option<u32>) -> Result<u64> {
        self.resolved_width().await?;
        let mut args = vec![b"DEAD".to_vec()];
        if let Some(n) = count {
            args.extend([b"COUNT".to_vec(), n.to_string().into_bytes()]);
        }
        let mut total = 0;
        for part in self.parts()? {
            let moved = self.at(part).call("EMQ.REQUEUE", &args).await?;
            total += counted(moved)?;
        }
        Ok(total)
    }
}

/// A reply that counts jobs.
fn counted(reply: Value) -> Result<u64> {
    u64::from_redis_value(reply).map_err(|e| Error::Reply(e.to_string()))
}
