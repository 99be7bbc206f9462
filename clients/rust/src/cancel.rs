//! Cancelling a job with the rest of its flow (docs/flows.md, "Cancelling"). `EMQ.CANCEL` of a
//! waiting parent cancels the children that have not started only where the module reaches
//! them (the same server; on a cluster, the same slot): children in other slots would run on,
//! and their hand-overs find no parent. So the client reads the parent's tree first
//! (`EMQ.CHILDREN` and `EMQ.JOB` of each unfinished child), cancels the parent, then each
//! unstarted child in another slot on its own queue, and below each child cancelled, its own,
//! bounded as the module is: 1,000 children a parent, 8 levels.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

use redis::aio::ConnectionLike;
use redis::Value;

use crate::children::ChildStatus;
use crate::error::Result;
use crate::queue::Queue;
use crate::slot::slot;

/// Most unfinished children of one parent a cancel takes (the module's bound).
pub const CANCEL_CHILDREN: usize = 1000;
/// Most levels of children below the cancelled job (the module's bound).
pub const CANCEL_DEPTH: usize = 8;
/// A child in one of these states has not started: a cancel removes it.
const UNSTARTED: [&str; 3] = ["pending", "scheduled", "waiting"];

/// A child that had not started when its parent's tree was read: whether the module reaches
/// it from its parent (the same slot), and its own unstarted children.
struct Unstarted<C> {
    queue: Queue<C>,
    id: String,
    in_reach: bool,
    below: Vec<Unstarted<C>>,
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Removes a pending, scheduled or waiting job; a waiting parent with the children of its
    /// flow that have not started, in any slot: how many jobs went (0 when the job itself was
    /// not there to cancel, and then nothing else is). A child counts when this call's
    /// `EMQ.CANCEL` removed it, or when its row is gone after its parent's (the module
    /// cancelled it in reach).
    pub async fn cancel_flow(&self, id: &str) -> Result<usize> {
        let below = self.unstarted(id, 1).await?;
        if !self.cancel_one(id).await? {
            return Ok(0);
        }
        Ok(1 + cancel_below(below, &mut HashSet::new()).await?)
    }

    /// `EMQ.CANCEL` of this one job; whether it went.
    async fn cancel_one(&self, id: &str) -> Result<bool> {
        Ok(self.call("EMQ.CANCEL", &[id.as_bytes().to_vec()]).await? == Value::Int(1))
    }

    /// The children of `id` that have not started, at most [`CANCEL_CHILDREN`], each with its
    /// own below it while `depth` is within [`CANCEL_DEPTH`] (a job that is no parent has none).
    fn unstarted<'a>(&'a self, id: &'a str, depth: usize) -> Boxed<'a, Vec<Unstarted<C>>> {
        Box::pin(async move {
            let mut found = Vec::new();
            if depth > CANCEL_DEPTH {
                return Ok(found);
            }
            let children = self.children(id).await?;
            let waiting = children
                .into_iter()
                .filter(|(_, child)| child.status == ChildStatus::Waiting)
                .take(CANCEL_CHILDREN);
            for ((name, child), _) in waiting {
                let queue = Queue::new(self.conn.clone(), name.clone());
                let row = queue.job(&child).await?;
                let state = row.and_then(|r| r.get("state").cloned());
                let Some(state) = state.filter(|s| UNSTARTED.contains(&s.as_str())) else {
                    continue;
                };
                let below = if state == "waiting" {
                    queue.unstarted(&child, depth + 1).await?
                } else {
                    Vec::new()
                };
                let in_reach = slot(&name) == slot(&self.name);
                found.push(Unstarted {
                    queue,
                    id: child,
                    in_reach,
                    below,
                });
            }
            Ok(found)
        })
    }
}

/// After their parent went: each child in another slot cancelled here, each in reach looked up
/// (the module cancelled it with its parent unless it started since), and below each one gone,
/// its own; how many went (a child of two parents counted once).
fn cancel_below<C: ConnectionLike + Clone + Send + Sync + 'static>(
    children: Vec<Unstarted<C>>,
    seen: &mut HashSet<(String, String)>,
) -> Boxed<'_, usize> {
    Box::pin(async move {
        let mut gone = 0;
        for child in children {
            if !seen.insert((child.queue.name.clone(), child.id.clone())) {
                continue;
            }
            let mut removed = !child.in_reach && child.queue.cancel_one(&child.id).await?;
            if !removed {
                // On a single server every child is in reach: the module took it already.
                removed = child.queue.job(&child.id).await?.is_none();
            }
            if removed {
                gone += 1 + cancel_below(child.below, seen).await?;
            }
        }
        Ok(gone)
    })
}
