//! The timer under load: many delayed queues watched, and a backlog all due at once.

use std::thread;
use std::time::{Duration, Instant};

use redis::cmd;

use crate::latency::delayed_lateness;
use crate::support::{self, job_id, Server};
use crate::workload::{fresh, now_unix_ms, PAYLOAD};

/// Fills an empty server with `queues` queues, each holding a job due in an hour, and waits for
/// the timer's first visit to each (after which it sleeps until the earliest is due).
pub fn watch_delayed_queues(con: &mut redis::Connection, queues: usize) {
    let _: () = cmd("FLUSHALL").query(con).expect("flushall");
    for chunk in (0..queues).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.cmd("EMQ.ENQUEUE")
                .arg(format!("idle{i}"))
                .arg(job_id(i as u64 + 1))
                .arg("x")
                .arg("DELAY")
                .arg(3_600_000)
                .ignore();
        }
        let _: () = p.query(con).expect("enqueue delayed");
    }
    let watched = support::info_int(con, "emq", "emq_watched_queues");
    assert_eq!(watched, queues as i64, "every queue watched");
    let visited = support::wait_until(Duration::from_secs(120), || {
        support::info_int(con, "emq", "emq_timer_due_queues") == 0
    });
    assert!(visited, "the timer visited every queue");
    thread::sleep(Duration::from_millis(200));
}

/// The lateness of delayed jobs (`samples`) on a server whose timer watches `queues` other
/// queues, each a job due in an hour; the server is flushed after.
pub fn timer_load(server: &Server, queues: usize, samples: usize) -> Vec<f64> {
    let mut con = server.conn();
    watch_delayed_queues(&mut con, queues);
    let late = delayed_lateness(server, samples);
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    let watched = support::info_int(&mut con, "emq", "emq_watched_queues");
    assert_eq!(watched, 0, "flushed queues forgotten");
    late
}

/// A backlog: `queues` queues of `per_queue` jobs each, all due at the same moment, which the
/// timer then promotes while a client sends `PING` every millisecond. Returns the `PING`
/// round trips (sorted, ms) from the due time until every job was pending, and how long after
/// the due time that was (ms).
pub fn backlog(server: &Server, queues: usize, per_queue: usize) -> (Vec<f64>, f64) {
    let mut con = server.conn();
    fresh(&mut con);
    let jobs = queues * per_queue;
    // Enqueueing takes a while: due once the last job is in.
    let due = now_unix_ms() as i64 + 2_000 + (jobs / 50) as i64;
    for q in 0..queues {
        let mut p = redis::pipe();
        for j in 0..per_queue {
            p.cmd("EMQ.ENQUEUE")
                .arg(format!("backlog{q}"))
                .arg(job_id((q * per_queue + j) as u64 + 1))
                .arg(PAYLOAD)
                .arg("AT")
                .arg(due)
                .ignore();
        }
        let _: () = p.query(&mut con).expect("enqueue due jobs");
    }
    assert!(
        now_unix_ms() < due as f64,
        "every job enqueued before its due time"
    );
    while now_unix_ms() < due as f64 {
        thread::sleep(Duration::from_millis(1));
    }
    let mut pings = Vec::new();
    let mut promoted = 0;
    while promoted < jobs as i64 {
        let sent = Instant::now();
        let _: String = cmd("PING").query(&mut con).expect("ping");
        pings.push(sent.elapsed().as_secs_f64() * 1000.0);
        if pings.len() % 50 == 0 {
            promoted = support::info_int(&mut con, "emq", "emq_promoted");
        }
        thread::sleep(Duration::from_millis(1));
    }
    let took = now_unix_ms() - due as f64;
    pings.sort_by(|a, b| a.total_cmp(b));
    (pings, took)
}
