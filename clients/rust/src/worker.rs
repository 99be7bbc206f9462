//! The consumer's side: `Worker` claims jobs with `BLOCK`, in batches up to its free
//! concurrency, runs each handler as a task (`task.rs`), renews its lease in the background
//! for as long as it runs, settles it (`ACK`, batched with the others waiting into one
//! `EMQ.MACK`, or `FAIL` with the error; a handler that panics fails its job with the panic's
//! message), and stops gracefully on its cancellation token (`shutdown_on_signal` cancels it on
//! SIGTERM or SIGINT). A job cancelled while it runs (`EMQ.CANCEL`) is learned by its next
//! renewal (`EMQCANCELLED`), and so is an attempt that ran past its deadline (`EMQTIMEOUT`):
//! the handler's future is dropped, nothing is sent for the job, and its slot is freed.
//! Beside it, the worker delivers its queue's outbox (flows' hand-overs to parents on other
//! nodes, `deliver.rs`). Each claim, renewal, settle, handler run, cancel, timeout and
//! hand-over is reported to its `on_event` hook. A partitioned queue's worker claims every
//! partition, one loop and at most one blocked claim per primary (`claims.rs`); each job's
//! calls go to the partition it came from, and each partition's outbox is delivered.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::children::Reader;
use crate::claims::{by_primary, claim_loop, Claims, Dispatch, LoopEnd, Part, Tries};
use crate::deliver::deliver;
use crate::error::{transient, Error, Result};
use crate::events::{default_name, Hook, OnEvent, WorkerEvent};
// What a handler sees is job.rs's; `echomq_client::worker::Job` and the rest still name it.
pub use crate::job::{Failure, Job, Outcome};
use crate::queue::{backoff, Queue};
use crate::settle::send_acks;
use crate::task::{Backoff, Runner};

/// The protocol major version this client speaks (`EMQ.VERSION` answers `echomq:<x.y.z>`).
pub const PROTOCOL_MAJOR: u32 = 2;
/// Most bytes of an error sent with `EMQ.FAIL`.
pub const MAX_ERROR: usize = 4096;
/// Most acknowledgements one `EMQ.MACK` carries.
pub const SETTLE_BATCH: usize = 100;
/// How often a partitioned queue's worker reads the queue's width and the cluster's slots
/// again, to claim from the partitions as they are now (a queue spanned again over another
/// width tells its workers nothing: its old partitions, retired, still answer their claims).
pub const WATCH_EVERY: Duration = Duration::from_secs(5);
/// Most jobs one claim takes (the server's bound on `COUNT`).
pub const MAX_CLAIM: usize = 1000;

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
    backoff: Option<Backoff>,
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
            backoff: None,
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

    /// The worker's own wait before a failed job's retry, a function of the attempt that failed
    /// (1 for the first): sent with the failure (`RETRY-IN`, at most an hour). Without it the
    /// server's backoff applies (`emq.backoff-base-ms` doubling), as for the other clients'
    /// workers; [`Failure::Retry`] names its own wait either way. A function that panics
    /// leaves that failure to the server's backoff.
    pub fn backoff(mut self, f: impl Fn(i64) -> Duration + Send + Sync + 'static) -> Self {
        self.backoff = Some(Arc::new(f));
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

    /// How often the worker's calls (its start's version read, its settles and renewals) are
    /// tried again after a transient failure: 8 unless set ([`Queue::retries`]).
    pub fn retries(mut self, retries: u32) -> Self {
        self.queue = self.queue.retries(retries);
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
    /// then is left to its lease and never settled. The queue's width is read first
    /// (`EMQ.WIDTH`): a partitioned queue's partitions are claimed, grouped by the primary that
    /// owns each (`CLUSTER SLOTS` on the claims' connection), and grouped again when a claim
    /// learns that the queue was partitioned since, or that the slots moved.
    pub async fn run(self) -> Result<Counts> {
        let mut version = Cmd::new();
        version.arg("EMQ.VERSION");
        let mut attempt = 0;
        let answer: Value = loop {
            match version.query_async(&mut self.claims.clone()).await {
                Ok(answer) => break answer,
                // A node restarting or failing over while the worker starts: tried again.
                Err(e) if transient(&e) && attempt < self.queue.retries => {
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(Error::from_redis(e)),
            }
        };
        check_version(&String::from_redis_value(answer).unwrap_or_default())?;
        // The fields are public: what the builder's methods would refuse is mended here.
        let concurrency = self.concurrency.max(1);
        let renew_every = match self.renew_every.is_finite() {
            true => self.renew_every.clamp(0.05, 0.9),
            false => 1.0 / 3.0,
        };
        let permits = Arc::new(Semaphore::new(concurrency));
        let closed = Arc::new(AtomicBool::new(false));
        let abandon = CancellationToken::new();
        let counts = Arc::new(Mutex::new(Counts::default()));
        let lease_ms = u64::try_from(self.lease.as_millis().max(1)).unwrap_or(u64::MAX);
        let hook = Arc::new(Hook::new(
            self.on_event.clone(),
            &self.name,
            &self.queue.name,
        ));
        let (acks, waiting) = mpsc::unbounded_channel();
        tokio::spawn(send_acks(self.queue.clone(), waiting, hook.clone()));
        let dispatch: Arc<dyn Dispatch<C>> = Arc::new(Runner {
            acks,
            handler: self.handler.clone(),
            closed: closed.clone(),
            abandon: abandon.clone(),
            counts: counts.clone(),
            hook: hook.clone(),
            lease_ms,
            // A lease of 0 is 1 ms (as it is sent): renewals never come back to back.
            renew: self
                .lease
                .max(Duration::from_millis(1))
                .mul_f64(renew_every),
            backoff: self.backoff.clone(),
        });
        // The sweeps stop with the worker, however `run` ends.
        let sweeping = self.shutdown.child_token();
        let _sweeping = sweeping.clone().drop_guard();
        // The regroups since a blocking claim was last answered.
        let mut regroups = Tries::default();
        while !self.shutdown.is_cancelled() {
            let parts = match self.queue.read_width().await {
                Ok(_) => self.queue.parts()?,
                Err(Error::Redis(e)) if transient(&e) => {
                    self.pause(regroups.failed()).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Each partition's outbox, and the queue's own (entries left from before a span).
            let epoch = sweeping.child_token();
            let mut outboxes = parts.clone();
            if parts[0] != self.queue.name {
                outboxes.push(self.queue.name.clone());
            }
            for name in outboxes {
                let queue = self.queue.at(name);
                tokio::spawn(deliver(queue, hook.clone(), epoch.clone()));
            }
            let (ended, answered) = self.claim(parts, &permits, &dispatch, lease_ms).await;
            epoch.cancel();
            if let Some(e) = ended {
                return Err(e);
            }
            regroups.answered(answered);
            self.pause(regroups.failed()).await;
        }
        let all = u32::try_from(concurrency).unwrap_or(u32::MAX);
        // A timeout past what an instant holds waits as long as it takes.
        match Instant::now().checked_add(self.shutdown_timeout) {
            Some(deadline) => {
                let _ = tokio::time::timeout_at(deadline, permits.acquire_many(all)).await;
            }
            None => {
                let _ = permits.acquire_many(all).await;
            }
        }
        closed.store(true, Ordering::SeqCst);
        abandon.cancel();
        let mut counts = counts.lock().map(|c| c.clone()).unwrap_or_default();
        counts.hook_panics = hook.panics();
        Ok(counts)
    }

    /// Claims `parts`, one loop per primary, until the worker stops or a loop asks for a
    /// regroup; the error a claim failed with for good, if one did, and whether a blocking
    /// claim was answered.
    async fn claim(
        &self,
        parts: Vec<String>,
        permits: &Arc<Semaphore>,
        dispatch: &Arc<dyn Dispatch<C>>,
        lease_ms: u64,
    ) -> (Option<Error>, bool) {
        let groups = match parts.len() {
            1 => vec![parts.clone()],
            _ => by_primary(&self.claims, parts.clone()).await,
        };
        let claims = Arc::new(Claims {
            conn: self.claims.clone(),
            lease_ms,
            // At most half the lease: a job's handler is not started a lease after its claim
            // was sent, so a claim must not wait in the server for most of a lease.
            block_ms: (self.block.as_millis() as u64).min(lease_ms / 2).max(1),
            batch: match self.batch {
                0 => self.concurrency,
                n => n,
            }
            .clamp(1, MAX_CLAIM),
            permits: permits.clone(),
            share: (self.concurrency.max(1) / groups.len()).max(1),
            stop: self.shutdown.clone(),
            answered: AtomicBool::new(false),
        });
        let regroup = CancellationToken::new();
        let loops: Vec<_> = groups
            .iter()
            .cloned()
            .map(|group| {
                let parts = group
                    .into_iter()
                    .map(|name| {
                        let queue = self.queue.at(name);
                        let reader = Reader(Arc::new(queue.clone()));
                        Part { queue, reader }
                    })
                    .collect();
                let run = claim_loop(claims.clone(), parts, dispatch.clone(), regroup.clone());
                tokio::spawn(run)
            })
            .collect();
        let joined = async {
            let mut failed = None;
            for ended in loops {
                match ended.await {
                    Ok(LoopEnd::Failed(e)) => failed = failed.or(Some(e)),
                    // The queue's own name refused as partitioned: its width learned (as an
                    // enqueue's refusal teaches it), so a user whose width read the server
                    // refuses (no `+emq.width`) claims the partitions next, not the queue again.
                    Ok(LoopEnd::Spanned { queue, width }) => {
                        if queue == self.queue.name && width > 0 {
                            self.queue.relearn(width);
                        }
                    }
                    Ok(LoopEnd::Stopped | LoopEnd::Regroup) => {}
                    Err(e) => failed = failed.or(Some(Error::Reply(format!("a claim loop: {e}")))),
                }
            }
            failed
        };
        let (failed, ()) = tokio::join!(joined, self.watch(&parts, &groups, &regroup));
        (failed, claims.answered.load(Ordering::SeqCst))
    }

    /// Every [`WATCH_EVERY`], while a partitioned queue's loops claim, reads the queue's width
    /// and the cluster's slots again, and asks for a regroup when the partitions or their
    /// primaries changed. A blocking claim whose `WAKE` names a queue another primary serves
    /// is refused `MOVED` at once (as the server's reading of the slots, once a second, has
    /// it), and a regroup follows; but a claim blocked before the move waits on, a loop of one
    /// partition names no `WAKE` queue, and nothing refuses the claims of a worker whose queue
    /// was spanned again over another width (its old partitions, retired, answer them): this
    /// reading is what tells it.
    async fn watch(&self, parts: &[String], groups: &[Vec<String>], regroup: &CancellationToken) {
        if matches!(parts, [only] if *only == self.queue.name) || parts.is_empty() {
            return; // an ordinary queue's claim learns of a span from its refusal
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(WATCH_EVERY) => {}
                _ = regroup.cancelled() => return,
                _ = self.shutdown.cancelled() => return,
            }
            let now = match self
                .queue
                .read_width()
                .await
                .and_then(|_| self.queue.parts())
            {
                Ok(now) => now,
                Err(e) => {
                    tracing::debug!(error = %e, "the queue's width was not read");
                    continue;
                }
            };
            if now != parts || by_primary(&self.claims, now).await != groups {
                regroup.cancel();
                return;
            }
        }
    }

    /// Waits `wait` (or until the worker stops) before the queue is read and grouped again.
    async fn pause(&self, wait: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.shutdown.cancelled() => {}
        }
    }
}
