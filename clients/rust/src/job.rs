//! What a handler sees: the claimed [`Job`] (its id, payload and attempt, and the flags the
//! worker sets as it learns the attempt's fate: a lost lease, a cancel, a deadline passed), and
//! what it ends in ([`Outcome`], [`Failure`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::children::{Children, Reader};
use crate::error::{Error, Result};
use crate::headers;

/// A claimed job, as its handler sees it.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: String,
    /// The queue it was claimed from: the worker's, or one of its partitions when the queue
    /// is partitioned (its outcome, renewals and children go there).
    pub queue: String,
    pub payload: Vec<u8>,
    /// This attempt (the lease token): 1 for the first.
    pub attempt: i64,
    /// The headers it was enqueued with ([`Enqueue::headers`](crate::Enqueue::headers)), the
    /// trace context among them, in order: empty for none.
    pub headers: Vec<(String, String)>,
    pub(crate) lost: Arc<AtomicBool>,
    pub(crate) cancelled: Arc<AtomicBool>,
    pub(crate) timed_out: Arc<AtomicBool>,
    /// What the next renewal sends as the row's `progress` ([`Job::set_progress`]).
    progress: Arc<Mutex<Option<Vec<u8>>>>,
    reader: Reader,
}

impl Job {
    /// The outcomes of this job's children, when it is a parent: `(queue, id)` -> status and
    /// data (`EMQ.CHILDREN`, paged to the end).
    pub async fn children(&self) -> Result<Children> {
        self.reader.0.children(&self.id).await
    }

    /// Whether the lease was lost (it ran out and another attempt took the job): the
    /// handler's outcome will not be sent.
    pub fn lease_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Whether the job was cancelled (`EMQ.CANCEL`) while this attempt ran, as a renewal or
    /// the settle learned it. The worker drops the handler's future then; work the handler
    /// handed elsewhere (a thread, `spawn_blocking`, a spawned task) holding a clone of the
    /// job can check this to stop.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Whether this attempt ran past its deadline (the job's `timeout`, or its queue's), as a
    /// renewal learned it (`EMQTIMEOUT`). The worker drops the handler's future then, as for a
    /// cancel; work handed elsewhere holding a clone of the job can check this to stop.
    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }

    /// Sets the job's progress (a fraction, a step, a JSON document: bytes as the handler
    /// chooses, at most `emq.max-payload-bytes`): each renewal from now on sends it
    /// (`EMQ.RENEW ... PROGRESS`), and the row's `progress` shows it ([`Queue::job`],
    /// the console). Clones of the job share it.
    ///
    /// [`Queue::job`]: crate::Queue::job
    pub fn set_progress(&self, progress: impl AsRef<[u8]>) {
        *self.progress_slot() = Some(progress.as_ref().to_vec());
    }

    /// The progress the next renewal sends, if the handler set one.
    pub(crate) fn progress(&self) -> Option<Vec<u8>> {
        self.progress_slot().clone()
    }

    /// Drops the progress the server refused (too large), unless the handler set another since.
    pub(crate) fn drop_progress(&self, refused: &[u8]) {
        let mut slot = self.progress_slot();
        if slot.as_deref() == Some(refused) {
            *slot = None;
        }
    }

    fn progress_slot(&self) -> MutexGuard<'_, Option<Vec<u8>>> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value of the header `key`, if the job has it.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// How a handler ends other than well.
#[derive(Debug)]
pub enum Failure {
    /// Fail this attempt, to be retried after this long (`RETRY-IN`; at most a year, the
    /// server's bound, to which a longer wait is cut).
    Retry(Duration, String),
    /// Fail it with this error; the server retries it with backoff, then buries it.
    Error(String),
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::Error(e.to_string())
    }
}

/// What a handler's run came to.
pub type Outcome = std::result::Result<Option<Vec<u8>>, Failure>;

/// The jobs of an `EMQ.CLAIM` reply (`[[id, payload, attempts], ...]`, a job's headers a
/// fourth element where it has some; null on a timeout, and empty when a claim's `WAKE` woke
/// it), claimed from `queue`.
pub(crate) fn jobs_of(reply: Value, reader: &Reader, queue: &str) -> Result<Vec<Job>> {
    let items = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => return Err(Error::Reply(format!("{other:?}"))),
    };
    items
        .into_iter()
        .map(|item| {
            let mut fields = match item {
                Value::Array(fields) if (3..=4).contains(&fields.len()) => fields,
                other => return Err(Error::Reply(format!("{other:?}"))),
            };
            let headers = match fields.len() {
                4 => fields
                    .pop()
                    .map(|h| headers::pairs_of(&h))
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            let (id, payload, attempt) =
                <(String, Vec<u8>, i64)>::from_redis_value(Value::Array(fields))
                    .map_err(|e| Error::Reply(e.to_string()))?;
            Ok(Job {
                id,
                queue: queue.to_string(),
                payload,
                attempt,
                headers,
                lost: Arc::new(AtomicBool::new(false)),
                cancelled: Arc::new(AtomicBool::new(false)),
                timed_out: Arc::new(AtomicBool::new(false)),
                progress: Arc::default(),
                reader: reader.clone(),
            })
        })
        .collect()
}
