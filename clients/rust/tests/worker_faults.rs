//! The Rust worker through what a deployment does to it: a process stalled between a claim and
//! its handler (the job's lease ran out meanwhile: its handler is not run), a server out of
//! memory refusing its claims (waited out, not the worker's end), a node that does not answer
//! while the worker starts (asked again), and a paused primary under a partitioned queue's
//! settle (the other primaries' settles go on). Against real servers.

mod common;

use emq_harness as support;

use std::sync::{Arc, Mutex};

use common::*;
use std::time::Duration;

use echomq_client::ids::mint;
use echomq_client::partition::{name, route};
use echomq_client::slot::slot;
use echomq_client::{Enqueue, EventKind, Job, Queue, Worker, WorkerEvent};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use support::{cluster::Cluster, wait_until, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_lease_ran_out_before_its_handler_started_is_not_run() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "stalled");
    let id = q.enqueue(b"x").await.expect("enqueue");
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let (r, h) = (runs.clone(), recorded.clone());
    let worker = worker_of(&server, "stalled", move |job: Job| {
        r.lock().expect("lock").push(job.attempt);
        async { Ok(None) }
    })
    .await
    .lease(Duration::from_millis(300))
    .on_event(move |e: &WorkerEvent| {
        h.lock().expect("lock").push(e.clone());
        // The worker stalls between its first claim and the handler (as a frozen process
        // does): the lease runs out meanwhile and the job goes back to the queue.
        if e.kind == EventKind::Claim && e.token == 1 {
            std::thread::sleep(Duration::from_millis(600));
        }
    });
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(becomes_done(&server, "stalled", &id));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!((counts.acked, counts.lost), (1, 1), "{counts:?}");
    // The first attempt's handler never ran; the second's did, and was acked.
    assert_eq!(*runs.lock().expect("lock"), [2]);
    use EventKind::*;
    let kinds: Vec<(EventKind, i64)> = events_of(&recorded, &id)
        .iter()
        .map(|e| (e.kind, e.token))
        .filter(|(k, _)| *k != Renew)
        .collect();
    assert_eq!(
        kinds,
        [
            (Claim, 1),
            (Claim, 2),
            (HandlerStart, 2),
            (HandlerEnd, 2),
            (Settle, 2)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_refused_for_want_of_memory_is_waited_out() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "full");
    let id = q.enqueue(b"x").await.expect("enqueue");
    let mut admin = server.conn();
    let maxmemory = |admin: &mut redis::Connection, n: u64| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(n)
            .query::<()>(admin)
            .expect("CONFIG SET");
    };
    maxmemory(&mut admin, 1);
    let worker = worker_of(&server, "full", |_job: Job| async { Ok(None) })
        .await
        .lease(Duration::from_secs(5));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Each claim is refused with OOM meanwhile: the worker waits, it does not stop.
    let stopped = run.is_finished();
    maxmemory(&mut admin, 0);
    assert!(!stopped, "the worker stopped on OOM: {:?}", run.await);
    assert!(wait_until(Duration::from_secs(10), || support::job_state(
        &mut admin, "full", &id
    )
    .as_deref()
        == Some("done")));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 1, "{counts:?}");
}

/// A connection whose first `EMQ.VERSION` calls fail with `error`, as a restarting node's do.
#[derive(Clone)]
struct VersionRefused {
    inner: MultiplexedConnection,
    error: fn() -> RedisError,
    left: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl VersionRefused {
    fn new(inner: MultiplexedConnection, error: fn() -> RedisError, times: usize) -> Self {
        let left = Arc::new(AtomicUsize::new(times));
        let refused = Arc::default();
        VersionRefused {
            inner,
            error,
            left,
            refused,
        }
    }
}

impl ConnectionLike for VersionRefused {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let version = matches!(
            cmd.args_iter().next(),
            Some(redis::Arg::Simple(b"EMQ.VERSION"))
        );
        let take = |n: usize| n.checked_sub(1);
        if version
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                .is_ok()
        {
            self.refused.fetch_add(1, Ordering::SeqCst);
            let error = (self.error)();
            return Box::pin(async move { Err(error) });
        }
        self.inner.req_packed_command(cmd)
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

fn timed_out() -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "Timeout connecting to server").into()
}

fn unknown_command() -> RedisError {
    let unknown = (
        redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
        "unknown command 'EMQ.VERSION'",
    );
    RedisError::from(unknown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_node_times_out_while_it_starts_asks_again_and_runs() {
    let server = start(Options::default());
    let claims = VersionRefused::new(conn(&server).await, timed_out, 2);
    let refused = claims.refused.clone();
    let calls = VersionRefused::new(conn(&server).await, timed_out, 0);
    let worker = Worker::new(claims, calls, "starting", |_job: Job| async { Ok(None) });
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let q = Queue::new(conn(&server).await, "starting");
    let id = q.enqueue(b"x").await.expect("enqueue");
    let mut admin = server.conn();
    let done = wait_until(Duration::from_secs(20), || {
        support::job_state(&mut admin, "starting", &id).as_deref() == Some("done")
    });
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert!(done && counts.acked == 1, "{counts:?}");
    assert_eq!(refused.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_protocol_still_stops_the_worker_at_once() {
    let server = start(Options::default());
    let claims = VersionRefused::new(conn(&server).await, unknown_command, 1);
    let calls = VersionRefused::new(conn(&server).await, unknown_command, 0);
    let worker = Worker::new(claims, calls, "starting", |_job: Job| async { Ok(None) });
    assert!(worker.run().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_connection_managers_goes_on_after_its_server_restarts() {
    let mut server = start(Options::default().arg("appendonly", "yes"));
    let client = redis::Client::open(server.url()).expect("client");
    let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
    let manager = || client.get_connection_manager_with_config(config.clone());
    let (claims, calls) = (
        manager().await.expect("claims"),
        manager().await.expect("calls"),
    );
    let worker = Worker::new(claims, calls, "restarted", |_job: Job| async { Ok(None) });
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    let (first, second) = (support::job_id(1), support::job_id(2));
    support::enqueue(&mut admin, "restarted", &first, "before");
    let done = |admin: &mut redis::Connection, id: &str| {
        wait_until(Duration::from_secs(20), || {
            support::job_state(admin, "restarted", id).as_deref() == Some("done")
        })
    };
    assert!(done(&mut admin, &first), "before the restart");
    // A crash and a restart on the same port: every connection the worker held is gone.
    server.restart(true);
    let mut admin = server.conn();
    support::enqueue(&mut admin, "restarted", &second, "after");
    assert!(done(&mut admin, &second), "after the restart");
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 2, "{counts:?}");
}

/// A worker of a queue partitioned over the primaries settles each partition apart: while one
/// primary is paused (SIGSTOP) under an acknowledgement in flight, a job of the other primary's
/// partition is acknowledged, and the paused one's once it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_primary_holds_up_no_other_primary_s_settles() {
    // Its primary cut off, the others serve their own slots still.
    let cluster = Cluster::start_with(3, 0, &[("cluster-require-full-coverage", "no")]);
    let owner = |name: &str| cluster.owner(slot(name)).port;
    let part = |queue: &str, i: u16| name(queue, i, 4).expect("name");
    // A queue whose own slot (its width is read there) is not on the primary to be paused, a
    // partition on that primary and one elsewhere.
    let (queue, at, away) = (0..)
        .find_map(|n| {
            let queue = format!("held-{n}");
            let home = owner(&queue);
            let at = (0..4).find(|i| owner(&part(&queue, *i)) != home)?;
            let away = (0..4).find(|i| owner(&part(&queue, *i)) == home)?;
            Some((queue, at, away))
        })
        .expect("a queue");
    let q = Queue::new(cluster_conn(&cluster).await, queue.as_str());
    assert!(q.span(4).await.expect("span"));
    let id_in = |p: u16| {
        (0..)
            .map(|_| mint())
            .find(|id| route(4, id) == p)
            .expect("an id")
    };
    let (paused, elsewhere) = (id_in(at), id_in(away));
    let how = |id: &String| Enqueue {
        id: Some(id.clone()),
        ..Enqueue::default()
    };
    q.enqueue_with(b"x", how(&paused)).await.expect("enqueue");
    let release = Arc::new(AtomicBool::new(false));
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (r, h, slow) = (release.clone(), recorded.clone(), paused.clone());
    let worker = Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        queue.as_str(),
        move |job: Job| {
            let (r, wait) = (r.clone(), job.id == slow);
            async move {
                while wait && !r.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(None)
            }
        },
    )
    .concurrency(4)
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let seen = |kind: EventKind, id: &str| events_of(&recorded, id).iter().any(|e| e.kind == kind);
    assert!(wait_until(Duration::from_secs(30), || seen(
        EventKind::HandlerStart,
        &paused
    )));
    let node = cluster.node(owner(&part(&queue, at)));
    node.signal("-STOP");
    release.store(true, Ordering::SeqCst);
    assert!(wait_until(Duration::from_secs(30), || seen(
        EventKind::HandlerEnd,
        &paused
    )));
    q.enqueue_with(b"y", how(&elsewhere))
        .await
        .expect("enqueue");
    let settled = wait_until(Duration::from_secs(30), || {
        seen(EventKind::Settle, &elsewhere)
    });
    let first = recorded
        .lock()
        .expect("lock")
        .iter()
        .find(|e| e.kind == EventKind::Settle)
        .map(|e| e.id.clone());
    node.signal("-CONT");
    assert!(settled, "the other primary's job was settled");
    assert_eq!(first, Some(elsewhere), "before the paused primary's");
    let mut admin = node.conn();
    assert!(wait_until(Duration::from_secs(30), || support::job_state(
        &mut admin,
        &part(&queue, at),
        &paused
    )
    .as_deref()
        == Some("done")));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 2, "{counts:?}");
}
