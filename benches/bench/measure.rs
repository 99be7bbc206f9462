//! What a run measures: the server's commandstats time and main-thread CPU per job, and the
//! client's jobs/s; how clients are released together; medians and percentiles.

use std::fmt;
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use redis::cmd;

use crate::support::Server;

/// One run's figures per job.
pub struct Sample {
    /// The `INFO commandstats` time of the run's commands.
    pub server_us_per_job: f64,
    /// The server main thread's CPU time (`INFO cpu`).
    pub cpu_us_per_job: f64,
    /// As the clients measured it.
    pub jobs_per_sec: f64,
}

/// How the progress lines on stderr show a sample.
impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "commandstats {:.3} cpu {:.3} jobs/s {:.0}",
            self.server_us_per_job, self.cpu_us_per_job, self.jobs_per_sec
        )
    }
}

/// The figures of `jobs` jobs that took `usec` of commandstats time, `cpu` s of main-thread
/// CPU and `elapsed` s.
pub fn sample(jobs: usize, usec: f64, cpu: f64, elapsed: f64) -> Sample {
    Sample {
        server_us_per_job: usec / jobs as f64,
        cpu_us_per_job: cpu * 1e6 / jobs as f64,
        jobs_per_sec: jobs as f64 / elapsed,
    }
}

/// CPU seconds the server's main thread has used (`INFO cpu`): parsing, dispatch, the
/// commands, replies and the network, all of it.
pub fn main_thread_cpu(con: &mut redis::Connection) -> f64 {
    let info: String = cmd("INFO").arg("cpu").query(con).expect("INFO cpu");
    ["used_cpu_user_main_thread", "used_cpu_sys_main_thread"]
        .iter()
        .filter_map(|f| {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("{f}:")))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

/// The sum of one `INFO commandstats` field (`usec`, `calls`) over the commands `names`.
pub fn command_stat(con: &mut redis::Connection, names: &[&str], field: &str) -> f64 {
    let info: String = cmd("INFO").arg("commandstats").query(con).expect("INFO");
    let key = format!("{field}=");
    let mut total = 0.0;
    for line in info.lines() {
        for name in names {
            if let Some(rest) = line.strip_prefix(&format!("cmdstat_{name}:")) {
                if let Some(value) = rest.split(',').find_map(|kv| kv.strip_prefix(key.as_str())) {
                    total += value.parse::<f64>().unwrap_or(0.0);
                }
            }
        }
    }
    total
}

/// The commandstats time (µs) of the commands `names`.
pub fn server_usec(con: &mut redis::Connection, names: &[&str]) -> f64 {
    command_stat(con, names, "usec")
}

/// Runs each of `work` on a connection of its own, all released at once: the wall time (s),
/// the server main thread's CPU over it (s), and what each returned. Whatever `work` encodes
/// before it is handed over is outside the clock.
pub fn timed<R, F>(
    server: &Server,
    admin: &mut redis::Connection,
    work: Vec<F>,
) -> (f64, f64, Vec<R>)
where
    F: FnOnce(&mut TcpStream, &mut Vec<u8>) -> R + Send + 'static,
    R: Send + 'static,
{
    timed_across(server, std::slice::from_mut(admin), work)
}

/// As [`timed`], the CPU summed over the main threads of the servers `admins` reach (the
/// primaries a cluster's run involves), the clients connected to `server`.
pub fn timed_across<R, F>(
    server: &Server,
    admins: &mut [redis::Connection],
    work: Vec<F>,
) -> (f64, f64, Vec<R>)
where
    F: FnOnce(&mut TcpStream, &mut Vec<u8>) -> R + Send + 'static,
    R: Send + 'static,
{
    let cpu_of =
        |admins: &mut [redis::Connection]| -> f64 { admins.iter_mut().map(main_thread_cpu).sum() };
    let barrier = Arc::new(Barrier::new(work.len() + 1));
    let handles: Vec<_> = work
        .into_iter()
        .map(|w| {
            let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut inbox = Vec::with_capacity(1 << 16);
                barrier.wait();
                w(&mut stream, &mut inbox)
            })
        })
        .collect();
    let cpu_before = cpu_of(admins);
    barrier.wait();
    let start = Instant::now();
    let out: Vec<R> = handles
        .into_iter()
        .map(|h| h.join().expect("client"))
        .collect();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_of(admins) - cpu_before;
    (elapsed, cpu, out)
}

/// A median with its min and max.
type Spread = (f64, f64, f64);

/// The median of `v`, with its min and max.
pub fn median(mut v: Vec<f64>) -> Spread {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The median (min–max) of `v`, with `decimals` places: a table's cell.
pub fn spread(v: Vec<f64>, decimals: usize) -> String {
    let (mid, lo, hi) = median(v);
    format!("{mid:.decimals$} ({lo:.decimals$}–{hi:.decimals$})")
}

/// The median (min–max) of the ratios `v`, with `decimals` places: a table's cell.
pub fn ratio_spread(v: Vec<f64>, decimals: usize) -> String {
    let (mid, lo, hi) = median(v);
    format!("{mid:.decimals$}× ({lo:.decimals$}–{hi:.decimals$})")
}

/// The median of the ratios `v` with a 95% interval for it, with `decimals` places: the
/// order statistics at ranks (n − 1.96·√n)/2 and its mirror, which hold the true median with
/// 95% confidence whatever the ratios' distribution (all of them under 6 rounds).
pub fn ratio_interval(mut v: Vec<f64>, decimals: usize) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let k = ((n as f64 - 1.96 * (n as f64).sqrt()) / 2.0)
        .floor()
        .max(1.0) as usize;
    let (lo, hi) = (v[k - 1], v[n - k]);
    let mid = v[n / 2];
    format!("{mid:.decimals$}× ({lo:.decimals$}–{hi:.decimals$})")
}

/// The `p` quantile (0 to 1) of `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}
