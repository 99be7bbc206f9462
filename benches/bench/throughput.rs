//! The enqueue tables: EMQ.ENQUEUE and EMQ.MENQUEUE against the reference Lua `@enqueue` and
//! native HSET+ZADD, interleaved over the rounds, by ids, pipeline depth and with a replica.

use std::fmt::Write as _;
use std::net::TcpStream;
use std::time::Duration;

use redis::cmd;

use crate::commands::{encode_lua_enqueue, encode_native_enqueue};
use crate::measure::{median, sample, server_usec, spread, timed, Sample};
use crate::resp::{encode, exchange, Window};
use crate::support::{self, set_key, Options, Server};
use crate::workload::{fresh, ids_for, Ids, CONNECTIONS, ENQUEUE_LUA, PAYLOAD};

/// One way to enqueue a job, a row of every enqueue table.
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

/// One timed run: `ids` enqueued by `CONNECTIONS` clients, `depth` commands in flight each.
/// Commands are encoded to RESP before the clock starts, so the client spends its time on
/// the wire, not on building commands: the server is what is measured.
fn run(server: &Server, variant: Variant, ids: &[String], depth: usize) -> Sample {
    let mut admin = server.conn();
    fresh(&mut admin);
    let sha: String = cmd("SCRIPT")
        .arg("LOAD")
        .arg(ENQUEUE_LUA)
        .query(&mut admin)
        .expect("load");
    let queue = "bench";
    let pending = set_key(queue, "pending");
    let per_call = match variant {
        Variant::Batch(n) => n,
        _ => 1,
    };
    let work: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let share: Vec<&String> = ids.iter().skip(c).step_by(CONNECTIONS).collect();
            let mut windows: Vec<Window> = Vec::new();
            for window in share.chunks(per_call * depth) {
                let mut buf = Vec::new();
                let mut replies = 0;
                for call in window.chunks(per_call) {
                    match variant {
                        Variant::Lua => {
                            encode_lua_enqueue(&mut buf, &sha, queue, &pending, call[0]);
                            replies += 1;
                        }
                        Variant::Module => {
                            encode(
                                &mut buf,
                                &[
                                    b"EMQ.ENQUEUE",
                                    queue.as_bytes(),
                                    call[0].as_bytes(),
                                    PAYLOAD,
                                ],
                            );
                            replies += 1;
                        }
                        Variant::Native => {
                            encode_native_enqueue(&mut buf, queue, &pending, call[0]);
                            replies += 2;
                        }
                        Variant::Batch(_) => {
                            let mut args: Vec<&[u8]> = vec![b"EMQ.MENQUEUE", queue.as_bytes()];
                            for id in call {
                                args.push(id.as_bytes());
                                args.push(PAYLOAD);
                            }
                            encode(&mut buf, &args);
                            replies += 1;
                        }
                    }
                }
                windows.push((buf, replies));
            }
            move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
                exchange(stream, inbox, &windows, false);
            }
        })
        .collect();
    let (elapsed, cpu, _) = timed(server, &mut admin, work);
    let card: usize = cmd("ZCARD").arg(&pending).query(&mut admin).expect("zcard");
    assert_eq!(card, ids.len(), "{variant:?} enqueued every job");
    let usec = server_usec(&mut admin, variant.stats());
    sample(ids.len(), usec, cpu, elapsed)
}

/// Every enqueue table's rows, in order: Lua (the first ratio's base) and native (the second's)
/// at 0 and 2.
const VARIANTS: [Variant; 5] = [
    Variant::Lua,
    Variant::Module,
    Variant::Native,
    Variant::Batch(10),
    Variant::Batch(100),
];

/// The four enqueue tables, by ids (monotonic, random) and pipeline depth (16, 1); `life` runs
/// at the end of each round of the first, on that round's ids at its depth.
pub fn tables(
    md: &mut String,
    server: &Server,
    rounds: usize,
    jobs: usize,
    mut life: impl FnMut(&[String], usize),
) {
    for (ids, ids_name) in [
        (Ids::Monotonic, "monotonic ids (as minted)"),
        (Ids::Random, "random ids"),
    ] {
        for depth in [16usize, 1] {
            let with_life = ids == Ids::Monotonic && depth == 16;
            let samples =
                measure_rounds(server, &VARIANTS, ids, depth, rounds, jobs, |round_ids| {
                    if with_life {
                        life(round_ids, depth);
                    }
                });
            table(
                md,
                &format!("{ids_name}, pipeline depth {depth}"),
                &VARIANTS,
                &samples,
            );
            eprintln!("done: {ids_name}, depth {depth}");
        }
    }
}

/// The same work while a replica (without the module) receives it: every variant now
/// propagates, the module through RM_Replicate.
pub fn replica_table(md: &mut String, server: &Server, rounds: usize, jobs: usize) {
    let replica = Server::start(
        Options::without_module().arg("replicaof", &format!("127.0.0.1 {}", server.port)),
    );
    let mut r = replica.conn();
    let linked = support::wait_until(Duration::from_secs(30), || {
        support::info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    if !linked {
        eprintln!("the replica never linked; no replica figures");
        return;
    }
    let samples = measure_rounds(server, &VARIANTS, Ids::Monotonic, 16, rounds, jobs, |_| {});
    let _ = writeln!(
        md,
        "With a replica attached (a second `valkey-server` on loopback, without the module), every variant propagates its writes; `EMQ.ENQUEUE` and `EMQ.MENQUEUE` hand theirs to `RM_Replicate`.\n"
    );
    table(
        md,
        "monotonic ids, pipeline depth 16, a replica attached",
        &VARIANTS,
        &samples,
    );
    eprintln!("done: with a replica");
}

/// `rounds` rounds of every variant, interleaved, on the same ids per round; `after_each`
/// runs at the end of each round, on that round's ids.
fn measure_rounds(
    server: &Server,
    variants: &[Variant],
    ids: Ids,
    depth: usize,
    rounds: usize,
    jobs: usize,
    mut after_each: impl FnMut(&[String]),
) -> Vec<Vec<Sample>> {
    let mut samples: Vec<Vec<Sample>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let id_list = ids_for(ids, jobs, round as u64 + 1);
        for (v, variant) in variants.iter().enumerate() {
            let sample = run(server, *variant, &id_list, depth);
            eprintln!("round {round} {:<28} {sample}", variant.name());
            samples[v].push(sample);
        }
        after_each(&id_list);
    }
    samples
}

/// One Markdown table: each figure's median (min–max) over the rounds, and its ratios against
/// Lua (variant 0) and native (variant 2) as the median of the per-round ratios. The variants
/// of a round run back to back, so a ratio within a round compares runs that met the same
/// machine (this VM's speed drifts between rounds), and the median of those ratios keeps the
/// pairing.
fn table(md: &mut String, title: &str, variants: &[Variant], samples: &[Vec<Sample>]) {
    type Figure = fn(&Sample) -> f64;
    let figures: [Figure; 3] = [
        |x| x.server_us_per_job,
        |x| x.cpu_us_per_job,
        |x| x.jobs_per_sec,
    ];
    let ratio = |v: usize, base: usize, f: Figure| {
        let paired = samples[v].iter().zip(&samples[base]);
        median(paired.map(|(x, b)| f(x) / f(b)).collect()).0
    };
    let _ = writeln!(md, "## {title}\n");
    let _ = writeln!(md, "| variant | commandstats µs/job | vs Lua | vs native | main-thread CPU µs/job | vs Lua | vs native | jobs/s | vs Lua | vs native |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (v, variant) in variants.iter().enumerate() {
        let mut row = format!("| {} |", variant.name());
        for (i, f) in figures.into_iter().enumerate() {
            let cell = spread(
                samples[v].iter().map(f).collect(),
                if i == 2 { 0 } else { 2 },
            );
            let _ = write!(
                row,
                " {cell} | {:.2}× | {:.2}× |",
                ratio(v, 0, f),
                ratio(v, 2, f)
            );
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}
