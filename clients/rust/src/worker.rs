//! The consumer's side: `Worker` claims jobs with `BLOCK`, in batches up to its free
//! concurrency, runs each handler as a task, renews its lease in the background for as long as
//! it runs, settles it (`ACK`, batched with the others waiting into one `EMQ.MACK`, or `FAIL`
//! with the error; a handler that panics fails its job with the panic's message), and stops
//! gracefully on its cancellation token (`shutdown_on_signal` cancels it on SIGTERM or SIGINT).
//! A job cancelled while it runs (`EMQ.CANCEL`) is learned by its next renewal
//! (`EMQCANCELLED`), and so is an attempt that ran past its deadline (`EMQTIMEOUT`): the
//! handler's future is dropped, nothing is sent for the job, and its slot is freed.
//! Beside it, the worker delivers its queue's outbox (flows' hand-overs to parents on other
//! nodes, `deliver.rs`). Each claim, renewal, settle, handler run, cancel, timeout and
//! hand-over is reported to its `on_event` hook.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::children::Reader;
use crate::deliver::deliver;
use crate::error::{server_full, transient, Error, Result};
use crate::events::{
    answer_of, default_name, now_ns, EventKind, Fields, Hook, OnEvent, SettleAction, WorkerEvent,
};
use crate::job::jobs_of;
// What a handler sees is job.rs's; `echomq_client::worker::Job` and the rest still name it.
pub use crate::job::{Failure, Job, Outcome};
use crate::queue::{backoff, Queue};
use crate::renewals::Renewals;
use crate::settle::{replicated, send_acks, Ack};
use crate::trace;
use crate::unwind::guarded;

/// The protocol major version this client speaks (`EMQ.VERSION` answers `echomq:<x.y.z>`).
pub const PROTOCOL_MAJOR: u32 = 2;
/// Most bytes of an error sent with `EMQ.FAIL`.
pub const MAX_ERROR: usize = 4096;
/// Most acknowledgements one `EMQ.MACK` carries.
pub const SETTLE_BATCH: usize = 100;

/// What a worker did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub acked: u64,
    pub failed: u64,
    pub retried: u64,
    pub lost: u64,
    /// Jobs cancelled (`EMQ.CANCEL`) while their handler ran: the handler dropped, or its
    /// outcome refused `EMQCANCELLED`; nothing sent for them.
    pub cancelled: u64,
    /// Attempts that ran past their deadline (`EMQTIMEOUT` to a renewal): the handler
    /// dropped, nothing sent for them; the server retries the job or buries it.
    pub timed_out: u64,
    /// Times the `on_event` hook panicked (each logged, and the worker went on).
    pub hook_panics: u64,
}

/// Refuses a server that speaks another protocol major version than [`PROTOCOL_MAJOR`].
pub fn check_version(answer: &str) -> Result<()> {
    let major = answer
        .strip_prefix("echomq:")
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(PROTOCOL_MAJOR) => Ok(()),
        _ => Err(Error::Version(format!(
            "the server speaks {answer}; this client speaks echomq:{PROTOCOL_MAJOR}.x"
        ))),
    }
}

/// Cancels `token` on SIGTERM or SIGINT.
pub fn shutdown_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut term) = signal(SignalKind::terminate()) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    });
}

/// Runs a handler for the jobs of one queue, up to `concurrency` at once.
pub struct Worker<C, H> {
    /// The connection the blocking claims wait on (a connection of its own: a blocked claim
    /// holds it).
    claims: C,
    queue: Queue<C>,
    handler: Arc<H>,
    pub concurrency: usize,
    pub lease: Duration,
    pub batch: usize,
    pub block: Duration,
    /// Renewals come every this much of the lease.
    pub renew_every: f64,
    pub shutdown_timeout: Duration,
    /// The worker's identity in its events: `<hostname>:<pid>:<6 random hex digits>` unless
    /// set with [`Worker::name`].
    pub name: String,
    on_event: Option<OnEvent>,
    shutdown: CancellationToken,
}

impl<C, H, F> Worker<C, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    /// A worker claiming on `claims` and settling and renewing on `calls` (two connections,
    /// as a blocked claim holds its own).
    pub fn new(claims: C, calls: C, queue: impl Into<String>, handler: H) -> Self {
        Worker {
            claims,
            queue: Queue::new(calls, queue),
            handler: Arc::new(handler),
            concurrency: 4,
            lease: Duration::from_secs(30),
            batch: 0,
            block: Duration::from_secs(1),
            renew_every: 1.0 / 3.0,
            shutdown_timeout: Duration::from_secs(30),
            name: default_name(),
            on_event: None,
            shutdown: CancellationToken::new(),
        }
    }

    /// The worker's identity in its events.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Calls `f` once for each event ([`WorkerEvent`]): each job a claim returned, each
    /// renewal, each settle (one a job of a batched `EMQ.MACK`, with its own answer), each
    /// start and end of a handler, each job cancelled while it ran and each attempt that ran
    /// past its deadline. It is called synchronously, from the task that did it, so it should
    /// be quick; a panic in it is logged and counted (`Counts::hook_panics`), and the
    /// worker goes on.
    pub fn on_event(mut self, f: impl Fn(&WorkerEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(f));
        self
    }

    /// Follows each settle (`EMQ.MACK`, `EMQ.FAIL`) with `WAIT replicas timeout` on the same
    /// connection, and reports in the settle events' `replicated` whether that many replicas
    /// confirmed it (not retried: only reported). `WAIT` holds the settling connection until
    /// it answers, up to `timeout`. 0 replicas: no wait (the default).
    pub fn wait_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.queue = self.queue.wait_replicas(replicas, timeout);
        self
    }

    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    pub fn shutdown_timeout(mut self, t: Duration) -> Self {
        self.shutdown_timeout = t;
        self
    }

    /// The token that stops the worker: cancel it, or pass it to [`shutdown_on_signal`].
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Claims and runs jobs until the shutdown token is cancelled, then lets the running
    /// handlers finish (up to the shutdown timeout) and settles them. A handler still running
    /// then is left to its lease and never settled.
    pub async fn run(self) -> Result<Counts> {
        let mut version = Cmd::new();
        version.arg("EMQ.VERSION");
        let answer: Value = version
            .query_async(&mut self.claims.clone())
            .await
            .map_err(Error::from_redis)?;
        check_version(&String::from_redis_value(answer).unwrap_or_default())?;
        let running = Arc::new(AtomicUsize::new(0));
        let room = Arc::new(Notify::new());
        let closed = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(Counts::default()));
        let lease_ms = self.lease.as_millis().max(1) as u64;
        let batch = if self.batch == 0 {
            self.concurrency
        } else {
            self.batch
        };
        let hook = Arc::new(Hook::new(
            self.on_event.clone(),
            &self.name,
            &self.queue.name,
        ));
        let (acks, waiting) = mpsc::unbounded_channel();
        tokio::spawn(send_acks(self.queue.clone(), waiting, hook.clone()));
        // The sweep stops with the worker, however `run` ends.
        let sweeping = self.shutdown.child_token();
        tokio::spawn(deliver(self.queue.clone(), hook.clone(), sweeping.clone()));
        let _sweeping = sweeping.drop_guard();
        let reader = Reader(Arc::new(self.queue.clone()));
        let mut failures = 0;
        while !self.shutdown.is_cancelled() {
            let free = self
                .concurrency
                .saturating_sub(running.load(Ordering::SeqCst));
            if free == 0 {
                tokio::select! {
                    _ = room.notified() => {}
                    _ = self.shutdown.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                continue;
            }
            // A claim in flight is never dropped: its jobs would be leased to no one.
            let mut claim = Cmd::new();
            claim
                .arg("EMQ.CLAIM")
                .arg(&self.queue.name)
                .arg("COUNT")
                .arg(free.min(batch))
                .arg("LEASE")
                .arg(lease_ms)
                .arg("BLOCK")
                // At most half the lease: a job's handler is not started a lease after its
                // claim was sent, so a claim must not wait in the server for most of a lease.
                .arg((self.block.as_millis() as u64).min(lease_ms / 2).max(1));
            let sent_ns = now_ns();
            let reply: Value = match claim.query_async(&mut self.claims.clone()).await {
                Ok(v) => {
                    failures = 0;
                    v
                }
                Err(e) if transient(&e) || server_full(&e) => {
                    // A failover, a reshard, a lost connection, a server out of memory or
                    // disk: claim again after a while.
                    tracing::debug!(error = %e, "claim failed; claiming again");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff(failures)) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                    failures += 1;
                    continue;
                }
                Err(e) => return Err(Error::from_redis(e)),
            };
            let answered_ns = now_ns();
            for job in jobs_of(reply, &reader)? {
                hook.emit(Fields {
                    sent_ns,
                    answered_ns,
                    ..Fields::at(EventKind::Claim, &job.id, job.attempt, 0)
                });
                running.fetch_add(1, Ordering::SeqCst);
                let task = Task {
                    queue: self.queue.clone(),
                    acks: acks.clone(),
                    handler: self.handler.clone(),
                    running: running.clone(),
                    room: room.clone(),
                    closed: closed.clone(),
                    counts: counts.clone(),
                    hook: hook.clone(),
                    lease_ms,
                    claimed_ns: sent_ns,
                    renew: self.lease.mul_f64(self.renew_every.clamp(0.05, 0.9)),
                };
                tokio::spawn(task.run(job));
            }
        }
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        while running.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = room.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        closed.store(true, Ordering::SeqCst);
        let mut counts = counts.lock().map(|c| c.clone()).unwrap_or_default();
        counts.hook_panics = hook.panics();
        Ok(counts)
    }
}

/// One job's task: the handler, its lease renewed beside it, then its outcome sent.
struct Task<C, H> {
    queue: Queue<C>,
    acks: mpsc::UnboundedSender<Ack>,
    handler: Arc<H>,
    running: Arc<AtomicUsize>,
    room: Arc<Notify>,
    closed: Arc<AtomicBool>,
    counts: Arc<Mutex<Counts>>,
    hook: Arc<Hook>,
    lease_ms: u64,
    /// When the claim that returned the job was sent: its lease began no sooner.
    claimed_ns: u64,
    renew: Duration,
}

impl<C, H, F> Task<C, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    async fn run(self, job: Job) {
        let _slot = Slot {
            running: self.running.clone(),
            room: self.room.clone(),
        };
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
            loop {
                tokio::select! {
                    outcome = &mut handler => break Ok(outcome),
                    _ = tokio::time::sleep_until(next) => match self.renew(&job).await {
                        Ok(ends) => {
                            let now_ms = (now_ns() / 1_000_000) as i64;
                            next = Instant::now() + schedule.after(ends, now_ms);
                        }
                        Err(ended) => break Err(ended),
                    },
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
        let args = [
            job.id.clone().into_bytes(),
            job.attempt.to_string().into_bytes(),
            self.lease_ms.to_string().into_bytes(),
        ];
        let sent = self
            .queue
            .send(&self.queue.command("EMQ.RENEW", &args), false)
            .await;
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
                args.extend([
                    b"ERROR".to_vec(),
                    bounded(why),
                    b"RETRY-IN".to_vec(),
                    after.as_millis().to_string().into_bytes(),
                ]);
                ("EMQ.FAIL", |c| c.retried += 1)
            }
            Err(Failure::Error(why)) => {
                args.extend([b"ERROR".to_vec(), bounded(why)]);
                ("EMQ.FAIL", |c| c.failed += 1)
            }
        };
        let sent = self
            .queue
            .send(&self.queue.command(command, &args), true)
            .await;
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

    /// Acknowledges through the settler, and waits for the outcome.
    async fn ack(&self, job: &Job, result: Option<Vec<u8>>) {
        let (outcome, back) = oneshot::channel();
        let ack = Ack {
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

/// A running job's place in the worker's concurrency, given back when its task ends, however
/// it ends.
struct Slot {
    running: Arc<AtomicUsize>,
    room: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.room.notify_waiters();
    }
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
