//! Claiming from a grouped queue (docs/groups.md): the same jobs claimed with
//! `EMQ.CLAIM COUNT 100` from one group and from many, by main-thread CPU per job, beside the
//! same jobs in a queue without groups.

use std::fmt::Write as _;
use std::io::Write;

use redis::cmd;

use crate::commands::{claimed, encode_claim};
use crate::measure::{ratio_spread, spread, timed};
use crate::resp::{encode, read_replies};
use crate::support::{job_id, Server};
use crate::workload::{fresh, PAYLOAD};

/// Jobs a claim asks for, one table row each: a worker's usual batch, and the largest.
const COUNTS: [usize; 3] = [1, 10, 100];
/// Clients claiming at once.
const CLIENTS: usize = 4;
const QUEUE: &str = "groups";

/// `jobs` jobs enqueued in `groups` groups in turn (none: no `GROUP`), outside the clock.
fn fill(server: &Server, jobs: usize, groups: Option<usize>) {
    let mut con = server.conn();
    fresh(&mut con);
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let mut inbox = Vec::new();
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let mut out = Vec::new();
        for &n in chunk {
            let id = job_id(n as u64 + 1);
            let group = groups.map(|g| format!("g{}", n % g));
            let mut args: Vec<&[u8]> =
                vec![b"EMQ.ENQUEUE", QUEUE.as_bytes(), id.as_bytes(), PAYLOAD];
            if let Some(group) = &group {
                args.extend([&b"GROUP"[..], group.as_bytes()]);
            }
            encode(&mut out, &args);
        }
        stream.write_all(&out).expect("write");
        read_replies(&mut stream, &mut inbox, chunk.len(), None);
    }
}

/// Every job claimed by [`CLIENTS`] clients, `count` a claim: main-thread CPU µs a job.
fn drain(server: &Server, jobs: usize, count: usize) -> f64 {
    let mut admin = server.conn();
    let work: Vec<_> = (0..CLIENTS)
        .map(|_| {
            move |stream: &mut std::net::TcpStream, inbox: &mut Vec<u8>| {
                let mut out = Vec::new();
                encode_claim(&mut out, QUEUE, count);
                let mut taken = 0;
                loop {
                    stream.write_all(&out).expect("write");
                    let mut kept = Vec::new();
                    read_replies(stream, inbox, 1, Some(&mut kept));
                    match claimed(&kept[0]).len() {
                        0 => return taken,
                        n => taken += n,
                    }
                }
            }
        })
        .collect();
    let (_, cpu, taken) = timed(server, &mut admin, work);
    assert_eq!(taken.iter().sum::<usize>(), jobs, "every job claimed once");
    let active: usize = cmd("ZCARD")
        .arg(format!("emq:{{{QUEUE}}}:active"))
        .query(&mut admin)
        .expect("ZCARD");
    assert_eq!(active, jobs);
    cpu * 1e6 / jobs as f64
}

/// The table: for each claim size, a queue without groups, one group, and `many` groups,
/// `rounds` rounds of `jobs` (a tenth of them for claims of one job).
pub fn table(md: &mut String, server: &Server, rounds: usize, jobs: usize, many: usize) {
    let variants = [None, Some(1), Some(many)];
    let _ = write!(
        md,
        "\n## Claiming from many groups\n\nThe jobs are claimed with `EMQ.CLAIM COUNT <n>` by {CLIENTS} clients until the queue is empty: in a queue without groups, with every job in one group (`GROUP g0`), and spread over {many} groups in turn (`GROUP g<n mod {many}>`), so that a claim of `n` jobs takes one from each of `n` groups. The jobs are enqueued before the clock starts: {jobs} for claims of 10 and 100, {} for claims of 1. Main-thread CPU (`INFO cpu`) per job claimed; medians (min–max) over {rounds} rounds; the ratio is the median of the per-round ratios to one group.\n\n| `COUNT` | queue | CPU µs / job | against one group |\n|---|---|---|---|\n",
        jobs / 10
    );
    for count in COUNTS {
        let n = if count == 1 { jobs / 10 } else { jobs };
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for round in 0..rounds {
            for (v, groups) in variants.iter().enumerate() {
                fill(server, n, *groups);
                let per_job = drain(server, n, count);
                eprintln!("groups COUNT {count} round {round} {groups:?}: cpu {per_job:.3} µs/job");
                cpu[v].push(per_job);
            }
        }
        let names = [
            "no groups".to_string(),
            "1 group".to_string(),
            format!("{many} groups"),
        ];
        for (v, name) in names.iter().enumerate() {
            let ratios = cpu[v].iter().zip(&cpu[1]).map(|(a, b)| a / b).collect();
            let _ = writeln!(
                md,
                "| {count} | {name} | {} | {} |",
                spread(cpu[v].clone(), 3),
                ratio_spread(ratios, 2)
            );
        }
    }
}
