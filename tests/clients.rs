//! "Any client": the README's workers, in Python with the stock redis-py package and in Rust
//! with the `redis` crate, drain a queue on a real server.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use redis::cmd;
use support::*;

/// Enqueues 50 jobs, 5 of which fail for good, runs `worker`, and checks what it reports and
/// what the server holds afterwards.
fn drain_with(mut worker: Command) {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let q = unique_queue("client");
    for i in 1..=50u64 {
        let payload = if i % 10 == 0 {
            format!("fail {i}")
        } else {
            format!("ok {i}")
        };
        enqueue(&mut con, &q, &job_id(i), &payload);
    }
    let out = worker
        .env("EMQ_PORT", server.port.to_string())
        .env("EMQ_QUEUE", &q)
        .env("EMQ_IDLE_EXIT", "1")
        .output()
        .expect("run the worker");
    assert!(
        out.status.success(),
        "worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for line in stdout.lines() {
        *outcomes
            .entry(line.split(' ').next().unwrap_or(""))
            .or_default() += 1;
    }
    assert_eq!(outcomes.get("done"), Some(&45), "{stdout}");
    assert_eq!(outcomes.get("dead"), Some(&5), "{stdout}");
    let counts = stats(&mut con, &q);
    assert_eq!(
        (counts["pending"], counts["active"], counts["dead"]),
        (0, 0, 5)
    );
    assert_eq!(
        row_field(&mut con, &q, &job_id(10), "error").as_deref(),
        Some("cannot process fail 10")
    );
}

/// A job's lease runs out while `worker` works on it (a `slow` job takes a second, the lease is
/// 300 ms), and another worker, this test, claims and acknowledges it. `worker`'s own ACK then
/// gets `EMQLEASE`: it reports the job lost, not done, and goes on to the next job.
fn lose_a_lease_with(mut worker: Command) {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("lost");
    enqueue(&mut con, &q, &job_id(1), "slow");
    let child = worker
        .env("EMQ_PORT", server.port.to_string())
        .env("EMQ_QUEUE", &q)
        .env("EMQ_LEASE_MS", "300")
        .env("EMQ_IDLE_EXIT", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the worker");
    let attempts = |con: &mut Connection| job_attempts(con, &q, &job_id(1));
    assert!(
        wait_until(Duration::from_secs(10), || attempts(&mut con).as_deref()
            == Some("1")),
        "the worker claimed the job"
    );
    // Taken back by the timer once the lease runs out, while the worker still works on it.
    let jobs = claim(&mut con, &q, &["BLOCK", "5000"]);
    assert_eq!(jobs, Some(vec![(job_id(1), b"slow".to_vec(), 2)]));
    let acked: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(2)
        .query(&mut con)
        .expect("ack");
    assert_eq!(acked, 1);
    enqueue(&mut con, &q, &job_id(2), "next");

    let out = child.wait_with_output().expect("the worker's output");
    assert!(
        out.status.success(),
        "worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec![format!("lost {}", job_id(1)), format!("done {}", job_id(2))],
        "{stdout}"
    );
    let counts = stats(&mut con, &q);
    assert_eq!((counts["pending"], counts["active"]), (0, 0));
    assert_eq!(
        attempts(&mut con).as_deref(),
        Some("2"),
        "claimed twice, acknowledged once"
    );
}

fn python_worker() -> Command {
    // Debian's python3 with python3-redis, installed by `make test`.
    let python = std::env::var("ECHOMQ_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    let mut worker = Command::new(python);
    worker.arg(repo_root().join("examples/worker.py"));
    worker
}

fn rust_worker() -> Command {
    // Built by `cargo test --all-targets` (make test) next to the test binaries.
    let exe = std::env::current_exe().expect("test binary path");
    let worker = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples/worker"))
        .expect("target dir");
    assert!(
        worker.exists(),
        "{} is missing: run the suite with `make test`",
        worker.display()
    );
    Command::new(worker)
}

#[test]
fn the_python_worker_drains_a_queue_with_redis_py() {
    drain_with(python_worker());
}

#[test]
fn the_rust_worker_drains_a_queue_with_the_redis_crate() {
    drain_with(rust_worker());
}

#[test]
fn the_python_worker_goes_on_after_losing_a_lease() {
    lose_a_lease_with(python_worker());
}

#[test]
fn the_rust_worker_goes_on_after_losing_a_lease() {
    lose_a_lease_with(rust_worker());
}
