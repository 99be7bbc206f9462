//! A queue's metrics through the Rust client against a real server (`Queue::metrics`,
//! docs/observability.md): a worker's jobs, each handled for at least 300 ms, are counted as
//! enqueued, claimed and acked, and their run times all lie past the 250 ms bucket; nothing
//! pending leaves no oldest age. Conditions are waited for, never timed.

mod common;

use std::time::Duration;

use common::*;
use echomq_client::Queue;
use emq_harness::Options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_s_jobs_are_counted_and_their_run_times_lie_past_their_sleep() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "metered");
    for n in 0..3 {
        q.enqueue(format!("job {n}").as_bytes())
            .await
            .expect("enqueue");
    }
    assert!(q
        .metrics()
        .await
        .expect("metrics")
        .oldest_pending_ms
        .is_some());
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let worker = worker_of(&server, "metered", move |job: echomq_client::Job| {
        let done = done.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _ = done.send(job.id.clone());
            Ok(None)
        }
    })
    .await;
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    for _ in 0..3 {
        let got = tokio::time::timeout(Duration::from_secs(30), finished.recv()).await;
        assert!(got.ok().flatten().is_some(), "a job ran");
    }
    // Its acks are counted once the worker settled them.
    let mut m = q.metrics().await.expect("metrics");
    for _ in 0..1500 {
        if m.events.get("acked") == Some(&3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        m = q.metrics().await.expect("metrics");
    }
    stop.cancel();
    running.await.expect("join").expect("run");
    assert_eq!(m.events["enqueued"], 3);
    assert_eq!(m.events["claimed"], 3);
    assert_eq!(m.events["acked"], 3);
    let acked = &m.run["acked"];
    assert_eq!(acked.count, 3);
    // None ran under its 300 ms of sleep: every one is past the 250 ms bucket.
    let at_250 = acked.buckets.iter().find(|(le, _)| *le == Some(250));
    assert_eq!(at_250, Some(&(Some(250), 0)), "{acked:?}");
    assert!(acked.sum_ms >= 900, "{acked:?}");
    assert!(
        acked.quantile_bound(0.5).is_some_and(|le| le > 250),
        "{acked:?}"
    );
    assert_eq!(m.wait.count, 3);
    assert_eq!(m.end_to_end.count, 3);
    assert_eq!(m.oldest_pending_ms, None);
}
