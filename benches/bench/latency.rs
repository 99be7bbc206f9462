//! The lifecycle latency table: blocked-claim wake-up, delayed-job lateness (alone and with
//! the timer watching many queues), and `PING` while the timer promotes a backlog.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use redis::cmd;

use crate::measure::percentile;
use crate::support::{self, job_id, Server};
use crate::timer::{backlog, timer_load};
use crate::workload::now_unix_ms;

/// The lifecycle latency table: `wake_samples` wake-ups, `late_samples` delayed jobs, then
/// `samples` delayed jobs while the timer watches `queues` other queues, then `PING` while it
/// promotes `queues_due` queues of `per_queue` jobs due at once.
pub fn table(
    md: &mut String,
    server: &Server,
    (wake_samples, late_samples): (usize, usize),
    (queues, samples): (usize, usize),
    (queues_due, per_queue): (usize, usize),
) {
    let wake = wake_up_latency(server, wake_samples);
    let late = delayed_lateness(server, late_samples);
    let _ = writeln!(md, "## Lifecycle latency\n");
    let _ = writeln!(md, "| measure | samples | p50 ms | p99 ms | max ms |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    latency_row(
        md,
        "blocked `EMQ.CLAIM` wake-up after `EMQ.ENQUEUE`",
        &wake,
        3,
    );
    latency_row(
        md,
        "delayed job (`AT`) lateness at a blocked claimer",
        &late,
        1,
    );
    let late = timer_load(server, queues, samples);
    latency_row(
        md,
        &format!("delayed job lateness, {queues} other queues watched (each a job due in an hour)"),
        &late,
        1,
    );
    let (pings, took) = backlog(server, queues_due, per_queue);
    latency_row(
        md,
        &format!(
            "`PING` while the timer promotes {} jobs due at once ({queues_due} queues), all pending {:.0} ms after",
            queues_due * per_queue,
            took
        ),
        &pings,
        2,
    );
    let _ = writeln!(md);
}

/// One row of the latency table: the samples (sorted, in ms), their median, p99 and maximum,
/// with `decimals` places.
fn latency_row(md: &mut String, measure: &str, sorted: &[f64], decimals: usize) {
    let _ = writeln!(
        md,
        "| {measure} | {} | {:.decimals$} | {:.decimals$} | {:.decimals$} |",
        sorted.len(),
        percentile(sorted, 0.5),
        percentile(sorted, 0.99),
        sorted.last().copied().unwrap_or(0.0)
    );
}

/// A job a claim replies: id, payload, attempts.
type Claimed = (String, Vec<u8>, i64);

/// `EMQ.CLAIM <q> BLOCK 5000`: the jobs it took, `None` if it timed out.
fn blocked_claim(con: &mut support::Connection, q: &str) -> Option<Vec<Claimed>> {
    cmd("EMQ.CLAIM")
        .arg(q)
        .arg("BLOCK")
        .arg(5000)
        .query(con)
        .expect("claim")
}

/// Blocked-claim wake-up latency: enqueue -> the blocked claimer has the job, in ms.
fn wake_up_latency(server: &Server, samples: usize) -> Vec<f64> {
    let mut producer = server.conn();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut waiter = server.conn();
        let q = format!("wake{i}");
        let h = thread::spawn(move || {
            let jobs = blocked_claim(&mut waiter, &q);
            (Instant::now(), jobs.map(|j| j.len()))
        });
        // Let the claimer block first.
        thread::sleep(Duration::from_millis(3));
        let sent = Instant::now();
        let _: i64 = cmd("EMQ.ENQUEUE")
            .arg(format!("wake{i}"))
            .arg(job_id(i as u64 + 1))
            .arg("x")
            .query(&mut producer)
            .expect("enqueue");
        let (got, n) = h.join().expect("waiter");
        assert_eq!(n, Some(1));
        out.push(got.duration_since(sent).as_secs_f64() * 1000.0);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// Delayed-job lateness: how long after its due time a blocked claimer receives a job, in ms.
pub fn delayed_lateness(server: &Server, samples: usize) -> Vec<f64> {
    let mut producer = server.conn();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut waiter = server.conn();
        let q = format!("late{i}");
        let due = now_unix_ms().round() as i64 + 30;
        let _: i64 = cmd("EMQ.ENQUEUE")
            .arg(&q)
            .arg(job_id(i as u64 + 1))
            .arg("x")
            .arg("AT")
            .arg(due)
            .query(&mut producer)
            .expect("enqueue");
        let jobs = blocked_claim(&mut waiter, &q);
        assert!(jobs.is_some());
        out.push(now_unix_ms() - due as f64);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}
