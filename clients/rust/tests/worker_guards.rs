//! A Rust worker against values the server refuses as too large (`emq.max-payload-bytes`): a
//! handler's result fails only its own job, the rest of its `EMQ.MACK` acknowledged; progress is
//! dropped and the lease kept. And a batch with a bad job at its end writes none before it.

mod common;

use emq_harness as support;

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::*;
use echomq_client::{BulkJob, Error, Job, Queue};
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
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(30), || support::job_state(
        &mut admin,
        "bigprogress",
        &id
    )
    .as_deref()
        == Some("done")));
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
    for bad in [priority, headers] {
        let sent = q.enqueue_bulk(good().chain([bad])).await;
        assert!(matches!(sent, Err(Error::Argument(_))), "{sent:?}");
    }
    let stats = q.stats().await.expect("stats");
    assert_eq!(stats["pending"], Some(0), "nothing written");
}
