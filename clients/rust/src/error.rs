//! The error catalogue as a type: each EchoMQ refusal is a variant, any other server error
//! stays the `redis::RedisError` it was.

use redis::RedisError;

/// What a call to EchoMQ can end in.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `EMQQUEUE`: the queue name is not 1-128 printable ASCII bytes without braces.
    #[error("{0}")]
    QueueName(String),
    /// `EMQID`: a malformed branded id.
    #[error("{0}")]
    Id(String),
    /// `EMQKIND`: an id of another kind than `JOB` at enqueue.
    #[error("{0}")]
    Kind(String),
    /// `EMQPAYLOAD`: a payload over `emq.max-payload-bytes`.
    #[error("{0}")]
    Payload(String),
    /// `EMQLEASE`: the lease token is stale or missing; the job is no longer this worker's.
    #[error("{0}")]
    LeaseLost(String),
    /// `EMQCANCELLED`: the job was cancelled (`EMQ.CANCEL`) while this attempt ran; the
    /// attempt is over (the job is `dead` with the error `cancelled`), and its outcome is not
    /// taken.
    #[error("{0}")]
    Cancelled(String),
    /// `EMQTIMEOUT`: a renewal of an attempt that ran past its deadline (the job's `timeout`,
    /// or its queue's, counted from the claim); the attempt is over (the server retries the
    /// job with backoff, or buries it in `dead`, with the error `timeout`), and its outcome is
    /// not taken.
    #[error("{0}")]
    Timeout(String),
    /// `EMQTYPE`: an unknown key type.
    #[error("{0}")]
    Type(String),
    /// `EMQKEY`: a key outside the grammar.
    #[error("{0}")]
    Key(String),
    /// `EMQCURSOR`: a cursor no reply gave.
    #[error("{0}")]
    Cursor(String),
    /// `EMQSET`: an unknown set, or a purge of the active one.
    #[error("{0}")]
    Set(String),
    /// `EMQCRON`: a repeating schedule refused.
    #[error("{0}")]
    Cron(String),
    /// `EMQPARENT`: a parent refused a child: no such parent, a parent not waiting, or one
    /// that has registered all its children.
    #[error("{0}")]
    Parent(String),
    /// A flow refused by the client before anything was sent: over [`MAX_PARENTS`] parents,
    /// the same parent twice, a batch of no jobs.
    ///
    /// [`MAX_PARENTS`]: crate::flow::MAX_PARENTS
    #[error("{0}")]
    Flow(String),
    /// An argument refused by the client before anything was sent: a positive timeout under
    /// half a millisecond, which would be sent as 0 ms; a flow's job with a group the server
    /// would refuse.
    #[error("{0}")]
    Argument(String),
    /// `EMQSPANNED <n>`: the queue is partitioned over `width` partitions (an enqueue or a
    /// claim sent to its own name), or this partition of `width` does not take the job (its
    /// group, else its id, routes to another). A [`Queue`](crate::Queue) learns the width from
    /// it and routes; it reaches the caller only when routing again did not help.
    #[error("{message}")]
    Spanned { width: u16, message: String },
    /// `EMQSPAN`: a span or unspan refused: another width, a queue or partition that holds
    /// jobs, a partition marked as another queue's.
    #[error("{0}")]
    Span(String),
    /// `EMQSPANNED` without a width the client can read.
    #[error("{0}")]
    Emq(String),
    /// The server speaks another major version of the protocol than this client.
    #[error("{0}")]
    Version(String),
    /// A batched call (`EMQ.MACK`) this job's outcome went in failed as a whole.
    #[error("the batched call failed: {0}")]
    Batch(String),
    /// The write was taken by the primary but not confirmed by `wanted` replicas (a queue's
    /// `wait_replicas`: `WAIT` reported `replicas`): it may be lost in a failover. `ids`: the
    /// jobs of the writes not confirmed; `enqueued`: every job the call enqueued (all of them
    /// taken by the primary), in order.
    #[error("{} job(s) taken by the primary but confirmed by {replicas} of the {wanted} replicas asked: they may be lost in a failover", ids.len())]
    NotReplicated {
        ids: Vec<String>,
        replicas: i64,
        wanted: usize,
        enqueued: Vec<String>,
    },
    /// A cancel ([`Queue::cancel_flow`]) that failed after its job went: `remaining`, the
    /// `(queue, id)` of the children not yet cancelled, top down (the caller may cancel them
    /// one by one); `cancelled`, how many jobs went before, the job itself counted; `source`,
    /// the failure.
    ///
    /// [`Queue::cancel_flow`]: crate::Queue::cancel_flow
    #[error("the cancel stopped after {cancelled} job(s), {} child(ren) not cancelled: {source}", remaining.len())]
    CancelIncomplete {
        cancelled: usize,
        remaining: Vec<(String, String)>,
        #[source]
        source: Box<Error>,
    },
    /// A reply of a shape the protocol does not give.
    #[error("unexpected reply: {0}")]
    Reply(String),
    /// Anything else from the client or the server, as it came.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

impl Error {
    /// A server error as its typed variant, when EchoMQ's.
    pub fn from_redis(e: RedisError) -> Error {
        // The reply as the server sent it: its code, then its text.
        let detail = || match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_string(),
            _ => e.to_string(),
        };
        match e.code() {
            Some("EMQQUEUE") => Error::QueueName(detail()),
            Some("EMQID") => Error::Id(detail()),
            Some("EMQKIND") => Error::Kind(detail()),
            Some("EMQPAYLOAD") => Error::Payload(detail()),
            Some("EMQLEASE") => Error::LeaseLost(detail()),
            Some("EMQCANCELLED") => Error::Cancelled(detail()),
            Some("EMQTIMEOUT") => Error::Timeout(detail()),
            Some("EMQSET") => Error::Set(detail()),
            Some("EMQCRON") => Error::Cron(detail()),
            Some("EMQPARENT") => Error::Parent(detail()),
            Some("EMQSPANNED") => {
                let width = e
                    .detail()
                    .and_then(|d| d.split_whitespace().next()?.parse().ok());
                match width {
                    Some(width) => Error::Spanned {
                        width,
                        message: detail(),
                    },
                    None => Error::Emq(detail()),
                }
            }
            Some("EMQSPAN") => Error::Span(detail()),
            Some("EMQTYPE") => Error::Type(detail()),
            Some("EMQKEY") => Error::Key(detail()),
            Some("EMQCURSOR") => Error::Cursor(detail()),
            _ => Error::Redis(e),
        }
    }
}

/// Replies that mean "not now, here": a slot in migration, a blocked call ended by a failover,
/// a promotion or demotion, a server loading, a cluster without a majority.
const TRANSIENT_CODES: [&str; 6] = [
    "TRYAGAIN",
    "UNBLOCKED",
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "CLUSTERDOWN",
];

/// Whether trying the same call again, a moment later, may succeed.
pub fn transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        // A cluster connection with no node to send to while the slot map changes.
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || e.code().is_some_and(|c| TRANSIENT_CODES.contains(&c))
}

/// Whether the server refused a write for want of room: over its `maxmemory` (`OOM`) or unable
/// to persist (`MISCONF`). It lasts until memory or disk is freed: a worker's claim waits it
/// out rather than stopping.
pub fn server_full(e: &RedisError) -> bool {
    e.code().is_some_and(|c| c == "OOM" || c == "MISCONF")
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::transient;
    use redis::{ErrorKind, RedisError};

    #[test]
    fn a_cluster_connection_without_a_node_for_a_moment_is_tried_again_and_a_bad_call_is_not() {
        let no_node = RedisError::from((ErrorKind::ClusterConnectionNotFound, "no node"));
        assert!(transient(&no_node));
        let bad = RedisError::from((ErrorKind::InvalidClientConfig, "bad url"));
        assert!(!transient(&bad));
    }
}
