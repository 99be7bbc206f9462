//! A Rust handler's progress: set on its job, sent with each renewal (`EMQ.RENEW ...
//! PROGRESS`), and seen in the row while the job runs.

mod common;

use emq_harness as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use echomq_client::{Job, Queue};
use support::{wait_until, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_progress_reaches_the_row_while_it_runs() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "long");
    let id = q.enqueue(b"import").await.expect("enqueue");
    let seen = Arc::new(AtomicBool::new(false));
    let go_on = seen.clone();
    let worker = worker_of(&server, "long", move |job: Job| {
        let go_on = go_on.clone();
        async move {
            job.set_progress(b"{\"rows\":500}");
            // Runs until the test has read the progress from the row.
            while !go_on.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(None)
        }
    })
    .await
    .lease(Duration::from_millis(400));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let key = format!("emq:{{long}}:job:{id}");
    let mut admin = server.conn();
    let progress = |admin: &mut redis::Connection| -> Option<String> {
        redis::cmd("HGET")
            .arg(&key)
            .arg("progress")
            .query(admin)
            .expect("hget")
    };
    let shown = wait_until(Duration::from_secs(10), || {
        progress(&mut admin).as_deref() == Some("{\"rows\":500}")
    });
    let state = support::job_state(&mut admin, "long", &id);
    seen.store(true, Ordering::SeqCst);
    assert!(shown, "the row shows the progress");
    assert_eq!(state.as_deref(), Some("active"), "while the job ran");
    assert!(wait_until(Duration::from_secs(10), || support::job_state(
        &mut admin, "long", &id
    )
    .as_deref()
        == Some("done")));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 1);
}
