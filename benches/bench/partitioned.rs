//! A partitioned queue against an ordinary one on a 3-primary cluster (docs/cluster.md): the
//! same jobs' whole life, `EMQ.MENQUEUE` of 100, `EMQ.CLAIM COUNT 100` and `EMQ.MACK` of what
//! was claimed, by main-thread CPU per job summed over the primaries, each primary's share of
//! it, and jobs/s.

use std::fmt::Write as _;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

use echomq::protocol::partition::{name, route};
use redis::cmd;

use crate::commands::{claimed, encode_claim, encode_mack};
use crate::measure::{main_thread_cpu, ratio_spread, spread};
use crate::resp::{encode, read_replies};
use crate::support::cluster::Cluster;
use crate::support::cluster_load::{queue_elsewhere, slot_of};
use crate::support::{job_id, Connection};
use crate::workload::PAYLOAD;

/// The partitioned queue's width, and the clients of either run (one a partition).
const WIDTH: u16 = 12;
/// Jobs a batch: enqueued, claimed and acknowledged together.
const BATCH: usize = 100;

/// One run's figures: wall time (s) and each primary's main-thread CPU (s).
struct Run {
    elapsed: f64,
    cpu: Vec<f64>,
}

/// One client's work: its queue on the node at `port`, its ids; every job enqueued, claimed and
/// acknowledged in batches, then the queue claimed until it is empty. How many it acknowledged.
fn client(port: u16, queue: String, ids: Vec<String>) -> impl FnOnce() -> usize {
    move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut inbox = Vec::with_capacity(1 << 16);
        let mut acked = 0;
        let mut claim = Vec::new();
        encode_claim(&mut claim, &queue, BATCH);
        let settle = |stream: &mut TcpStream, inbox: &mut Vec<u8>| -> usize {
            stream.write_all(&claim).expect("write");
            let mut kept = Vec::new();
            read_replies(stream, inbox, 1, Some(&mut kept));
            let jobs = claimed(&kept[0]);
            if !jobs.is_empty() {
                let mut out = Vec::new();
                encode_mack(&mut out, &queue, &jobs, None);
                stream.write_all(&out).expect("write");
                read_replies(stream, inbox, 1, None);
            }
            jobs.len()
        };
        for chunk in ids.chunks(BATCH) {
            let mut args: Vec<&[u8]> = vec![b"EMQ.MENQUEUE", queue.as_bytes()];
            for id in chunk {
                args.extend([id.as_bytes(), PAYLOAD.as_slice()]);
            }
            let mut out = Vec::new();
            encode(&mut out, &args);
            stream.write_all(&out).expect("write");
            read_replies(&mut stream, &mut inbox, 1, None);
            acked += settle(&mut stream, &mut inbox);
        }
        loop {
            match settle(&mut stream, &mut inbox) {
                0 => return acked,
                n => acked += n,
            }
        }
    }
}

/// Runs the clients at once, timed by each primary's main-thread CPU; checks every job was
/// acknowledged once.
fn run(admins: &mut [(u16, Connection)], clients: Vec<(u16, String, Vec<String>)>) -> Run {
    let jobs: usize = clients.iter().map(|(_, _, ids)| ids.len()).sum();
    let barrier = Arc::new(Barrier::new(clients.len() + 1));
    let handles: Vec<_> = clients
        .into_iter()
        .map(|(port, queue, ids)| {
            let work = client(port, queue, ids);
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                work()
            })
        })
        .collect();
    let before: Vec<f64> = admins.iter_mut().map(|(_, c)| main_thread_cpu(c)).collect();
    barrier.wait();
    let start = Instant::now();
    let acked: usize = handles.into_iter().map(|h| h.join().expect("client")).sum();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = admins
        .iter_mut()
        .zip(before)
        .map(|((_, c), b)| main_thread_cpu(c) - b)
        .collect();
    assert_eq!(acked, jobs, "every job acknowledged once");
    Run { elapsed, cpu }
}

/// The table: `rounds` rounds of `jobs` jobs, the ordinary queue's run and the partitioned
/// queue's in turn.
pub fn table(md: &mut String, rounds: usize, jobs: usize) {
    let cluster = Cluster::start(3, 0);
    let mut admins: Vec<(u16, Connection)> = cluster
        .topology()
        .iter()
        .filter(|n| n.primary)
        .map(|n| (n.port, cluster.node(n.port).conn()))
        .collect();
    let owner = |queue: &str| cluster.owner(slot_of(queue)).port;
    let parts: Vec<String> = (0..WIDTH)
        .map(|i| String::from_utf8(name(b"spread", i, WIDTH).expect("name")).expect("utf8"))
        .collect();
    for (i, p) in parts.iter().enumerate() {
        let _: i64 = cmd("EMQ.SPAN")
            .arg(p)
            .arg(WIDTH)
            .arg("OF")
            .arg("spread")
            .arg("INDEX")
            .arg(i)
            .query(&mut cluster.node(owner(p)).conn())
            .expect("span a partition");
    }
    // The control: three ordinary queues, one on each primary.
    let mut three: Vec<String> = Vec::new();
    for _ in 0..3 {
        let taken: Vec<&str> = three.iter().map(String::as_str).collect();
        let q = queue_elsewhere(&cluster, "apart", &taken);
        three.push(q);
    }
    // The exact control: twelve ordinary queues laid out as the partitions are, each on the
    // primary of its partition, not marked.
    let mut twelve: Vec<String> = Vec::new();
    for p in &parts {
        let q = (0..)
            .map(|k| format!("lane{k}"))
            .find(|q| owner(q) == owner(p) && !twelve.contains(q))
            .expect("a queue on that primary");
        twelve.push(q);
    }
    let jobs = jobs / (BATCH * usize::from(WIDTH)) * BATCH * usize::from(WIDTH);
    let cores = thread::available_parallelism().map_or(0, |n| n.get());
    let _ = write!(md, "{}", heading(cores, rounds, jobs));
    for (pass, listpack) in LISTPACK_ENTRIES.iter().enumerate() {
        for (_, admin) in admins.iter_mut() {
            let _: () = cmd("CONFIG")
                .arg("SET")
                .arg("zset-max-listpack-entries")
                .arg(listpack)
                .query(admin)
                .expect("CONFIG SET");
        }
        let (mut twelve_cpu, mut against_twelve, mut twelve_rate) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut single_cpu, mut spread_cpu, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut three_cpu, mut three_ratios, mut twelve_ratios) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut single_rate, mut spread_rate, mut three_rate) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut low_share, mut high_share) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let ids: Vec<String> = (0..jobs)
                .map(|n| job_id(((pass * rounds + round) * jobs + n + 1) as u64))
                .collect();
            // Each client its share of the ids, on the queue `queue_of` gives it: the ordinary
            // queue for all, or three ordinary queues, a third of the clients on each.
            let dealt = |queue_of: &dyn Fn(usize) -> String| -> Vec<(u16, String, Vec<String>)> {
                (0..usize::from(WIDTH))
                    .map(|c| {
                        let share = ids
                            .iter()
                            .skip(c)
                            .step_by(usize::from(WIDTH))
                            .cloned()
                            .collect();
                        let q = queue_of(c);
                        (owner(&q), q, share)
                    })
                    .collect()
            };
            let a = run(&mut admins, dealt(&|_| "single".to_string()));
            let apart = dealt(&|c| three[c % 3].clone());
            let c = run(&mut admins, apart);
            let cpu_c: f64 = c.cpu.iter().sum();
            // The partitioned queue: a client a partition, each job where its id routes; then the
            // same jobs in the twelve ordinary queues laid out alike.
            let mut routed: Vec<Vec<String>> = vec![Vec::new(); usize::from(WIDTH)];
            for id in &ids {
                routed[usize::from(route(WIDTH, id.as_bytes()))].push(id.clone());
            }
            let on = |queues: &[String]| -> Vec<(u16, String, Vec<String>)> {
                queues
                    .iter()
                    .zip(routed.clone())
                    .map(|(q, share)| (owner(q), q.clone(), share))
                    .collect()
            };
            let b = run(&mut admins, on(&parts));
            let lanes = on(&twelve);
            let d = run(&mut admins, lanes);
            let cpu_d: f64 = d.cpu.iter().sum();
            let (cpu_a, cpu_b): (f64, f64) = (a.cpu.iter().sum(), b.cpu.iter().sum());
            let shares: Vec<f64> = b.cpu.iter().map(|c| c / cpu_b * 3.0).collect();
            eprintln!(
            "partitioned round {round}: ordinary {:.3} µs/job, partitioned {:.3} µs/job, shares {shares:.3?}",
            cpu_a * 1e6 / jobs as f64,
            cpu_b * 1e6 / jobs as f64
        );
            twelve_cpu.push(cpu_d * 1e6 / jobs as f64);
            against_twelve.push(cpu_b / cpu_d);
            twelve_rate.push(jobs as f64 / d.elapsed);
            three_cpu.push(cpu_c * 1e6 / jobs as f64);
            three_ratios.push(cpu_c / cpu_a);
            twelve_ratios.push(cpu_d / cpu_a);
            three_rate.push(jobs as f64 / c.elapsed);
            single_cpu.push(cpu_a * 1e6 / jobs as f64);
            spread_cpu.push(cpu_b * 1e6 / jobs as f64);
            ratios.push(cpu_b / cpu_a);
            single_rate.push(jobs as f64 / a.elapsed);
            spread_rate.push(jobs as f64 / b.elapsed);
            low_share.push(shares.iter().copied().fold(f64::INFINITY, f64::min));
            high_share.push(shares.iter().copied().fold(0.0, f64::max));
        }
        let _ = write!(
            md,
            "\nWith `zset-max-listpack-entries {listpack}`{}:\n\n| queue | CPU µs / job | against ordinary | against twelve laid out alike | jobs/s | least and most primary share |\n|---|---|---|---|---|---|\n| ordinary | {} | 1.00 | | {} | one primary |\n| three ordinary, one a primary | {} | {} | | {} | |\n| twelve ordinary, laid out as the partitions | {} | {} | 1.00 | {} | |\n| partitioned over {WIDTH} | {} | {} | {} | {} | {} – {} |\n",
            if *listpack == "128" { " (Valkey's default)" } else { "" },
            spread(single_cpu, 3),
            spread(single_rate, 0),
            spread(three_cpu, 3),
            ratio_spread(three_ratios, 3),
            spread(three_rate, 0),
            spread(twelve_cpu, 3),
            ratio_spread(twelve_ratios, 3),
            spread(twelve_rate, 0),
            spread(spread_cpu, 3),
            ratio_spread(ratios, 3),
            ratio_spread(against_twelve, 3),
            spread(spread_rate, 0),
            spread(low_share, 2),
            spread(high_share, 2),
        );
    }
}

/// The settings of `zset-max-listpack-entries` the table is run at: Valkey's default, under
/// which a sorted set of up to 128 members is one listpack whose inserts and removals scan it,
/// and one under which a queue's sets of a batch's jobs are skip lists, as a deep queue's are.
const LISTPACK_ENTRIES: [&str; 2] = ["128", "16"];

/// What the tables measure.
fn heading(cores: usize, rounds: usize, jobs: usize) -> String {
    format!(
        "\n## One queue over the cluster: partitioned against ordinary\n\nOn a cluster of 3 primaries (no replicas) on this machine's {cores} cores, {jobs} jobs go through their whole life, `EMQ.MENQUEUE` of {BATCH}, `EMQ.CLAIM COUNT {BATCH}` and `EMQ.MACK` of what was claimed, by {WIDTH} clients: all on one ordinary queue (one primary), or one client on each partition of a queue spanned over {WIDTH}, each job in the partition its id routes to; and, as the control, {WIDTH} clients on three ordinary queues, one on each primary, which is what spreading the work over three server processes costs on this machine apart from partitioning; and twelve ordinary queues laid out as the partitions are (each on its partition's primary, with its jobs), which is the partitioned run without the marking and the routing checks. Main-thread CPU (`INFO cpu`) per job, summed over the primaries; medians (min–max) over {rounds} rounds, the ratio the median of the per-round ratios. A primary's share is its part of the partitioned run's CPU against a third (1.00 = exactly a third). Jobs/s are wall-clock, with the clients and all three primaries on the same {cores} cores.\n\nA queue's sets (pending, active) hold a batch's jobs at a time here, about {BATCH} in each partition, where the ordinary queue's hold {WIDTH} clients' batches. Under Valkey's default `zset-max-listpack-entries` (128) a sorted set that small is one listpack, whose every insert and removal scans it; past 128 members it is a skip list. The tables are run under that default and under 16, which makes a partition's sets skip lists as the ordinary queue's are (docs/cluster.md, \"How many partitions, and what they carry\").\n"
    )
}
