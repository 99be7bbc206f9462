//! What an idle server costs, with and without the module: main-thread CPU and wake-ups,
//! empty and holding many delayed queues.

use std::fmt::Write as _;
use std::thread;
use std::time::Duration;

use crate::measure::{main_thread_cpu, ratio_spread, spread};
use crate::support::{job_id, row_key, set_key, Options, Server};
use crate::timer::watch_delayed_queues;
use crate::workload::now_unix_ms;

/// An idle server's counters at one moment: its main thread's CPU (`INFO cpu`, seconds) and its
/// wake-ups (the main thread's voluntary context switches, each a return from waiting on its
/// event loop; `/proc`, `None` where it cannot say).
fn idle_mark(server: &Server, con: &mut redis::Connection) -> (f64, Option<f64>) {
    let switches = || -> Option<f64> {
        let pid = server.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
    };
    (main_thread_cpu(con), switches())
}

/// What idle servers cost over the same `secs`, side by side: each one's main-thread CPU (ms a
/// second) and wake-ups a second ([`idle_mark`]).
type Idle = (f64, Option<f64>);
fn idle_costs(servers: &mut [(&Server, redis::Connection)], secs: u64) -> Vec<Idle> {
    let before: Vec<Idle> = servers.iter_mut().map(|(s, c)| idle_mark(s, c)).collect();
    thread::sleep(Duration::from_secs(secs));
    servers
        .iter_mut()
        .zip(before)
        .map(|((s, c), (cpu, woke))| {
            let (cpu_after, woke_after) = idle_mark(s, c);
            let per_sec = |v: f64| v / secs as f64;
            (
                per_sec((cpu_after - cpu) * 1000.0),
                woke.zip(woke_after).map(|(a, b)| per_sec(b - a)),
            )
        })
        .collect()
}

/// Writes natively the keys `queues` queues of one job due in an hour would have (the rows and
/// `schedule` sets EchoMQ writes), on a server without the module.
fn write_native_queues(con: &mut redis::Connection, queues: usize) {
    let due = now_unix_ms() as i64 + 3_600_000;
    for chunk in (0..queues).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            let (q, id) = (format!("idle{i}"), job_id(i as u64 + 1));
            p.cmd("HSET")
                .arg(row_key(&q, &id))
                .arg(&["state", "scheduled", "attempts", "0", "payload", "x"])
                .ignore()
                .cmd("ZADD")
                .arg(set_key(&q, "schedule"))
                .arg(due)
                .arg(&id)
                .ignore();
        }
        let _: () = p.query(con).expect("the same keys, natively");
    }
    thread::sleep(Duration::from_millis(200));
}

/// How long both servers of the idle table rest after they are filled, before they are measured.
const IDLE_SETTLE_SECS: u64 = 3;

/// The idle table: `rounds` rounds, each on two fresh servers, one without the module and one
/// with it, measured side by side over the same seconds ([`idle_costs`]): empty, then holding
/// `queues` queues; medians (min–max).
pub fn idle_table(md: &mut String, queues: usize, secs: u64, rounds: usize) {
    let mut rows: [Vec<Idle>; 4] = Default::default();
    for round in 0..rounds {
        let plain = Server::start(Options::without_module());
        let module = Server::start(Options::default());
        let mut servers = [(&plain, plain.conn()), (&module, module.conn())];
        thread::sleep(Duration::from_millis(200));
        let empty = idle_costs(&mut servers, secs);
        write_native_queues(&mut servers[0].1, queues);
        watch_delayed_queues(&mut servers[1].1, queues);
        // Both settle alike after their writes (the plain server's came first): the seconds
        // after a burst of writes are not idle on either.
        thread::sleep(Duration::from_secs(IDLE_SETTLE_SECS));
        let full = idle_costs(&mut servers, secs);
        for (row, idle) in rows.iter_mut().zip([empty[0], empty[1], full[0], full[1]]) {
            row.push(idle);
        }
        eprintln!("done: idle round {}", round + 1);
    }
    let cell = |v: &[Idle]| {
        let woke: Vec<f64> = v.iter().filter_map(|i| i.1).collect();
        let woke = if woke.len() == v.len() {
            spread(woke, 1)
        } else {
            "-".to_string()
        };
        format!("{} | {woke}", spread(v.iter().map(|i| i.0).collect(), 2))
    };
    let ratio = |with: &[Idle], without: &[Idle]| {
        ratio_spread(
            with.iter().zip(without).map(|(a, b)| a.0 / b.0).collect(),
            2,
        )
    };
    let _ = writeln!(
        md,
        "## What an idle server costs\n\nThe main thread over {secs} s with nothing due: its CPU (ms a second, `INFO cpu`) and its wake-ups (its voluntary context switches a second, `/proc/<pid>/task/<pid>/status`: each a return from waiting on its event loop), on a fresh `valkey-server` without the module and a fresh one with it, measured side by side over the same seconds, {rounds} rounds: empty, and holding {queues} queues of one job due in an hour each (with the module, enqueued and watched, once the timer's first visit to each is done; without it, the same rows and `schedule` sets written with `HSET` and `ZADD`; both measured after {IDLE_SETTLE_SECS} s more at rest). Medians (min–max) over the rounds; the CPU ratio is the median of the per-round ratios of the two servers measured together.\n\n| server | main-thread CPU ms/s | wake-ups/s | CPU with / without the module |\n|---|---|---|---|\n| without the module, empty | {} | |\n| with EchoMQ, empty | {} | {} |\n| without the module, the keys of {queues} queues | {} | |\n| with EchoMQ, {queues} queues watched | {} | {} |\n",
        cell(&rows[0]),
        cell(&rows[1]),
        ratio(&rows[1], &rows[0]),
        cell(&rows[2]),
        cell(&rows[3]),
        ratio(&rows[3], &rows[2]),
    );
}
