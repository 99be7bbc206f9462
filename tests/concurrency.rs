//! Many workers at once (protocol.md §6): every job ends `done` or `dead` exactly once and no job is
//! held by two workers, with the server's I/O threads serving the clients or without them.

use emq_harness as support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread;

use redis::cmd;
use support::*;

#[test]
fn every_job_ends_done_or_dead_exactly_once_under_concurrency() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "1")
            .arg("emq.backoff-max-ms", "5"),
    );
    every_job_ends_once(&server);
}

#[test]
fn every_job_ends_exactly_once_with_io_threads_serving_the_clients() {
    // Valkey's I/O threads read requests and write replies (a woken claimer's included) while
    // the main thread runs the commands. They start only under load: other clients supply it.
    let server = Server::start(
        Options::default()
            .arg("io-threads", "2")
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "1")
            .arg("emq.backoff-max-ms", "5"),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..6)
        .map(|_| {
            let (mut con, stop) = (server.conn(), stop.clone());
            thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut p = redis::pipe();
                    for _ in 0..100 {
                        p.cmd("GET").arg("not-a-queue-key");
                    }
                    let _: Vec<Option<String>> = p.query(&mut con).expect("load");
                }
            })
        })
        .collect();
    every_job_ends_once(&server);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in load {
        l.join().expect("load");
    }
    let mut con = server.conn();
    if info_field(&mut con, "server", "valkey_version").is_some() {
        assert!(
            info_int(&mut con, "stats", "io_threaded_reads_processed") > 0,
            "the I/O threads took part"
        );
    }
}

/// 20,000 jobs, 8 workers claiming 10 at a time, one in five attempts failed: every job ends
/// `done` or `dead` exactly once, no job is held by two workers at once, and the rows agree.
fn every_job_ends_once(server: &Server) {
    const JOBS: u64 = 20_000;
    const WORKERS: usize = 8;
    let q = unique_queue("exactly-once");
    let mut con = server.conn();
    for chunk in (1..=JOBS).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("EMQ.ENQUEUE")
                .arg(&q)
                .arg(job_id(*i))
                .arg(format!("job {i}"));
        }
        let _: Vec<i64> = p.query(&mut con).expect("enqueue batch");
    }

    let held: Arc<Mutex<HashSet<String>>> = Arc::default();
    let outcomes: Arc<Mutex<Vec<(String, &'static str)>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (url, q) = (server.url(), q.clone());
            let (held, outcomes, violations) = (held.clone(), outcomes.clone(), violations.clone());
            thread::spawn(move || {
                let mut con = redis::Client::open(url)
                    .expect("client")
                    .get_connection()
                    .expect("conn");
                let mut rng = Rng::new(w as u64 + 1);
                // Until nothing arrives for 1.5 s: the queue is drained.
                while let Some(jobs) = claim(&mut con, &q, &["COUNT", "10", "BLOCK", "1500"]) {
                    // Hold the whole batch while working through it, as a real worker would.
                    for (id, payload, _) in &jobs {
                        if !held.lock().expect("lock").insert(id.clone()) {
                            violations
                                .lock()
                                .expect("lock")
                                .push(format!("{id} held twice"));
                        }
                        if !payload.starts_with(b"job ") {
                            violations
                                .lock()
                                .expect("lock")
                                .push(format!("{id} payload"));
                        }
                    }
                    for (id, _, token) in jobs {
                        held.lock().expect("lock").remove(&id);
                        if rng.below(10) < 2 {
                            let r: String = cmd("EMQ.FAIL")
                                .arg(&q)
                                .arg(&id)
                                .arg(token)
                                .arg("ERROR")
                                .arg("random")
                                .query(&mut con)
                                .expect("fail");
                            if r == "dead" {
                                outcomes.lock().expect("lock").push((id, "dead"));
                            }
                        } else {
                            let n: i64 = cmd("EMQ.ACK")
                                .arg(&q)
                                .arg(&id)
                                .arg(token)
                                .query(&mut con)
                                .expect("ack");
                            assert_eq!(n, 1);
                            outcomes.lock().expect("lock").push((id, "done"));
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert!(
        violations.lock().expect("lock").is_empty(),
        "{:?}",
        violations.lock().expect("lock")
    );
    let outcomes = outcomes.lock().expect("lock").clone();
    let mut by_id: HashMap<String, Vec<&str>> = HashMap::new();
    for (id, o) in &outcomes {
        by_id.entry(id.clone()).or_default().push(o);
    }
    assert_eq!(by_id.len() as u64, JOBS, "no job lost");
    assert!(
        by_id.values().all(|v| v.len() == 1),
        "every job ended exactly once"
    );
    let dead = outcomes.iter().filter(|(_, o)| *o == "dead").count();
    assert!(dead > 0, "some jobs exhausted their attempts");
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["active"], s["scheduled"]), (0, 0, 0));
    assert_eq!(s["dead"] as usize, dead);
    let mut p = redis::pipe();
    for i in 1..=JOBS {
        p.cmd("HGET").arg(row_key(&q, &job_id(i))).arg("state");
    }
    let states: Vec<String> = p.query(&mut con).expect("states");
    for (i, st) in states.iter().enumerate() {
        let expected = by_id[&job_id(i as u64 + 1)][0];
        assert_eq!(st, expected, "row state of job {}", i + 1);
    }
}
