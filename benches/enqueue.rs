//! `make bench`: EMQ.ENQUEUE and EMQ.MENQUEUE against the reference Lua `@enqueue` (EVALSHA)
//! and native HSET+ZADD, on one server, interleaved over several rounds, with identical ids
//! and payloads; then blocked-claim wake-up latency and delayed-job lateness. Prints Markdown
//! and writes it to docs/bench.md. Figures are measurements, never assertions.

#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::cmd;
use support::{job_id, Options, Rng, Server};

const ENQUEUE_LUA: &str = include_str!("../lua/enqueue.lua");
const CONNECTIONS: usize = 50;
const PAYLOAD: &[u8; 48] = b"{\"sku\":4242,\"qty\":1,\"note\":\"forty-eight bytes!\"}";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Lua,
    Module,
    Native,
    Batch(usize),
}

impl Variant {
    fn name(self) -> String {
        match self {
            Variant::Lua => "Lua `@enqueue` (EVALSHA)".into(),
            Variant::Module => "`EMQ.ENQUEUE`".into(),
            Variant::Native => "native `HSET`+`ZADD`".into(),
            Variant::Batch(n) => format!("`EMQ.MENQUEUE` ×{n}"),
        }
    }

    /// The commandstats entries whose time is this variant's server time.
    fn stats(self) -> &'static [&'static str] {
        match self {
            Variant::Lua => &["evalsha"],
            Variant::Module => &["emq.enqueue"],
            Variant::Native => &["hset", "zadd"],
            Variant::Batch(_) => &["emq.menqueue"],
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ids {
    Monotonic,
    Random,
}

struct Sample {
    server_us_per_job: f64,
    jobs_per_sec: f64,
}

fn ids_for(ids: Ids, jobs: usize, round: u64) -> Vec<String> {
    match ids {
        Ids::Monotonic => (0..jobs as u64).map(|i| job_id((round << 40) + i + 1)).collect(),
        Ids::Random => {
            let mut rng = Rng::new(0x5EED + round);
            (0..jobs).map(|_| job_id(rng.next_u64() >> 2)).collect()
        }
    }
}

fn server_usec(con: &mut redis::Connection, names: &[&str]) -> f64 {
    let info: String = cmd("INFO").arg("commandstats").query(con).expect("INFO");
    let mut total = 0.0;
    for line in info.lines() {
        for name in names {
            if let Some(rest) = line.strip_prefix(&format!("cmdstat_{name}:")) {
                if let Some(usec) = rest.split(',').find_map(|kv| kv.strip_prefix("usec=")) {
                    total += usec.parse::<f64>().unwrap_or(0.0);
                }
            }
        }
    }
    total
}

/// One timed run: `jobs` ids enqueued by `CONNECTIONS` clients, `depth` commands in flight each.
fn run(server: &Server, variant: Variant, ids: &[String], depth: usize) -> Sample {
    let mut admin = server.conn();
    let _: () = cmd("FLUSHALL").query(&mut admin).expect("flush");
    let _: () = cmd("CONFIG").arg("RESETSTAT").query(&mut admin).expect("resetstat");
    let sha: String = cmd("SCRIPT").arg("LOAD").arg(ENQUEUE_LUA).query(&mut admin).expect("load");
    let queue = "bench";
    let barrier = Arc::new(Barrier::new(CONNECTIONS + 1));
    let shares: Vec<Vec<String>> = (0..CONNECTIONS)
        .map(|c| ids.iter().skip(c).step_by(CONNECTIONS).cloned().collect())
        .collect();
    let handles: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let mut con = server.conn();
            let (barrier, sha) = (barrier.clone(), sha.clone());
            thread::spawn(move || {
                let per_call = match variant {
                    Variant::Batch(n) => n,
                    _ => 1,
                };
                let calls: Vec<&[String]> = share.chunks(per_call).collect();
                barrier.wait();
                for window in calls.chunks(depth) {
                    let mut p = redis::pipe();
                    for call in window {
                        match variant {
                            Variant::Lua => {
                                let id = &call[0];
                                p.cmd("EVALSHA").arg(&sha).arg(2).arg(format!("emq:{{{queue}}}:job:{id}")).arg(format!("emq:{{{queue}}}:pending")).arg(id).arg(&PAYLOAD[..]);
                            }
                            Variant::Module => {
                                p.cmd("EMQ.ENQUEUE").arg(queue).arg(&call[0]).arg(&PAYLOAD[..]);
                            }
                            Variant::Native => {
                                let id = &call[0];
                                p.cmd("HSET").arg(format!("emq:{{{queue}}}:job:{id}")).arg("state").arg("pending").arg("attempts").arg("0").arg("payload").arg(&PAYLOAD[..]);
                                p.cmd("ZADD").arg(format!("emq:{{{queue}}}:pending")).arg(0).arg(id);
                            }
                            Variant::Batch(_) => {
                                let c = p.cmd("EMQ.MENQUEUE").arg(queue);
                                for id in call.iter() {
                                    c.arg(id).arg(&PAYLOAD[..]);
                                }
                            }
                        }
                    }
                    let _: redis::Value = p.query(&mut con).expect("pipeline");
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("client");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let card: usize = cmd("ZCARD").arg(format!("emq:{{{queue}}}:pending")).query(&mut admin).expect("zcard");
    assert_eq!(card, ids.len(), "{variant:?} enqueued every job");
    let usec = server_usec(&mut admin, variant.stats());
    Sample {
        server_us_per_job: usec / ids.len() as f64,
        jobs_per_sec: ids.len() as f64 / elapsed,
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn now_unix_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0)
}

/// Blocked-claim wake-up latency: enqueue -> the blocked claimer has the job, in ms.
fn wake_up_latency(server: &Server, samples: usize) -> Vec<f64> {
    let mut producer = server.conn();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut waiter = server.conn();
        let q = format!("wake{i}");
        let h = thread::spawn(move || {
            let jobs: Option<Vec<(String, Vec<u8>, i64)>> = cmd("EMQ.CLAIM").arg(&q).arg("BLOCK").arg(5000).query(&mut waiter).expect("claim");
            (Instant::now(), jobs.map(|j| j.len()))
        });
        // Let the claimer block first.
        thread::sleep(Duration::from_millis(3));
        let sent = Instant::now();
        let _: i64 = cmd("EMQ.ENQUEUE").arg(format!("wake{i}")).arg(job_id(i as u64 + 1)).arg("x").query(&mut producer).expect("enqueue");
        let (got, n) = h.join().expect("waiter");
        assert_eq!(n, Some(1));
        out.push(got.duration_since(sent).as_secs_f64() * 1000.0);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// Delayed-job lateness: how long after its due time a blocked claimer receives a job, in ms.
fn delayed_lateness(server: &Server, samples: usize) -> Vec<f64> {
    let mut producer = server.conn();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut waiter = server.conn();
        let q = format!("late{i}");
        let due = now_unix_ms().round() as i64 + 30;
        let _: i64 = cmd("EMQ.ENQUEUE").arg(&q).arg(job_id(i as u64 + 1)).arg("x").arg("AT").arg(due).query(&mut producer).expect("enqueue");
        let jobs: Option<Vec<(String, Vec<u8>, i64)>> = cmd("EMQ.CLAIM").arg(&q).arg("BLOCK").arg(5000).query(&mut waiter).expect("claim");
        assert!(jobs.is_some());
        out.push(now_unix_ms() - due as f64);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let jobs: usize = std::env::var("BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let server = Server::start(Options::default().arg("maxclients", "1000"));
    let version: String = {
        let mut c = server.conn();
        support::info_field(&mut c, "server", "valkey_version").unwrap_or_else(|| "?".into())
    };
    let variants = [Variant::Lua, Variant::Module, Variant::Native, Variant::Batch(10), Variant::Batch(100)];
    let mut md = String::new();
    let _ = writeln!(md, "# EchoMQ benchmarks\n");
    let _ = writeln!(
        md,
        "Produced by `make bench` (`BENCH_ROUNDS={rounds} BENCH_JOBS={jobs} cargo bench --bench enqueue`) on {} ({} cores), valkey-server {version}, the module built with `cargo build --release`. One server; {CONNECTIONS} client connections; the same valid 14-byte `JOB` ids and the same 48-byte payload for every variant; variants interleaved (A B C D E, A B C D E, ...) over {rounds} rounds of {jobs} jobs, with `FLUSHALL` and `CONFIG RESETSTAT` before each run. Server µs/job is the `INFO commandstats` time of the variant's commands divided by the jobs; jobs/s is measured by the client. Figures are medians with the min–max spread.\n",
        cpu_model(),
        thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    );
    for (ids, ids_name) in [(Ids::Monotonic, "monotonic ids (as minted)"), (Ids::Random, "random ids")] {
        for depth in [16usize, 1] {
            let mut samples: Vec<Vec<Sample>> = variants.iter().map(|_| Vec::new()).collect();
            for round in 0..rounds {
                let id_list = ids_for(ids, jobs, round as u64 + 1);
                for (v, variant) in variants.iter().enumerate() {
                    samples[v].push(run(&server, *variant, &id_list, depth));
                }
            }
            let stats: Vec<((f64, f64, f64), (f64, f64, f64))> = samples
                .iter()
                .map(|s| {
                    (
                        median(s.iter().map(|x| x.server_us_per_job).collect()),
                        median(s.iter().map(|x| x.jobs_per_sec).collect()),
                    )
                })
                .collect();
            let (lua_us, lua_tp) = (stats[0].0 .0, stats[0].1 .0);
            let (nat_us, nat_tp) = (stats[2].0 .0, stats[2].1 .0);
            let _ = writeln!(md, "## {ids_name}, pipeline depth {depth}\n");
            let _ = writeln!(md, "| variant | server µs/job | jobs/s | server time vs Lua | vs native | throughput vs Lua | vs native |");
            let _ = writeln!(md, "|---|---|---|---|---|---|---|");
            for (v, variant) in variants.iter().enumerate() {
                let ((us, us_lo, us_hi), (tp, tp_lo, tp_hi)) = stats[v];
                let _ = writeln!(
                    md,
                    "| {} | {us:.2} ({us_lo:.2}–{us_hi:.2}) | {tp:.0} ({tp_lo:.0}–{tp_hi:.0}) | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
                    variant.name(),
                    us / lua_us,
                    us / nat_us,
                    tp / lua_tp,
                    tp / nat_tp,
                );
            }
            let _ = writeln!(md);
            eprintln!("done: {ids_name}, depth {depth}");
        }
    }
    let wake = wake_up_latency(&server, 300);
    let late = delayed_lateness(&server, 200);
    let _ = writeln!(md, "## Lifecycle latency\n");
    let _ = writeln!(md, "| measure | samples | p50 ms | p99 ms | max ms |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    let _ = writeln!(md, "| blocked `EMQ.CLAIM` wake-up after `EMQ.ENQUEUE` | {} | {:.3} | {:.3} | {:.3} |", wake.len(), percentile(&wake, 0.5), percentile(&wake, 0.99), wake[wake.len() - 1]);
    let _ = writeln!(md, "| delayed job (`AT`) lateness at a blocked claimer | {} | {:.1} | {:.1} | {:.1} |", late.len(), percentile(&late, 0.5), percentile(&late, 0.99), late[late.len() - 1]);
    let _ = writeln!(md);
    print!("{md}");
    let path = support::repo_root().join("docs/bench.md");
    let previous = std::fs::read_to_string(&path).unwrap_or_default();
    // Keep the hand-written optimisation log below the generated figures.
    let log = previous.split_once("<!-- optimisation log -->").map(|(_, l)| l.to_string()).unwrap_or_default();
    let _ = std::fs::write(&path, format!("{md}<!-- optimisation log -->{log}"));
}
