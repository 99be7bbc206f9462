//! One claimed job's run: the worker hands each job a claim returned to a task of its own
//! ([`Runner`]), which runs the handler with its lease renewed beside it, drops the handler's
//! future when a renewal learns the job was cancelled or ran past its deadline, and settles
//! the outcome (an acknowledgement through the batching settler, or `EMQ.FAIL`) on the queue
//! the job came from: a partitioned queue's partition.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::FromRedisValue;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::claims::{Dispatch, Part};
use crate::error::{Error, Result};
use crate::events::{answer_of, now_ns, EventKind, Fields, Hook, SettleAction};
use crate::flow::MAX_DELAY;
use crate::job::{Failure, Job, Outcome};
use crate::queue::Queue;
use crate::renewals::Renewals;
use crate::settle::{replicated, Ack};
use crate::trace;
use crate::unwind::guarded;
use crate::worker::{Counts, MAX_ERROR};

/// Runs each job the claims hand over as a task of its own.
pub(crate) struct Runner<H> {
    pub acks: mpsc::UnboundedSender<Ack>,
    pub handler: Arc<H>,
    /// Set once the worker stopped waiting for its tasks: an outcome then is not sent.
    pub closed: Arc<AtomicBool>,
    /// Cancelled with `closed`: a handler still running then is dropped, its job left to its
    /// lease (no more renewals).
    pub abandon: CancellationToken,
    pub counts: Arc<Mutex<Counts>>,
    pub hook: Arc<Hook>,
    pub lease_ms: u64,
    /// Renewals come every this long.
    pub renew: Duration,
    /// The worker's own wait before a failed job's retry ([`Worker::backoff`]).
    ///
    /// [`Worker::backoff`]: crate::Worker::backoff
    pub backoff: Option<Backoff>,
}

/// A worker's wait before a failed job's retry, by the attempt that failed.
pub(crate) type Backoff = Arc<dyn Fn(i64) -> Duration + Send + Sync + 'static>;

/// The longest wait a worker's backoff sends (the server's `emq.backoff-max-ms` default).
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// `backoff`'s wait after failed attempt `attempt`, at most [`MAX_BACKOFF`]; `None` when the
/// function panicked (the server's backoff then).
fn retry_in(backoff: &Backoff, attempt: i64) -> Option<Duration> {
    match catch_unwind(AssertUnwindSafe(|| backoff(attempt))) {
        Ok(wait) => Some(wait.min(MAX_BACKOFF)),
        Err(payload) => {
            let message = crate::unwind::panic_message(payload.as_ref());
            tracing::warn!(panic = %message, "the worker's backoff panicked; the server's backoff applies");
            None
        }
    }
}

impl<C, H, F> Dispatch<C> for Runner<H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    fn dispatch(
        &self,
        part: &Part<C>,
        job: Job,
        permit: OwnedSemaphorePermit,
        sent_ns: u64,
        answered_ns: u64,
    ) {
        self.hook.emit(Fields {
            sent_ns,
            answered_ns,
            ..Fields::at(EventKind::Claim, &job.id, job.attempt, 0)
        });
        let task = Task {
            queue: part.queue.clone(),
            acks: self.acks.clone(),
            handler: self.handler.clone(),
            _permit: permit,
            closed: self.closed.clone(),
            abandon: self.abandon.clone(),
            counts: self.counts.clone(),
            hook: self.hook.clone(),
            lease_ms: self.lease_ms,
            claimed_ns: sent_ns,
            renew: self.renew,
            backoff: self.backoff.clone(),
        };
        tokio::spawn(task.run(job));
    }
}

/// A renewal in flight: when the lease now ends, or the attempt's end.
type Renewal<'a> =
    std::pin::Pin<Box<dyn Future<Output = std::result::Result<Option<i64>, Ended>> + Send + 'a>>;

/// One job's task: the handler, its lease renewed beside it, then its outcome sent.
struct Task<C, H> {
    /// The queue the job was claimed from (a partition, of a partitioned queue).
    queue: Queue<C>,
    acks: mpsc::UnboundedSender<Ack>,
    handler: Arc<H>,
    /// The job's place in the worker's concurrency, given back as the task ends, however it
    /// ends.
    _permit: OwnedSemaphorePermit,
    closed: Arc<AtomicBool>,
    abandon: CancellationToken,
    counts: Arc<Mutex<Counts>>,
    hook: Arc<Hook>,
    lease_ms: u64,
    /// When the claim that returned the job was sent: its lease began no sooner.
    claimed_ns: u64,
    renew: Duration,
    backoff: Option<Backoff>,
}

impl<C, H, F> Task<C, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    async fn run(self, job: Job) {
        let (id, token) = (job.id.as_str(), job.attempt);
        // A lease's worth of time since the claim was sent (the process stalled between the
        // claim and now: frozen, swapped out): the lease may have run out and another attempt
        // taken the job, even finished it. Its handler is not started; the job is left to its
        // lease, as a lost one.
        if now_ns() >= self.claimed_ns.saturating_add(self.lease_ms * 1_000_000) {
            job.lost.store(true, Ordering::SeqCst);
            self.count(|c| c.lost += 1);
            return;
        }
        self.hook
            .emit(Fields::at(EventKind::HandlerStart, id, token, now_ns()));
        // The handler's future lives in this block: a renewal answered `EMQCANCELLED` or
        // `EMQTIMEOUT` ends the block, and so drops the future where it last yielded.
        let span = trace::Processing::start(&self.queue.name, &job);
        let outcome = {
            let handler = guarded(|| span.run(|| (self.handler)(job.clone())));
            tokio::pin!(handler);
            let mut schedule = Renewals::new(self.renew);
            let mut next = Instant::now() + self.renew;
            // The renewal in flight, polled beside the handler: a slow one (a failover's
            // retries) does not hold the handler up.
            let mut renewal: Option<Renewal<'_>> = None;
            loop {
                tokio::select! {
                    outcome = &mut handler => break Ok(outcome),
                    // The worker gave up waiting for its handlers: dropped, left to its lease.
                    _ = self.abandon.cancelled() => {
                        job.lost.store(true, Ordering::SeqCst);
                        self.count(|c| c.lost += 1);
                        return;
                    }
                    _ = tokio::time::sleep_until(next), if renewal.is_none() => {
                        renewal = Some(Box::pin(self.renew(&job)));
                    }
                    renewed = async {
                        match renewal.as_mut() {
                            Some(r) => r.await,
                            None => std::future::pending().await,
                        }
                    }, if renewal.is_some() => {
                        renewal = None;
                        match renewed {
                            Ok(ends) => {
                                let now_ms = (now_ns() / 1_000_000) as i64;
                                next = Instant::now() + schedule.after(ends, now_ms);
                            }
                            Err(ended) => break Err(ended),
                        }
                    }
                }
            }
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(ended) => {
                span.ended(match ended {
                    Ended::Cancelled(_) => "cancelled",
                    Ended::TimedOut(_) => "timed_out",
                });
                return self.ended(&job, ended);
            }
        };
        span.finish(&outcome);
        self.hook.emit(Fields {
            error: match &outcome {
                Ok(_) => None,
                Err(Failure::Retry(_, why) | Failure::Error(why)) => Some(why.clone()),
            },
            ..Fields::at(EventKind::HandlerEnd, id, token, now_ns())
        });
        self.settle(&job, outcome).await;
    }

    /// Renews the job's lease: when it now ends (Unix ms), if the server said; the end of the
    /// attempt when the job was cancelled while it ran or the attempt ran past its deadline
    /// (`job.cancelled()` or `job.timed_out()` set then, before the handler's future is
    /// dropped).
    async fn renew(&self, job: &Job) -> std::result::Result<Option<i64>, Ended> {
        if job.lease_lost() {
            return Ok(None);
        }
        let mut progress = job.progress();
        let sent = loop {
            let mut args = vec![
                job.id.clone().into_bytes(),
                job.attempt.to_string().into_bytes(),
                self.lease_ms.to_string().into_bytes(),
            ];
            if let Some(progress) = &progress {
                args.extend([b"PROGRESS".to_vec(), progress.clone()]);
            }
            let sent = self
                .queue
                .send(&self.queue.command("EMQ.RENEW", &args), false)
                .await;
            match (&sent.reply, progress.take()) {
                // Progress larger than the server takes: dropped, and the lease renewed without
                // it at once, not lost over it.
                (Err(Error::Payload(why)), Some(refused)) => {
                    tracing::warn!(error = %why, id = %job.id, bytes = refused.len(), "the job's progress was refused");
                    job.drop_progress(&refused);
                }
                _ => break sent,
            }
        };
        let (outcome, error) = answer_of(&sent);
        self.hook.emit(Fields {
            sent_ns: sent.sent_ns,
            answered_ns: sent.answered_ns,
            outcome,
            error,
            ..Fields::at(EventKind::Renew, &job.id, job.attempt, 0)
        });
        match sent.reply {
            Ok(ends) => return Ok(i64::from_redis_value(ends).ok()),
            Err(Error::LeaseLost(_)) => job.lost.store(true, Ordering::SeqCst),
            Err(Error::Cancelled(why)) => {
                job.cancelled.store(true, Ordering::SeqCst);
                return Err(Ended::Cancelled(why));
            }
            Err(Error::Timeout(why)) => {
                job.timed_out.store(true, Ordering::SeqCst);
                return Err(Ended::TimedOut(why));
            }
            // A failover or a lost connection: the next tick tries again.
            Err(e) => tracing::debug!(error = %e, id = %job.id, "renewal failed"),
        }
        Ok(None)
    }

    async fn settle(&self, job: &Job, outcome: Outcome) {
        if self.closed.load(Ordering::SeqCst) || job.lease_lost() {
            self.count(|c| c.lost += 1);
            return;
        }
        let mut args = vec![
            job.id.clone().into_bytes(),
            job.attempt.to_string().into_bytes(),
        ];
        let (command, counted): (&str, fn(&mut Counts)) = match outcome {
            Ok(result) => return self.ack(job, result).await,
            Err(Failure::Retry(after, why)) => {
                // At most the server's longest wait, which refuses a longer one.
                let after = after.min(MAX_DELAY);
                args.extend([
                    b"RETRY-IN".to_vec(),
                    after.as_millis().to_string().into_bytes(),
                    b"ERROR".to_vec(),
                    bounded(why),
                ]);
                ("EMQ.FAIL", |c| c.retried += 1)
            }
            Err(Failure::Error(why)) => {
                let wait = self.backoff.as_ref().and_then(|b| retry_in(b, job.attempt));
                if let Some(wait) = wait {
                    args.extend([
                        b"RETRY-IN".to_vec(),
                        wait.as_millis().to_string().into_bytes(),
                    ]);
                }
                args.extend([b"ERROR".to_vec(), bounded(why)]);
                ("EMQ.FAIL", |c| c.failed += 1)
            }
        };
        let mut sent = self
            .queue
            .send(&self.queue.command(command, &args), true)
            .await;
        if let Err(Error::Payload(why)) = &sent.reply {
            // An error text larger than the server takes: the attempt fails without it.
            tracing::warn!(error = %why, id = %job.id, "the failure's text was refused");
            args.truncate(args.len() - 2);
            sent = self
                .queue
                .send(&self.queue.command(command, &args), true)
                .await;
        }
        let (outcome, error) = answer_of(&sent);
        self.hook.emit(Fields {
            sent_ns: sent.sent_ns,
            answered_ns: sent.answered_ns,
            outcome,
            error,
            action: Some(SettleAction::Fail),
            replicated: replicated(&self.queue, &sent),
            ..Fields::at(EventKind::Settle, &job.id, job.attempt, 0)
        });
        self.settled(job, sent.reply.map(|_| ()), counted);
    }

    /// Acknowledges through the settler, and waits for the outcome. A result the server
    /// refuses as too large fails the attempt instead, saying so (retried, or dead), rather
    /// than leaving the job to run again at its lease's end.
    async fn ack(&self, job: &Job, result: Option<Vec<u8>>) {
        let (outcome, back) = oneshot::channel();
        let size = result.as_ref().map(Vec::len);
        let ack = Ack {
            queue: self.queue.name.clone(),
            id: job.id.clone(),
            attempt: job.attempt,
            result,
            outcome,
        };
        let sent = match self.acks.send(ack) {
            Ok(()) => back
                .await
                .unwrap_or_else(|_| Err(Error::Batch("the settler stopped".into()))),
            Err(_) => Err(Error::Batch("the settler stopped".into())),
        };
        if let (Err(Error::Payload(why)), Some(size)) = (&sent, size) {
            let text = format!(
                "EMQPAYLOAD the handler's result ({size} bytes) is larger than the server takes: {why}"
            );
            return Box::pin(self.settle(job, Err(Failure::Error(text)))).await;
        }
        self.settled(job, sent, |c| c.acked += 1);
    }

    fn settled(&self, job: &Job, sent: Result<()>, counted: fn(&mut Counts)) {
        match sent {
            Ok(()) => self.count(counted),
            Err(Error::LeaseLost(_)) => {
                job.lost.store(true, Ordering::SeqCst);
                self.count(|c| c.lost += 1);
            }
            // Cancelled while the handler ran, learned only now: the job is dead, not lost.
            Err(Error::Cancelled(why)) => self.ended(job, Ended::Cancelled(why)),
            Err(e) => tracing::warn!(error = %e, id = %job.id, "the outcome was not sent"),
        }
    }

    /// The server ended the attempt while it ran: a cancel, or its deadline. No outcome is
    /// sent for it, and its slot is freed as the task ends.
    fn ended(&self, job: &Job, ended: Ended) {
        let (kind, why) = match ended {
            Ended::Cancelled(why) => {
                job.cancelled.store(true, Ordering::SeqCst);
                self.count(|c| c.cancelled += 1);
                (EventKind::Cancelled, why)
            }
            Ended::TimedOut(why) => {
                job.timed_out.store(true, Ordering::SeqCst);
                self.count(|c| c.timed_out += 1);
                (EventKind::TimedOut, why)
            }
        };
        self.hook.emit(Fields {
            error: Some(why),
            ..Fields::at(kind, &job.id, job.attempt, now_ns())
        });
    }

    fn count(&self, f: impl FnOnce(&mut Counts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
    }
}

/// How the server ended an attempt while its handler ran (the refusal's text in each).
enum Ended {
    /// `EMQCANCELLED`: the job was cancelled (`EMQ.CANCEL`).
    Cancelled(String),
    /// `EMQTIMEOUT`: the attempt ran past its deadline.
    TimedOut(String),
}

/// An error's text, at most [`MAX_ERROR`] bytes (its end kept), on a character boundary.
fn bounded(why: String) -> Vec<u8> {
    let bytes = why.into_bytes();
    if bytes.len() <= MAX_ERROR {
        return bytes;
    }
    let mut start = bytes.len() - MAX_ERROR;
    while start < bytes.len() && (bytes[start] & 0xC0) == 0x80 {
        start += 1;
    }
    bytes[start..].to_vec()
}
