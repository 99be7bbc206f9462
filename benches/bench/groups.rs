//! Claiming from a grouped queue (docs/groups.md): the same jobs claimed with
//! `EMQ.CLAIM COUNT 100` from one group and from many, by main-thread CPU per job, beside the
//! same jobs in a queue without groups.

use std::fmt::Write as _;
use std::io::Write;

use redis::cmd;

use crate::commands::{claimed, encode_claim};
use crate::measure::{median, ratio_spread, spread, timed};
use crate::resp::{encode, read_replies};
use crate::support::{job_id, Server};
use crate::workload::{fresh, PAYLOAD};

/// Jobs a claim asks for.
const COUNT: usize = 100;
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

/// Every job claimed by [`CLIENTS`] clients, `COUNT` a claim: main-thread CPU µs a job.
fn drain(server: &Server, jobs: usize) -> f64 {
    let mut admin = server.conn();
    let work: Vec<_> = (0..CLIENTS)
        .map(|_| {
            move |stream: &mut std::net::TcpStream, inbox: &mut Vec<u8>| {
                let mut out = Vec::new();
                encode_claim(&mut out, QUEUE, COUNT);
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

/// The table: a queue without groups, one group, and `many` groups, `rounds` rounds of `jobs`.
pub fn table(md: &mut String, server: &Server, rounds: usize, jobs: usize, many: usize) {
    let variants = [None, Some(1), Some(many)];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 0..rounds {
        for (v, groups) in variants.iter().enumerate() {
            fill(server, jobs, *groups);
            let per_job = drain(server, jobs);
            eprintln!("groups round {round} {groups:?}: cpu {per_job:.3} µs/job");
            cpu[v].push(per_job);
        }
    }
    let _ = write!(
        md,
        "\n## Claiming from many groups\n\n{jobs} jobs are claimed with `EMQ.CLAIM COUNT {COUNT}` by {CLIENTS} clients until the queue is empty: in a queue without groups, with every job in one group (`GROUP g0`), and spread over {many} groups in turn (`GROUP g<n mod {many}>`), so each claim takes one job from each of {COUNT} groups. The jobs are enqueued before the clock starts. Main-thread CPU (`INFO cpu`) per job claimed; medians (min–max) over {rounds} rounds; the ratio is the median of the per-round ratios to one group.\n\n| queue | CPU µs / job | against one group |\n|---|---|---|\n"
    );
    let names = [
        "no groups".to_string(),
        "1 group".to_string(),
        format!("{many} groups"),
    ];
    for (v, name) in names.iter().enumerate() {
        let ratios = cpu[v].iter().zip(&cpu[1]).map(|(a, b)| a / b).collect();
        let _ = writeln!(
            md,
            "| {name} | {} | {} |",
            spread(cpu[v].clone(), 3),
            ratio_spread(ratios, 2)
        );
    }
    let (mid, _, _) = median(cpu[2].iter().zip(&cpu[1]).map(|(a, b)| a / b).collect());
    let _ = writeln!(md, "\nClaiming from {many} groups costs {mid:.2}× what claiming from one group does (the target is at most 1.5×).");
}
