//! `drain <port> <queue> <jobs> [concurrency]`: one worker of the crate drains `jobs` no-op jobs
//! of `queue` on 127.0.0.1:`port`, then prints its jobs/s, timed from its start to its last
//! job done (`make bench-clients` runs it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq_client::{Job, Worker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (port, queue, jobs) = match args.as_slice() {
        [_, port, queue, jobs, ..] => (port.clone(), queue.clone(), jobs.parse::<usize>()?),
        _ => return Err("usage: drain <port> <queue> <jobs> [concurrency]".into()),
    };
    let concurrency = args.get(4).map_or(Ok(64), |c| c.parse::<usize>())?;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let claims = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let calls = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let worker = Worker::new(claims, calls, queue, move |_job: Job| {
        let d = d.clone();
        async move {
            d.fetch_add(1, Ordering::SeqCst);
            Ok(None)
        }
    })
    .concurrency(concurrency);
    let token = worker.shutdown_token();
    let started = Instant::now();
    let run = tokio::spawn(worker.run());
    while done.load(Ordering::SeqCst) < jobs {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!("{:.0}", jobs as f64 / elapsed);
    token.cancel();
    run.await??;
    Ok(())
}
