//! Job timeouts through the Rust client against a real server: a job's own `timeout` and its
//! queue's default (`Queue::limit`), sent as the nearest ms, one that rounds to 0 refused; a
//! worker whose handler outlives its attempt's deadline learns it from a renewal
//! (`EMQTIMEOUT`), drops the handler's future, sends nothing for the job and frees its slot,
//! while the server retries the job, or buries it at its last attempt, with the error
//! `timeout`; work a handler handed to a thread runs on, unseen; `EMQTIMEOUT` is
//! `Error::Timeout`. Conditions are waited for, never timed.

mod common;

use emq_harness as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::*;
use echomq_client::{
    Enqueue, Error, EventKind, EventOutcome, FlowJob, Flows, Job, Limit, Limits, Queue, Rate,
    Setting, WorkerEvent,
};
use redis::aio::MultiplexedConnection;
use support::Options;

/// Adds one to its count when dropped: how many handler futures were dropped.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits, without blocking the runtime, until `f` holds: 30 seconds at most.
async fn until(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..1500 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

fn set(flag: &AtomicBool) -> bool {
    flag.load(Ordering::SeqCst)
}

/// The kinds (and tokens) of `id`'s events, renewals left out.
fn kinds(recorded: &Recorded, id: &str) -> Vec<(EventKind, i64)> {
    events_of(recorded, id)
        .iter()
        .filter(|e| e.kind != EventKind::Renew)
        .map(|e| (e.kind, e.token))
        .collect()
}

/// Whether `id`'s attempt `token` has its `TimedOut` event.
fn timed_out(recorded: &Recorded, id: &str, token: i64) -> bool {
    kinds(recorded, id).contains(&(EventKind::TimedOut, token))
}

/// A job's row field, through the client.
async fn field(q: &Queue<MultiplexedConnection>, id: &str, name: &str) -> Option<String> {
    q.job(id).await.expect("EMQ.JOB")?.get(name).cloned()
}

async fn dead_count(q: &Queue<MultiplexedConnection>) -> Option<i64> {
    q.stats().await.expect("EMQ.STATS")["dead"]
}

/// The unix ms of a row's `deadline`, `<unix-ms>:<token>`.
fn deadline_ms(deadline: &str) -> Option<i64> {
    deadline.split_once(':')?.0.parse().ok()
}

fn timed(ms: u64) -> Enqueue {
    Enqueue {
        timeout: Some(Duration::from_millis(ms)),
        ..Enqueue::default()
    }
}

/// The renewals of `id`'s attempt `token`: each answered `EMQTIMEOUT` is refused, and only the
/// last one is.
fn assert_one_refused_renewal(recorded: &Recorded, id: &str, token: i64) {
    let renewals: Vec<WorkerEvent> = events_of(recorded, id)
        .into_iter()
        .filter(|e| e.kind == EventKind::Renew && e.token == token)
        .collect();
    let last = renewals.last().expect("a renewal learned the deadline");
    assert_eq!(last.outcome, EventOutcome::Refused);
    let error = last.error.clone().unwrap_or_default();
    assert!(error.contains("EMQTIMEOUT"), "{error}");
    assert_eq!(
        renewals
            .iter()
            .filter(|e| e.outcome != EventOutcome::Ok)
            .count(),
        1,
        "no renewal after the one that learned the deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_at_enqueue_is_the_rows_and_its_claim_sets_a_deadline() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "timed");
    let id = q.enqueue_with(b"x", timed(300)).await.expect("enqueue");
    assert_eq!(field(&q, &id, "timeout").await.as_deref(), Some("300"));
    assert_eq!(field(&q, &id, "deadline").await, None, "not before a claim");
    assert_eq!(claim_one(&q).await, (id.clone(), 1));
    let deadline = field(&q, &id, "deadline").await.expect("a deadline");
    assert!(deadline_ms(&deadline).is_some(), "{deadline}");
    assert!(deadline.ends_with(":1"), "the attempt's token: {deadline}");
    // A job without one has none.
    let plain = q.enqueue(b"y").await.expect("enqueue");
    assert_eq!(field(&q, &plain, "timeout").await, None);
    // A flow's jobs carry their own.
    let flows = Flows::new(conn(&server).await);
    let mut tree = FlowJob::new("timed", b"parent")
        .timeout(Duration::from_secs(60))
        .child(FlowJob::new("timed", b"child").timeout(Duration::from_millis(1500)))
        .child(FlowJob::new("timed", b"untimed"));
    let parent = flows.flow(&mut tree).await.expect("flow");
    let child = |n: usize| tree.children[n].id.clone().expect("minted");
    assert_eq!(
        field(&q, &parent, "timeout").await.as_deref(),
        Some("60000")
    );
    assert_eq!(
        field(&q, &child(0), "timeout").await.as_deref(),
        Some("1500")
    );
    assert_eq!(field(&q, &child(1), "timeout").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_sent_rounded_and_one_rounding_to_nothing_is_refused_before_sending() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "rounded");
    let id = q
        .enqueue_with(
            b"x",
            Enqueue {
                timeout: Some(Duration::from_micros(1500)),
                ..Enqueue::default()
            },
        )
        .await
        .expect("enqueue");
    assert_eq!(field(&q, &id, "timeout").await.as_deref(), Some("2"));
    let tiny = Duration::from_micros(499);
    let refused = q
        .enqueue_with(
            b"y",
            Enqueue {
                timeout: Some(tiny),
                ..Enqueue::default()
            },
        )
        .await;
    assert!(matches!(refused, Err(Error::Argument(_))), "{refused:?}");
    // A flow with one anywhere: none of it is written.
    let mut tree =
        FlowJob::new("rounded", b"parent").child(FlowJob::new("rounded", b"child").timeout(tiny));
    let refused = Flows::new(conn(&server).await).flow(&mut tree).await;
    assert!(matches!(refused, Err(Error::Argument(_))), "{refused:?}");
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(1));
    // A queue's: nothing changed, not even the limit set beside it.
    let refused = q
        .limit(Limit {
            concurrency: Setting::Set(3),
            timeout: Setting::Set(tiny),
            ..Limit::default()
        })
        .await;
    assert!(matches!(refused, Err(Error::Argument(_))), "{refused:?}");
    assert_eq!(q.limits().await.expect("report"), Limits::default());
    let set = q
        .limit(Limit {
            timeout: Setting::Set(Duration::from_micros(299_500)),
            ..Limit::default()
        })
        .await
        .expect("limit");
    assert_eq!(set.timeout, Some(Duration::from_millis(300)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_limits_are_set_reported_and_removed() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "limited");
    assert_eq!(q.limits().await.expect("report"), Limits::default());
    let rate = Rate {
        n: 100,
        per: Duration::from_secs(60),
    };
    let all = q
        .limit(Limit {
            concurrency: Setting::Set(3),
            rate: Setting::Set(rate),
            timeout: Setting::Set(Duration::from_millis(1500)),
            ..Limit::default()
        })
        .await
        .expect("set");
    assert_eq!(
        (all.concurrency, all.rate, all.timeout),
        (Some(3), Some(rate), Some(Duration::from_millis(1500)))
    );
    assert_eq!(q.limits().await.expect("report"), all);
    assert_eq!(q.stats().await.expect("stats")["timeout"], Some(1500));
    // The queue's default is each claim's: a job without its own gets a deadline.
    let id = q.enqueue(b"x").await.expect("enqueue");
    claim_one(&q).await;
    assert!(field(&q, &id, "deadline").await.is_some());
    assert_eq!(q.limits().await.expect("report").active, 1);
    // Removed alone, the others stay.
    let left = q
        .limit(Limit {
            timeout: Setting::Off,
            ..Limit::default()
        })
        .await
        .expect("timeout off");
    assert_eq!(
        (left.concurrency, left.rate, left.timeout),
        (Some(3), Some(rate), None)
    );
    assert_eq!(q.stats().await.expect("stats")["timeout"], None);
    let next = q.enqueue(b"y").await.expect("enqueue");
    claim_one(&q).await;
    assert_eq!(field(&q, &next, "deadline").await, None);
    // All of them at once.
    let none = q.limit(Limit::OFF).await.expect("off");
    assert_eq!(
        (none.concurrency, none.rate, none.timeout),
        (None, None, None)
    );
    // A limit out of bounds is the server's refusal, and changes nothing.
    let zero = q
        .limit(Limit {
            concurrency: Setting::Set(2),
            timeout: Setting::Set(Duration::ZERO),
            ..Limit::default()
        })
        .await;
    assert!(matches!(zero, Err(Error::Redis(_))), "{zero:?}");
    assert_eq!(q.limits().await.expect("report").concurrency, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_past_its_deadline_is_dropped_and_its_job_retried_or_at_its_last_attempt_buried()
{
    // A retry a minute away: the worker cannot claim it before the test has looked at it,
    // however slow the machine.
    let server = start(
        Options::default()
            .arg("emq.max-attempts", "2")
            .arg("emq.backoff-base-ms", "60000"),
    );
    let q = Queue::new(conn(&server).await, "slow");
    let retried = q.enqueue_with(b"slow", timed(1500)).await.expect("enqueue");
    let started = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let saw_timeout = flag();
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (s, d, t, h) = (
        started.clone(),
        dropped.clone(),
        saw_timeout.clone(),
        recorded.clone(),
    );
    let worker = worker_of(&server, "slow", move |job: Job| {
        let (s, d, t) = (s.clone(), d.clone(), t.clone());
        async move {
            // Its destructor runs as the worker drops the future: the job says why.
            struct Seen(Job, Arc<AtomicBool>);
            impl Drop for Seen {
                fn drop(&mut self) {
                    self.1.store(self.0.timed_out(), Ordering::SeqCst);
                }
            }
            let _seen = Seen(job.clone(), t);
            let _guard = Dropped(d);
            s.fetch_add(1, Ordering::SeqCst);
            // Never ends by itself: only a dropped future ends the attempt.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(None)
        }
    })
    .await
    // One slot, and a lease renewed every second: the deadline, 1.5 s after the claim, caps
    // the first renewal's lease, and the renewal just after it learns of it (or the first
    // does, if it comes late). A lease of seconds: a handler started late is still run.
    .concurrency(1)
    .lease(Duration::from_secs(3))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(
        until(|| timed_out(&recorded, &retried, 1)).await,
        "no timeout"
    );
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the handler was not dropped"
    );
    assert!(
        set(&saw_timeout),
        "job.timed_out() was not set as it was dropped"
    );
    let mut admin = server.conn();
    assert!(
        until(|| support::job_state(&mut admin, "slow", &retried).as_deref() == Some("scheduled"))
            .await,
        "the server did not schedule a retry"
    );
    assert_eq!(
        field(&q, &retried, "error").await.as_deref(),
        Some("timeout")
    );
    assert_eq!(field(&q, &retried, "timedout").await.as_deref(), Some("1"));
    // The last attempt past its deadline: the job is dead, once.
    support::config_set(&mut admin, "emq.max-attempts", "1");
    let buried = q.enqueue_with(b"slow", timed(1500)).await.expect("enqueue");
    assert!(
        until(|| timed_out(&recorded, &buried, 1)).await,
        "no timeout"
    );
    assert!(
        until(|| support::job_state(&mut admin, "slow", &buried).as_deref() == Some("dead")).await
    );
    assert_eq!(
        field(&q, &buried, "error").await.as_deref(),
        Some("timeout")
    );
    assert_eq!(dead_count(&q).await, Some(1));
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
    assert_eq!(started.load(Ordering::SeqCst), 2, "the retry ran early");
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        (
            counts.timed_out,
            counts.acked,
            counts.failed,
            counts.lost,
            counts.cancelled
        ),
        (2, 0, 0, 0, 0),
        "{counts:?}"
    );
    // Each attempt: no end of the handler, no settle; the timeout after the refused renewal.
    use EventKind::*;
    for id in [&retried, &buried] {
        assert_eq!(
            kinds(&recorded, id),
            [(Claim, 1), (HandlerStart, 1), (TimedOut, 1)]
        );
        assert_one_refused_renewal(&recorded, id, 1);
        let events = events_of(&recorded, id);
        let ended = events.last().expect("events");
        let error = ended.error.clone().unwrap_or_default();
        assert!(error.contains("EMQTIMEOUT"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_ignoring_its_deadline_is_left_behind_and_nothing_is_sent_for_it() {
    let server = start(Options::default().arg("emq.max-attempts", "1"));
    let q = Queue::new(conn(&server).await, "stubborn");
    // The queue's default times the job.
    let limits = q
        .limit(Limit {
            timeout: Setting::Set(Duration::from_millis(1_500)),
            ..Limit::default()
        })
        .await
        .expect("limit");
    assert_eq!(limits.timeout, Some(Duration::from_millis(1_500)));
    let stubborn = q.enqueue(b"stubborn").await.expect("enqueue");
    let (started, finished, saw_timeout) = (flag(), flag(), flag());
    let (release, released) = mpsc::channel::<()>();
    let released = Arc::new(Mutex::new(released));
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (s, f, t, r, h) = (
        started.clone(),
        finished.clone(),
        saw_timeout.clone(),
        released.clone(),
        recorded.clone(),
    );
    let worker = worker_of(&server, "stubborn", move |job: Job| {
        let (s, f, t, r) = (s.clone(), f.clone(), t.clone(), r.clone());
        async move {
            if job.payload != b"stubborn" {
                return Ok(None);
            }
            // The work goes on in a thread of its own that never looks at the deadline until
            // it is done; the handler's future only waits for it.
            let (done, outcome) = tokio::sync::oneshot::channel();
            let job = job.clone();
            std::thread::spawn(move || {
                s.store(true, Ordering::SeqCst);
                let _ = r
                    .lock()
                    .expect("lock")
                    .recv_timeout(Duration::from_secs(120));
                t.store(job.timed_out(), Ordering::SeqCst);
                f.store(true, Ordering::SeqCst);
                let _ = done.send(());
            });
            let _ = outcome.await;
            Ok(Some(b"too late".to_vec()))
        }
    })
    .await
    .concurrency(1)
    // A lease long enough that a handler started late on a loaded machine is not stale; the
    // deadline still cuts its renewals short.
    .lease(Duration::from_secs(3))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(until(|| set(&started)).await, "the handler never started");
    // The worker goes on to the next job while the thread still works.
    let next = q.enqueue(b"next").await.expect("enqueue");
    let mut admin = server.conn();
    assert!(
        until(|| support::job_state(&mut admin, "stubborn", &next).as_deref() == Some("done"))
            .await,
        "the worker did not go on to the next job"
    );
    assert!(!set(&finished), "the thread was released early");
    assert!(
        until(|| support::job_state(&mut admin, "stubborn", &stubborn).as_deref() == Some("dead"))
            .await
    );
    // The thread finishes its work now; nothing of it reaches the server.
    release.send(()).expect("release");
    assert!(until(|| set(&finished)).await);
    assert!(set(&saw_timeout), "the job's timed_out() was not set");
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        (counts.timed_out, counts.acked, counts.lost, counts.failed),
        (1, 1, 0, 0),
        "{counts:?}"
    );
    use EventKind::*;
    assert_eq!(
        kinds(&recorded, &stubborn),
        [(Claim, 1), (HandlerStart, 1), (TimedOut, 1)],
        "a settle or a second run of the timed-out job"
    );
    assert_one_refused_renewal(&recorded, &stubborn, 1);
    assert_eq!(
        field(&q, &stubborn, "error").await.as_deref(),
        Some("timeout")
    );
    assert_eq!(dead_count(&q).await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emqtimeout_is_the_typed_timeout_error() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "typed");
    let id = q.enqueue_with(b"x", timed(100)).await.expect("enqueue");
    assert_eq!(claim_one(&q).await, (id.clone(), 1));
    let deadline = field(&q, &id, "deadline").await.expect("a deadline");
    let deadline = deadline_ms(&deadline).expect("unix ms");
    let arg = |s: &str| s.as_bytes().to_vec();
    // Renewed for a minute at a time, the lease ends at the deadline, until a renewal is
    // refused.
    let refused = loop {
        match q
            .call("EMQ.RENEW", &[arg(&id), arg("1"), arg("60000")])
            .await
        {
            Ok(ends) => {
                let ends: i64 = redis::from_redis_value(ends).expect("when the lease ends");
                assert!(ends <= deadline, "{ends} past {deadline}");
            }
            Err(e) => break e,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let Error::Timeout(message) = refused else {
        panic!("a renewal past the deadline: {refused:?}");
    };
    assert_eq!(message, "EMQTIMEOUT the attempt ran past its deadline");
    // A late settle is a stale token like any other.
    let places = q.ack_many(&[(&id, 1, None)]).await.expect("EMQ.MACK");
    assert!(
        matches!(places[..], [Err(Error::LeaseLost(_))]),
        "{places:?}"
    );
    let fail = q.call("EMQ.FAIL", &[arg(&id), arg("1")]).await;
    assert!(matches!(fail, Err(Error::LeaseLost(_))), "{fail:?}");
}
