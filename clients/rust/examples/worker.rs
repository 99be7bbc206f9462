//! An EchoMQ worker on the `echomq-client` crate: a handler, and the crate's worker runtime
//! around it (batched blocking claims, leases renewed while the handler runs, `ACK` or `FAIL`
//! with the error, graceful shutdown on SIGTERM or SIGINT).
//!
//! ```sh
//! EMQ_PORT=6379 EMQ_QUEUE=orders cargo run -p echomq-client --example worker
//! ```
//!
//! `EMQ_CONCURRENCY` sets how many jobs run at once (default 4). With `EMQ_IDLE_EXIT=1` it
//! stops once the queue has nothing pending, scheduled or running (the tests use it).

use std::env;
use std::time::Duration;

use echomq_client::{shutdown_on_signal, Failure, Job, Outcome, Queue, Worker};

/// `Ok` acknowledges the job; an error fails it (retried with backoff, then dead).
async fn handle(job: Job) -> Outcome {
    if job.payload.starts_with(b"fail") {
        println!("fail {}", job.id);
        return Err(Failure::Error(format!(
            "cannot process {}",
            String::from_utf8_lossy(&job.payload)
        )));
    }
    println!("ok {}", job.id);
    Ok(None)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host = env::var("EMQ_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = env::var("EMQ_PORT").unwrap_or_else(|_| "6379".into());
    let queue = env::var("EMQ_QUEUE").unwrap_or_else(|_| "orders".into());
    let concurrency = env::var("EMQ_CONCURRENCY").map_or(Ok(4), |c| c.parse())?;
    let client = redis::Client::open(format!("redis://{host}:{port}/"))?;
    // Connections that come back after the server restarts; no response timeout: a blocked
    // claim waits in the server.
    let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
    let claims = client
        .get_connection_manager_with_config(config.clone())
        .await?;
    let calls = client.get_connection_manager_with_config(config).await?;
    let worker = Worker::new(claims, calls.clone(), queue.clone(), handle).concurrency(concurrency);
    let stop = worker.shutdown_token();
    shutdown_on_signal(stop.clone());
    if env::var("EMQ_IDLE_EXIT").is_ok_and(|v| v == "1") {
        let queue = Queue::new(calls, queue);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let Ok(counts) = queue.stats().await else {
                    continue;
                };
                let busy = ["pending", "scheduled", "active"]
                    .iter()
                    .any(|set| counts.get(*set).copied().flatten().unwrap_or(0) > 0);
                if !busy {
                    stop.cancel();
                    return;
                }
            }
        });
    }
    let counts = worker.run().await?;
    println!("settled {} acked, {} failed", counts.acked, counts.failed);
    Ok(())
}
