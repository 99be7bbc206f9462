//! Headers through the Rust client against a real server (docs/observability.md): an
//! enqueue's headers reach each attempt's [`Job::headers`], in order, and `Queue::job` shows
//! them as the row keeps them; a job enqueued without any has none. (Without the `otel`
//! feature nothing else is added.)

mod common;

use std::time::Duration;

use common::*;
use echomq_client::{Enqueue, Job, Queue};
use emq_harness::Options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_reach_the_handler_in_order() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "headed");
    let headers = vec![
        (
            "traceparent".to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
        ),
        ("tenant".to_string(), "a:b c".to_string()),
    ];
    let how = Enqueue {
        headers: headers.clone(),
        ..Enqueue::default()
    };
    let id = q.enqueue_with(b"work", how).await.expect("enqueue");
    let plain = q.enqueue(b"plain").await.expect("enqueue");
    let row = q.job(&id).await.expect("job").expect("a row");
    assert_eq!(
        row.get("headers").map(String::as_str),
        Some("traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntenant:a:b c")
    );
    assert_eq!(
        q.job(&plain)
            .await
            .expect("job")
            .expect("a row")
            .get("headers"),
        None
    );
    let (seen, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let worker = worker_of(&server, "headed", move |job: Job| {
        let seen = seen.clone();
        async move {
            let _ = seen.send((
                job.id.clone(),
                job.headers.clone(),
                job.header("tenant").map(str::to_string),
            ));
            Ok(None)
        }
    })
    .await;
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    let mut got = Vec::new();
    for _ in 0..2 {
        let one = tokio::time::timeout(Duration::from_secs(30), heard.recv()).await;
        got.push(one.ok().flatten().expect("a job ran"));
    }
    stop.cancel();
    running.await.expect("worker task").expect("worker");
    got.sort();
    let mut want = vec![
        (id, headers, Some("a:b c".to_string())),
        (plain, Vec::new(), None),
    ];
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_gives_every_job_its_headers() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "headed-batch");
    let ids = q
        .enqueue_many_with([&b"a"[..], b"b"], vec![("k".into(), "v".into())])
        .await
        .expect("enqueue_many_with");
    for id in &ids {
        let row = q.job(id).await.expect("job").expect("a row");
        assert_eq!(row.get("headers").map(String::as_str), Some("k:v"), "{id}");
    }
}
