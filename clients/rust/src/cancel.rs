//! Cancelling a job with the rest of its flow (docs/flows.md, "Cancelling"). `EMQ.CANCEL` of a
//! waiting parent cancels the children that have not started only where the module reaches
//! them (the same server; on a cluster, the same slot): children in other slots would run on,
//! and their hand-overs find no parent. So the client reads the parent's tree first
//! (`EMQ.CHILDREN`, paged, and `EMQ.JOB` of each unfinished child, each job once), cancels the
//! parent, then sends `EMQ.CANCEL` for each unstarted child read, top down, below each one gone.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;

/// Most unfinished children of one parent a cancel takes, in `EMQ.CHILDREN`'s order (the
/// module's bound).
pub const CANCEL_CHILDREN: usize = 1000;
/// Most levels of children below the cancelled job the client reads.
pub const CANCEL_DEPTH: usize = 8;
/// Most jobs one cancel reads (`EMQ.JOB`) in the tree: a job with several parents is read
/// once, and a tree larger than this has its jobs past it left to run.
pub const CANCEL_READS: usize = 10_000;
/// A child in one of these states has not started: a cancel removes it.
const UNSTARTED: [&str; 3] = ["pending", "scheduled", "waiting"];
/// Children one `EMQ.CHILDREN` page carries.
const PAGE: &[u8] = b"1000";

/// A child that had not started when the tree was read: its queue, its id, and its parent's
/// place in the tree (`None`: the job cancelled).
struct Unstarted {
    queue: String,
    id: String,
    parent: Option<usize>,
}

/// The tree read so far: each unstarted child, a parent before its children, and every job
/// read (the cancelled one with them).
struct Tree {
    children: Vec<Unstarted>,
    seen: HashSet<(String, String)>,
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Removes a pending, scheduled or waiting job; a waiting parent with the children of its
    /// flow that have not started, in any slot; or ends a running job's attempt (it goes to
    /// `dead` with the error `cancelled`, see [`Queue::cancel`]): how many jobs went (0 when
    /// the job itself was not there to cancel, and then nothing else is). A child counts when its `EMQ.CANCEL`
    /// answered 1, or answered 0 and its row is gone (the module cancelled it with its parent:
    /// on one server every child, on a cluster those in the parent's slot). A child the user
    /// may not read or cancel (`NOPERM`) is left as the module leaves it. An error after the
    /// job went is [`Error::CancelIncomplete`], naming the children not yet cancelled.
    pub async fn cancel_flow(&self, id: &str) -> Result<usize> {
        self.located(id).await?.cancel_flow_of(id, false).await
    }

    /// [`Queue::cancel_flow`] of a job only while it has not started (`EMQ.CANCEL ...
    /// UNSTARTED`): a running job is left to run, and nothing goes (0).
    pub async fn cancel_unstarted(&self, id: &str) -> Result<usize> {
        self.located(id).await?.cancel_flow_of(id, true).await
    }

    async fn cancel_flow_of(&self, id: &str, unstarted: bool) -> Result<usize> {
        let mut tree = Tree {
            children: Vec::new(),
            seen: HashSet::from([(self.name.clone(), id.to_string())]),
        };
        self.read_tree(id, None, 1, &mut tree).await?;
        let went = match unstarted {
            true => self.cancel_one_unstarted(id).await?,
            false => self.cancel_one(id).await?,
        };
        if !went {
            return Ok(0);
        }
        Ok(1 + cancel_tree(&self.conn, &tree.children).await?)
    }

    /// `EMQ.CANCEL` of this one job; whether it went.
    async fn cancel_one(&self, id: &str) -> Result<bool> {
        Ok(self.call("EMQ.CANCEL", &[id.as_bytes().to_vec()]).await? == Value::Int(1))
    }

    /// `EMQ.CANCEL ... UNSTARTED` of this one job: whether it went (a job that started runs on).
    async fn cancel_one_unstarted(&self, id: &str) -> Result<bool> {
        let args = [id.as_bytes().to_vec(), b"UNSTARTED".to_vec()];
        Ok(self.call("EMQ.CANCEL", &args).await? == Value::Int(1))
    }

    /// Adds to `tree` the children of `id` that have not started, each followed by its own
    /// while `depth` is within [`CANCEL_DEPTH`], each job once and no more than
    /// [`CANCEL_READS`]. A child's read refused leaves it out; the cancelled job's must go
    /// through.
    fn read_tree<'a>(
        &'a self,
        id: &'a str,
        parent: Option<usize>,
        depth: usize,
        tree: &'a mut Tree,
    ) -> Boxed<'a, ()> {
        Box::pin(async move {
            let waiting = match self.waiting_children(id).await {
                Err(e) if parent.is_some() && refused(&e) => return Ok(()),
                other => other?,
            };
            for (name, child) in waiting {
                if tree.seen.len() > CANCEL_READS {
                    return Ok(());
                }
                if !tree.seen.insert((name.clone(), child.clone())) {
                    continue;
                }
                let queue = Queue::new(self.conn.clone(), name.clone());
                let state = match queue.job(&child).await {
                    Err(e) if refused(&e) => continue,
                    row => row?.and_then(|r| r.get("state").cloned()),
                };
                let Some(state) = state.filter(|s| UNSTARTED.contains(&s.as_str())) else {
                    continue;
                };
                tree.children.push(Unstarted {
                    queue: name,
                    id: child,
                    parent,
                });
                if state == "waiting" && depth < CANCEL_DEPTH {
                    let at = Some(tree.children.len() - 1);
                    let id = tree.children[tree.children.len() - 1].id.clone();
                    queue.read_tree(&id, at, depth + 1, tree).await?;
                }
            }
            Ok(())
        })
    }

    /// The `(queue, id)` of `id`'s unfinished children, page by page, up to
    /// [`CANCEL_CHILDREN`] in scan order.
    async fn waiting_children(&self, id: &str) -> Result<Vec<(String, String)>> {
        let mut found = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let args: [&[u8]; 5] = [id.as_bytes(), b"CURSOR", &cursor, b"COUNT", PAGE];
            let reply = self.call("EMQ.CHILDREN", &args.map(<[u8]>::to_vec)).await?;
            // A child acked with no result may carry a null.
            type Row = (String, String, String, Option<Vec<u8>>);
            let (next, rows) = <(Vec<u8>, Vec<Row>)>::from_redis_value_ref(&reply)
                .map_err(|_| Error::Reply(format!("{reply:?}")))?;
            for (queue, child, status, _) in rows {
                if status != "waiting" {
                    continue;
                }
                found.push((queue, child));
                if found.len() == CANCEL_CHILDREN {
                    return Ok(found);
                }
            }
            if next == b"0" {
                return Ok(found);
            }
            cursor = next;
        }
    }
}

/// After the job went: `EMQ.CANCEL` of each child read whose parent went, top down; how many
/// went. An error other than `NOPERM` is [`Error::CancelIncomplete`] with the children left.
async fn cancel_tree<C: ConnectionLike + Clone + Send + Sync + 'static>(
    conn: &C,
    tree: &[Unstarted],
) -> Result<usize> {
    let mut went = Vec::with_capacity(tree.len());
    let mut gone = 0;
    for (i, child) in tree.iter().enumerate() {
        went.push(false);
        if child.parent.is_some_and(|p| !went[p]) {
            continue; // it started since: its own run on
        }
        let queue = Queue::new(conn.clone(), child.queue.clone());
        // A child that started since runs on: only one that has not started goes.
        let removed = match queue.cancel_one_unstarted(&child.id).await {
            // Where the module reached it, it cancelled it already, unless it started since.
            Ok(false) => queue.job(&child.id).await.map(|row| row.is_none()),
            other => other,
        };
        match removed {
            Ok(removed) => {
                went[i] = removed;
                gone += usize::from(removed);
            }
            Err(e) if refused(&e) => {} // the module too skips a child it may not write
            Err(e) => {
                return Err(Error::CancelIncomplete {
                    cancelled: 1 + gone,
                    remaining: remaining(tree, &went, i),
                    source: Box::new(e),
                })
            }
        }
    }
    Ok(gone)
}

/// The children from `from` on that a cancel stopped at `from` leaves: each whose parent is
/// the job cancelled, went, or is itself left.
fn remaining(tree: &[Unstarted], went: &[bool], from: usize) -> Vec<(String, String)> {
    let mut left = vec![false; tree.len()];
    let mut out = Vec::new();
    for j in from..tree.len() {
        let keep = match tree[j].parent {
            None => true,
            Some(p) if p < from => went[p],
            Some(p) => left[p],
        };
        if keep {
            left[j] = true;
            out.push((tree[j].queue.clone(), tree[j].id.clone()));
        }
    }
    out
}

/// Whether `error` is the server refusing the user the keys or the command (`NOPERM`).
fn refused(error: &Error) -> bool {
    matches!(error, Error::Redis(e) if e.code() == Some("NOPERM"))
}
