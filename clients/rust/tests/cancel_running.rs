//! Cancelling a running job through the Rust client against a real server: the worker learns
//! it from a renewal (`EMQCANCELLED`), drops the handler's future, sends nothing for the job,
//! and frees its slot for the next job; work a handler handed to a thread runs on, unseen; a
//! settle that learns the cancel is not counted as lost; `EMQCANCELLED` is `Error::Cancelled`.
//! Conditions are waited for, never timed.

mod common;

use emq_harness as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::*;
use echomq_client::{
    Error, EventKind, EventOutcome, Failure, Job, Queue, SettleAction, WorkerEvent,
};
use redis::aio::MultiplexedConnection;
use support::Options;

/// Flips its flag when dropped: whether a handler's future was dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
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

/// A job's row field, through the client.
async fn field(q: &Queue<MultiplexedConnection>, id: &str, name: &str) -> Option<String> {
    q.job(id).await.expect("EMQ.JOB")?.get(name).cloned()
}

async fn dead_count(q: &Queue<MultiplexedConnection>) -> Option<i64> {
    q.stats().await.expect("EMQ.STATS")["dead"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_cancelled_has_its_handler_dropped_and_the_worker_goes_on() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "halted");
    let long = q.enqueue(b"long").await.expect("enqueue");
    let (started, dropped) = (flag(), flag());
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (s, d, h) = (started.clone(), dropped.clone(), recorded.clone());
    let worker = worker_of(&server, "halted", move |job: Job| {
        let (s, d) = (s.clone(), d.clone());
        async move {
            if job.payload == b"long" && job.attempt == 1 {
                let _guard = Dropped(d);
                s.store(true, Ordering::SeqCst);
                // Never ends by itself: only a dropped future ends this attempt.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok(None)
        }
    })
    .await
    // One slot: the next job runs only once the cancelled one's slot is freed. A short lease
    // renews every 100 ms.
    .concurrency(1)
    .lease(Duration::from_millis(300))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(until(|| set(&started)).await, "the handler never started");
    assert!(q.cancel(&long).await.expect("cancel"));
    assert!(until(|| set(&dropped)).await, "the handler was not dropped");
    let next = q.enqueue(b"next").await.expect("enqueue");
    let mut admin = server.conn();
    assert!(
        until(|| support::job_state(&mut admin, "halted", &next).as_deref() == Some("done")).await,
        "the worker did not go on to the next job"
    );
    // Dead once, with the error `cancelled` and the ended attempt's token.
    assert_eq!(field(&q, &long, "state").await.as_deref(), Some("dead"));
    assert_eq!(
        field(&q, &long, "error").await.as_deref(),
        Some("cancelled")
    );
    assert_eq!(field(&q, &long, "cancelled").await.as_deref(), Some("1"));
    assert_eq!(dead_count(&q).await, Some(1));
    // Its events: no end of the handler, no settle; the cancel after the refused renewal.
    use EventKind::*;
    assert_eq!(
        kinds(&recorded, &long),
        [(Claim, 1), (HandlerStart, 1), (Cancelled, 1)]
    );
    let events = events_of(&recorded, &long);
    let renewals: Vec<&WorkerEvent> = events.iter().filter(|e| e.kind == Renew).collect();
    let refused = renewals.last().expect("a renewal learned the cancel");
    assert_eq!(refused.outcome, EventOutcome::Refused);
    let error = refused.error.clone().unwrap_or_default();
    assert!(error.contains("EMQCANCELLED"), "{error}");
    assert_eq!(
        renewals
            .iter()
            .filter(|e| e.outcome != EventOutcome::Ok)
            .count(),
        1,
        "no renewal after the one that learned the cancel"
    );
    let cancelled = events.last().expect("events");
    assert!(cancelled
        .error
        .as_deref()
        .unwrap_or_default()
        .contains("EMQCANCELLED"));
    // Requeued, it runs again under a new token, and is acked.
    assert!(q.requeue(&long).await.expect("requeue"));
    assert!(
        until(|| support::job_state(&mut admin, "halted", &long).as_deref() == Some("done")).await
    );
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        (counts.cancelled, counts.acked, counts.failed, counts.lost),
        (1, 2, 0, 0),
        "{counts:?}"
    );
    let again: Vec<(EventKind, i64)> = kinds(&recorded, &long).into_iter().skip(3).collect();
    let t = again.first().expect("a second claim").1;
    assert!(t > 1, "the rerun's token {t}");
    assert_eq!(
        again,
        [(Claim, t), (HandlerStart, t), (HandlerEnd, t), (Settle, t)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_ignoring_the_cancel_is_left_behind_and_nothing_is_sent_for_it() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "stubborn");
    let stubborn = q.enqueue(b"stubborn").await.expect("enqueue");
    let (started, finished, saw_cancel) = (flag(), flag(), flag());
    let (release, released) = mpsc::channel::<()>();
    let released = Arc::new(Mutex::new(released));
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (s, f, c, r, h) = (
        started.clone(),
        finished.clone(),
        saw_cancel.clone(),
        released.clone(),
        recorded.clone(),
    );
    let worker = worker_of(&server, "stubborn", move |job: Job| {
        let (s, f, c, r) = (s.clone(), f.clone(), c.clone(), r.clone());
        async move {
            if job.payload != b"stubborn" {
                return Ok(None);
            }
            // The work goes on in a thread of its own that never looks at the cancel until it
            // is done; the handler's future only waits for it.
            let (done, outcome) = tokio::sync::oneshot::channel();
            let job = job.clone();
            std::thread::spawn(move || {
                s.store(true, Ordering::SeqCst);
                let _ = r
                    .lock()
                    .expect("lock")
                    .recv_timeout(Duration::from_secs(120));
                c.store(job.cancelled(), Ordering::SeqCst);
                f.store(true, Ordering::SeqCst);
                let _ = done.send(());
            });
            let _ = outcome.await;
            Ok(Some(b"too late".to_vec()))
        }
    })
    .await
    .concurrency(1)
    .lease(Duration::from_millis(300))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(until(|| set(&started)).await, "the handler never started");
    assert!(q.cancel(&stubborn).await.expect("cancel"));
    // The worker goes on to the next job while the thread still works.
    let next = q.enqueue(b"next").await.expect("enqueue");
    let mut admin = server.conn();
    assert!(
        until(|| support::job_state(&mut admin, "stubborn", &next).as_deref() == Some("done"))
            .await,
        "the worker did not go on to the next job"
    );
    assert!(!set(&finished), "the thread was released early");
    // The thread finishes its work now; nothing of it reaches the server.
    release.send(()).expect("release");
    assert!(until(|| set(&finished)).await);
    assert!(set(&saw_cancel), "the job's cancelled() was not set");
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        (counts.cancelled, counts.acked, counts.lost),
        (1, 1, 0),
        "{counts:?}"
    );
    use EventKind::*;
    assert_eq!(
        kinds(&recorded, &stubborn),
        [(Claim, 1), (HandlerStart, 1), (Cancelled, 1)],
        "a settle or a second run of the cancelled job"
    );
    assert_eq!(field(&q, &stubborn, "state").await.as_deref(), Some("dead"));
    assert_eq!(
        field(&q, &stubborn, "error").await.as_deref(),
        Some("cancelled")
    );
    assert_eq!(dead_count(&q).await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_sent_after_a_cancel_is_refused_as_cancelled_not_lost() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "raced");
    let acked = q.enqueue(b"ack").await.expect("enqueue");
    let failed = q.enqueue(b"fail").await.expect("enqueue");
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (own, h) = (q.clone(), recorded.clone());
    let worker = worker_of(&server, "raced", move |job: Job| {
        let own = own.clone();
        async move {
            // Cancelled while it runs, the handler ends before any renewal (a minute's lease
            // renews every 20 seconds): its settle is what learns the cancel.
            assert!(own.cancel(&job.id).await.expect("cancel"));
            if job.payload == b"fail" {
                return Err(Failure::Error("gave up".into()));
            }
            Ok(Some(b"done".to_vec()))
        }
    })
    .await
    .concurrency(1)
    .lease(Duration::from_secs(60))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let ended = |id: &str| kinds(&recorded, id).last().map(|k| k.0) == Some(EventKind::Cancelled);
    assert!(until(|| ended(&acked) && ended(&failed)).await);
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        (counts.cancelled, counts.acked, counts.failed, counts.lost),
        (2, 0, 0, 0),
        "{counts:?}"
    );
    use EventKind::*;
    for (id, action) in [(&acked, SettleAction::Ack), (&failed, SettleAction::Fail)] {
        assert_eq!(
            kinds(&recorded, id),
            [
                (Claim, 1),
                (HandlerStart, 1),
                (HandlerEnd, 1),
                (Settle, 1),
                (Cancelled, 1)
            ]
        );
        let events = events_of(&recorded, id);
        let settle = events.iter().find(|e| e.kind == Settle).expect("settle");
        assert_eq!(
            (settle.action, settle.outcome),
            (Some(action), EventOutcome::Refused)
        );
        let error = settle.error.clone().unwrap_or_default();
        assert!(error.contains("EMQCANCELLED"), "{error}");
        assert_eq!(field(&q, id, "error").await.as_deref(), Some("cancelled"));
    }
    assert_eq!(dead_count(&q).await, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emqcancelled_is_the_typed_cancelled_error() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "typed");
    let id = q.enqueue(b"x").await.expect("enqueue");
    assert_eq!(claim_one(&q).await, (id.clone(), 1));
    assert!(q.cancel(&id).await.expect("cancel"));
    let arg = |s: &str| s.as_bytes().to_vec();
    let renew = q
        .call("EMQ.RENEW", &[arg(&id), arg("1"), arg("60000")])
        .await;
    let Err(Error::Cancelled(message)) = renew else {
        panic!("a renewal of the cancelled attempt: {renew:?}");
    };
    assert_eq!(message, "EMQCANCELLED the job was cancelled while it ran");
    let fail = q.call("EMQ.FAIL", &[arg(&id), arg("1")]).await;
    assert!(matches!(fail, Err(Error::Cancelled(_))), "{fail:?}");
    let places = q.ack_many(&[(&id, 1, None)]).await.expect("EMQ.MACK");
    assert!(
        matches!(places[..], [Err(Error::Cancelled(_))]),
        "{places:?}"
    );
    // Any other stale token is a lost lease still.
    let stale = q
        .call("EMQ.RENEW", &[arg(&id), arg("7"), arg("60000")])
        .await;
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
}
