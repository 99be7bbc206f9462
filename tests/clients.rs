//! The README's example workers, each built on its client library (examples/worker.py on the
//! `echomq` package, clients/rust/examples/worker.rs on the `echomq-client` crate), drain a
//! queue on a real server. The libraries' own suites (clients/python/tests,
//! clients/rust/tests) test the runtime itself: renewal, lost leases, shutdown, failover.

use emq_harness as support;

use std::collections::HashMap;
use std::process::Command;

use support::*;

/// Enqueues 50 jobs, 5 of which fail for good, runs `worker` until the queue is idle, and
/// checks what its handler did, what its runtime settled and what the server holds afterwards.
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
    let mut ran: HashMap<&str, usize> = HashMap::new();
    for line in stdout.lines() {
        *ran.entry(line.split(' ').next().unwrap_or("")).or_default() += 1;
    }
    assert_eq!(
        (ran.get("ok"), ran.get("fail")),
        (Some(&45), Some(&5)),
        "each job ran once: {stdout}"
    );
    assert!(
        stdout.contains("settled 45 acked, 5 failed"),
        "the runtime settled every job: {stdout}"
    );
    let counts = stats(&mut con, &q);
    assert_eq!(
        (
            counts["pending"],
            counts["active"],
            counts["scheduled"],
            counts["dead"]
        ),
        (0, 0, 0, 5)
    );
    let error = row_field(&mut con, &q, &job_id(10), "error").unwrap_or_default();
    assert!(
        error.contains("cannot process fail 10"),
        "the dead job keeps its error: {error:?}"
    );
}

#[test]
fn the_python_example_drains_a_queue_with_the_package() {
    // The package's venv, made by `make python` (a prerequisite of `make test`).
    let python = std::env::var_os("ECHOMQ_CLIENT_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/py/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: `make python` makes the package's venv",
        python.display()
    );
    let mut worker = Command::new(python);
    worker.arg(repo_root().join("examples/worker.py"));
    drain_with(worker);
}

#[test]
fn the_rust_example_drains_a_queue_with_the_crate() {
    // Built by `cargo build --workspace --examples` (make test) next to the test binaries.
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
    drain_with(Command::new(worker));
}
