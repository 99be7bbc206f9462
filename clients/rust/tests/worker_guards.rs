//! A Rust worker against values the server refuses as too large (`emq.max-payload-bytes`): a
//! handler's result fails only its own job, the rest of its `EMQ.MACK` acknowledged; progress is
//! dropped and the lease kept. A batch with a bad job at its end writes none before it. And
//! settings past the server's bounds: a concurrency over a claim's 1,000, a shutdown timeout
//! no instant holds; a handler the worker gave up on is dropped; a slow renewal does not hold
//! its handler up.

mod common;

use emq_harness as support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::*;
use echomq_client::{BulkJob, Error, Job, Queue, Worker};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use support::{wait_until, Options};

/// A server that takes payloads, results, progress and error texts of 1,000 bytes at most.
fn small() -> support::Server {
    start(Options {
        args: vec!["--emq.max-payload-bytes".into(), "1000".into()],
        ..Options::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_larger_than_the_server_takes_fails_its_own_job_and_its_batch_is_acked() {
    let server = small();
    let q = Queue::new(conn(&server).await, "bigresult");
    let ids = q
        .enqueue_many((0..5).map(|n| n.to_string().into_bytes()))
        .await
        .expect("enqueue");
    let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    // The first attempts end together: their acknowledgements go in one EMQ.MACK.
    let together = Arc::new(Barrier::new(5));
    let (r, t) = (runs.clone(), together.clone());
    let worker = worker_of(&server, "bigresult", move |job: Job| {
        *r.lock().expect("lock").entry(job.id.clone()).or_default() += 1;
        let t = t.clone();
        async move {
            if job.attempt == 1 {
                tokio::task::spawn_blocking(move || t.wait())
                    .await
                    .expect("barrier");
            }
            let big = job.payload == b"2" && job.attempt == 1;
            Ok(Some(if big {
                vec![b'x'; 2000]
            } else {
                b"ok".to_vec()
            }))
        }
    })
    .await
    .concurrency(5);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    let done = wait_until(Duration::from_secs(30), || {
        ids.iter()
            .all(|id| support::job_state(&mut admin, "bigresult", id).as_deref() == Some("done"))
    });
    let states: Vec<Option<String>> = ids
        .iter()
        .map(|id| support::job_state(&mut admin, "bigresult", id))
        .collect();
    assert!(done, "{states:?} {:?}", runs.lock().expect("lock"));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!((counts.acked, counts.failed), (5, 1), "{counts:?}");
    let runs = runs.lock().expect("lock");
    let each: Vec<usize> = ids.iter().map(|id| runs[id]).collect();
    assert_eq!(each, [1, 1, 2, 1, 1], "the others ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_larger_than_the_server_takes_is_dropped_and_the_lease_kept() {
    let server = small();
    let q = Queue::new(conn(&server).await, "bigprogress");
    let id = q.enqueue(b"p").await.expect("enqueue");
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let worker = worker_of(&server, "bigprogress", move |job: Job| {
        *r.lock().expect("lock") += 1;
        async move {
            job.set_progress(vec![b'x'; 2000]);
            // Past the lease: only renewals keep it.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok(None)
        }
    })
    .await
    .concurrency(2)
    .lease(Duration::from_millis(600));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(becomes_done(&server, "bigprogress", &id));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        *runs.lock().expect("lock"),
        1,
        "run once: its lease never lapsed"
    );
    assert_eq!((counts.acked, counts.lost), (1, 0), "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_enqueue_checks_every_job_before_it_sends_any() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "bulkchecked");
    let good = || (0..2400).map(|n| BulkJob::new(n.to_string()));
    let priority = BulkJob {
        priority: Some(2_000_000),
        ..BulkJob::new("p")
    };
    let headers = BulkJob {
        headers: (0..33)
            .map(|n| (format!("h{n}"), "v".to_string()))
            .collect(),
        ..BulkJob::new("h")
    };
    // A key, a value, a key given twice and a size the server would refuse.
    let header = |pairs: &[(&str, String)]| BulkJob {
        headers: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..BulkJob::new("h")
    };
    let wide: Vec<(String, String)> = (0..30)
        .map(|n| (format!("k{n}"), "x".repeat(600)))
        .collect();
    let refused = [
        header(&[("a key", "v".into())]),
        header(&[("k", "a\nb".into())]),
        header(&[("k", "x".repeat(8193))]),
        header(&[("k", "v".into()), ("k", "w".into())]),
        BulkJob {
            headers: wide,
            ..BulkJob::new("h")
        },
    ];
    for bad in [priority, headers].into_iter().chain(refused) {
        let sent = q.enqueue_bulk(good().chain([bad])).await;
        assert!(matches!(sent, Err(Error::Argument(_))), "{sent:?}");
    }
    let stats = q.stats().await.expect("stats");
    assert_eq!(stats["pending"], Some(0), "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_over_a_claims_thousand_claims_a_thousand_at_most() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "wide");
    let id = q.enqueue(b"w").await.expect("enqueue");
    let worker = worker_of(&server, "wide", |_job: Job| async { Ok(None) })
        .await
        .concurrency(2000)
        .shutdown_timeout(Duration::MAX);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(becomes_done(&server, "wide", &id));
    // Stopped with a timeout no instant holds: it waits as long as it takes, and returns.
    token.cancel();
    let counts = run.await.expect("no panic").expect("run");
    assert_eq!(counts.acked, 1);
}

/// Sets its flag when dropped: a handler's future holds one.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_the_worker_gave_up_on_is_dropped_and_renews_no_more() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "givenup");
    q.enqueue(b"g").await.expect("enqueue");
    let (started, dropped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (s, d) = (started.clone(), dropped.clone());
    let worker = worker_of(&server, "givenup", move |_job: Job| {
        let flag = DropFlag(d.clone());
        s.store(true, Ordering::SeqCst);
        async move {
            let _flag = flag;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(None)
        }
    })
    .await
    .lease(Duration::from_millis(900))
    .shutdown_timeout(Duration::from_millis(100));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(wait_until(Duration::from_secs(20), || started.load(Ordering::SeqCst)));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    // Its future is dropped as `run` returns: nothing renews the lease, the job goes back.
    assert!(wait_until(Duration::from_secs(10), || dropped.load(Ordering::SeqCst)));
    assert_eq!(counts.acked, 0, "{counts:?}");
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(20), || {
        support::stats(&mut admin, "givenup")["pending"] == 1
    }));
}

/// A connection whose `EMQ.RENEW` waits until `release` is set (`held` is set meanwhile).
#[derive(Clone)]
struct SlowRenewals {
    inner: MultiplexedConnection,
    held: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

impl ConnectionLike for SlowRenewals {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let renew = matches!(
            cmd.args_iter().next(),
            Some(redis::Arg::Simple(b"EMQ.RENEW"))
        );
        let (held, release) = (self.held.clone(), self.release.clone());
        Box::pin(async move {
            if renew {
                held.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_goes_on_while_its_renewal_waits_for_an_answer() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "slowrenew");
    q.enqueue(b"s").await.expect("enqueue");
    let slow = SlowRenewals {
        inner: conn(&server).await,
        held: Arc::default(),
        release: Arc::default(),
    };
    let (held, release) = (slow.held.clone(), slow.release.clone());
    let ticks = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (t, d) = (ticks.clone(), done.clone());
    let claims = SlowRenewals {
        inner: conn(&server).await,
        ..slow.clone()
    };
    // One slot: a job claimed again once its lease ran out cannot tick in its place.
    let worker = Worker::new(slow, claims, "slowrenew", move |_job: Job| {
        let (t, d) = (t.clone(), d.clone());
        async move {
            while !d.load(Ordering::SeqCst) {
                t.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(None)
        }
    })
    .concurrency(1)
    .lease(Duration::from_millis(3000));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(wait_until(Duration::from_secs(20), || held.load(Ordering::SeqCst)));
    // The renewal waits; the handler still runs.
    let at = ticks.load(Ordering::SeqCst);
    let went_on = wait_until(Duration::from_secs(10), || {
        ticks.load(Ordering::SeqCst) >= at + 20
    });
    release.store(true, Ordering::SeqCst);
    done.store(true, Ordering::SeqCst);
    assert!(went_on, "the handler stood still while its renewal waited");
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(20), || {
        support::stats(&mut admin, "slowrenew")["active"] == 0
    }));
    token.cancel();
    run.await.expect("task").expect("run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_a_queue_spanned_over_one_partition_learns_of_its_unspan() {
    let server = start(Options::default());
    let admin = Queue::new(conn(&server).await, "one");
    assert!(admin.span(1).await.expect("span"));
    let worker = worker_of(&server, "one", |_job: Job| async { Ok(None) }).await;
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let first = admin.enqueue(b"in the partition").await.expect("enqueue");
    assert!(becomes_done(&server, "one~0-0", &first));
    // Unspanned: the queue's own name takes its jobs again, and the worker finds them there.
    assert!(admin.unspan().await.expect("unspan"));
    let second = admin.enqueue(b"in the queue").await.expect("enqueue");
    assert!(becomes_done(&server, "one", &second));
    token.cancel();
    run.await.expect("task").expect("run");
}
