//! `make bench`: EMQ.ENQUEUE and EMQ.MENQUEUE against the reference Lua `@enqueue` (EVALSHA)
//! and native HSET+ZADD, on one server, interleaved over several rounds, with identical ids
//! and payloads; in the same rounds, a job's whole life (enqueue, claim, ack) with the queue's
//! event stream off and on; a flow's whole life against independent jobs', on one server and
//! across primaries; claims from one group against many; then blocked-claim wake-up latency
//! and delayed-job lateness.
//! Prints Markdown and writes it to docs/bench.md. Figures are measurements, never assertions.

pub(crate) use emq_harness as support;

mod commands;
mod flows;
mod groups;
mod idle;
mod latency;
mod lifecycle;
mod measure;
mod partitioned;
mod pinned;
mod report;
mod resp;
mod tax;
mod throughput;
mod timer;
mod workload;

use support::{Options, Server};

/// How big a run is: the benchmark's (`cargo bench` passes `--bench`), or the smoke run's
/// (`cargo test --all-targets` runs this binary without it: one small round, nothing written).
struct Scale {
    benchmark: bool,
    rounds: usize,
    jobs: usize,
}

impl Scale {
    fn from_env() -> Scale {
        let benchmark = std::env::args().any(|a| a == "--bench");
        let setting = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let (rounds, jobs) = if benchmark {
            (setting("BENCH_ROUNDS", 7), setting("BENCH_JOBS", 100_000))
        } else {
            (1, 2_000)
        };
        Scale {
            benchmark,
            rounds,
            jobs,
        }
    }

    /// `benchmark` in the benchmark, `smoke` in the smoke run.
    fn pick<T>(&self, benchmark: T, smoke: T) -> T {
        if self.benchmark {
            benchmark
        } else {
            smoke
        }
    }
}

/// A table `BENCH_ONLY` can name, and how to make it alone.
type Only = (&'static str, fn(&Scale) -> String);

/// What `BENCH_ONLY` can name: one table alone, printed, nothing written.
const ONLY: [Only; 7] = [
    ("tax", only_tax),
    ("idle", only_idle),
    ("lifecycle", only_lifecycle),
    ("flows", only_flows),
    ("groups", only_groups),
    ("metrics", only_metrics),
    ("partitioned", only_partitioned),
];

/// The table of what EchoMQ costs commands on other keys.
fn only_tax(scale: &Scale) -> String {
    let mut md = String::new();
    tax::unrelated_key_tax(&mut md, scale.jobs, scale.rounds);
    md
}

/// The table of what an idle server costs.
fn only_idle(scale: &Scale) -> String {
    let mut md = String::new();
    idle::idle_table(&mut md, 100_000, 5, scale.rounds);
    md
}

/// The table of the whole life by settle.
fn only_lifecycle(scale: &Scale) -> String {
    let mut md = String::new();
    lifecycle::by_settle_alone(&mut md, &bench_server(), scale.rounds, scale.jobs);
    md
}

/// The table of a flow's whole life against independent jobs'.
fn only_flows(scale: &Scale) -> String {
    let mut md = String::new();
    flows::table(&mut md, &bench_server(), scale.rounds, scale.jobs);
    md
}

/// The table of claims from one group against claims from many.
fn only_groups(scale: &Scale) -> String {
    let mut md = String::new();
    groups::table(
        &mut md,
        &bench_server(),
        scale.rounds,
        scale.jobs,
        scale.pick(10_000, 100),
    );
    md
}

/// The table of what the server's metrics cost a job's whole life.
fn only_metrics(scale: &Scale) -> String {
    let mut md = String::new();
    lifecycle::metrics::table(&mut md, &bench_server(), scale.rounds, scale.jobs);
    md
}

/// The table of a partitioned queue against an ordinary one on a cluster.
fn only_partitioned(scale: &Scale) -> String {
    let mut md = String::new();
    partitioned::table(&mut md, scale.rounds, scale.jobs);
    md
}

/// The server the enqueue, lifecycle and latency tables measure.
fn bench_server() -> Server {
    Server::start(Options::default().arg("maxclients", "1000"))
}

/// Every table, in docs/bench.md's order.
fn everything(scale: &Scale) -> String {
    let server = bench_server();
    let mut md = String::new();
    report::header(&mut md, &server, scale.rounds, scale.jobs);
    // The whole-life workloads run in the rounds of the first table, after its variants.
    let mut life = lifecycle::Rounds::default();
    throughput::tables(&mut md, &server, scale.rounds, scale.jobs, |ids, depth| {
        life.round(&server, ids, depth)
    });
    throughput::replica_table(&mut md, &server, scale.rounds, scale.jobs);
    lifecycle::tables::write(&mut md, &life, scale.jobs);
    flows::table(&mut md, &server, scale.rounds, scale.jobs);
    groups::table(
        &mut md,
        &server,
        scale.rounds,
        scale.jobs,
        scale.pick(10_000, 100),
    );
    lifecycle::metrics::table(&mut md, &server, scale.rounds, scale.jobs);
    partitioned::table(&mut md, scale.rounds, scale.jobs);
    // Delayed queues the timer watches: in the latency table, then in the idle table.
    let (queues, secs) = scale.pick((100_000, 5), (2_000, 1));
    latency::table(
        &mut md,
        &server,
        scale.pick((300, 200), (20, 10)),
        (queues, scale.pick(100, 5)),
        scale.pick((200, 1_000), (10, 100)),
    );
    let (rounds, passes) = scale.pick((100_000, scale.rounds), (2_000, 1));
    tax::unrelated_key_tax(&mut md, rounds, passes);
    idle::idle_table(&mut md, queues, secs, scale.pick(3, 1));
    md
}

fn main() {
    let scale = Scale::from_env();
    let only = std::env::var("BENCH_ONLY").ok();
    if let Some((_, table)) = ONLY.iter().find(|(name, _)| only.as_deref() == Some(*name)) {
        print!("{}", table(&scale));
        return;
    }
    let md = everything(&scale);
    print!("{md}");
    if scale.benchmark {
        report::write(&md);
    }
}
