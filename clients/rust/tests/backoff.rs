//! A failed job's wait before its retry from a Rust worker: the server's backoff unless the
//! worker has one of its own (`Worker::backoff`, sent as `RETRY-IN`); one that panics leaves
//! the failure to the server's.

mod common;

use std::time::Duration;

use common::*;
use echomq_client::{Failure, Job, Queue, Worker};
use emq_harness::{config_set, now_ms, wait_until, Options, Server};
use redis::aio::MultiplexedConnection;

type Handler = fn(Job) -> std::future::Ready<echomq_client::Outcome>;

fn boom(_job: Job) -> std::future::Ready<echomq_client::Outcome> {
    std::future::ready(Err(Failure::Error("no".into())))
}

/// A job of `queue` failed once by `worker`: how long after its failure it is due (ms), at
/// least (counted from after the failure) and at most (from before it).
async fn due_after(
    server: &Server,
    queue: &str,
    worker: Worker<MultiplexedConnection, Handler>,
) -> (i64, i64) {
    let q = Queue::new(conn(server).await, queue);
    let id = q.enqueue(b"boom").await.expect("enqueue");
    let before = now_ms();
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(10), || {
        emq_harness::job_state(&mut admin, queue, &id).as_deref() == Some("scheduled")
    }));
    let after = now_ms();
    token.cancel();
    assert_eq!(run.await.expect("task").expect("run").failed, 1);
    let row = q.job(&id).await.expect("job").expect("a row");
    let due: i64 = row["due"].parse().expect("a time");
    (due - after, due - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_backoff_is_its_own_wait_and_without_one_the_servers() {
    let server = start(Options::default());
    config_set(&mut server.conn(), "emq.backoff-base-ms", "3600000");
    let worker = |queue: &str| {
        let server = &server;
        let queue = queue.to_string();
        async move {
            let mut w = Worker::new(
                conn(server).await,
                conn(server).await,
                queue,
                boom as Handler,
            );
            w.block = Duration::from_millis(100);
            w
        }
    };
    // Without one: the server's hour.
    let (least, _) = due_after(&server, "plain", worker("plain").await).await;
    assert!(least > 3_000_000, "{least}");
    // Its own: ten minutes after the first attempt.
    let own = worker("own")
        .await
        .backoff(|attempt| Duration::from_secs(300 * 2 * attempt as u64));
    let (least, most) = due_after(&server, "own", own).await;
    assert!(least <= 600_000 && 600_000 <= most, "{least} {most}");
    // One that panics: the server's again, and the worker goes on.
    let panics = worker("panics").await.backoff(|_| panic!("no wait"));
    let (least, _) = due_after(&server, "panics", panics).await;
    assert!(least > 3_000_000, "{least}");
}
