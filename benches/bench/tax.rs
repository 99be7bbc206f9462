//! What loading EchoMQ costs commands on other keys, by the server's main-thread CPU: four
//! workloads on keys outside its grammar, on servers without the module and with it under
//! each `emq.learn-foreign-writes`, interleaved over passes.

use std::fmt::Write as _;
use std::net::TcpStream;

use redis::cmd;

use crate::measure::{ratio_spread, spread, timed};
use crate::resp::{encode, exchange, Window};
use crate::support::{Options, Server};
use crate::workload::{fresh, PAYLOAD};

/// The script the `EVALSHA` workload runs: a sorted-set write and a read, on the keys it is given.
const SCRIPT: &str = "redis.call('ZADD', KEYS[1], 1, ARGV[1]); return redis.call('GET', KEYS[2])";

/// A round of commands on keys outside EchoMQ's grammar.
#[derive(Clone, Copy)]
enum Workload {
    /// `ZADD`, `SET ... EX 3600`, `DEL`.
    SortedSetExpire,
    /// `SET k v`, then `GET k` twice.
    SetGet,
    /// `HSET h f v`, `HGET h f`, `HINCRBY h n 1`.
    Hashes,
    /// `EVALSHA` of [`SCRIPT`].
    Script,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::SortedSetExpire,
        Workload::SetGet,
        Workload::Hashes,
        Workload::Script,
    ];

    /// Its rows' label in the table.
    fn label(self) -> &'static str {
        match self {
            Workload::SortedSetExpire => "`ZADD`, `SET ... EX 3600`, `DEL`",
            Workload::SetGet => "`SET`, `GET`, `GET`",
            Workload::Hashes => "`HSET`, `HGET`, `HINCRBY`",
            Workload::Script => "`EVALSHA` (`ZADD`, `GET`)",
        }
    }

    /// Encodes one round on the keys under `prefix` (`sha`: [`SCRIPT`]'s); the replies it asks for.
    fn encode(self, out: &mut Vec<u8>, prefix: &str, sha: &[u8]) -> usize {
        let (z, k, h) = (
            format!("{prefix}:z"),
            format!("{prefix}:k"),
            format!("{prefix}:h"),
        );
        let (z, k, h) = (z.as_bytes(), k.as_bytes(), h.as_bytes());
        match self {
            Workload::SortedSetExpire => {
                encode(out, &[b"ZADD", z, b"1", b"member"]);
                encode(out, &[b"SET", k, PAYLOAD, b"EX", b"3600"]);
                encode(out, &[b"DEL", k]);
                3
            }
            Workload::SetGet => {
                encode(out, &[b"SET", k, PAYLOAD]);
                encode(out, &[b"GET", k]);
                encode(out, &[b"GET", k]);
                3
            }
            Workload::Hashes => {
                encode(out, &[b"HSET", h, b"f", PAYLOAD]);
                encode(out, &[b"HGET", h, b"f"]);
                encode(out, &[b"HINCRBY", h, b"n", b"1"]);
                3
            }
            Workload::Script => {
                encode(out, &[b"EVALSHA", sha, b"2", z, k, b"member"]);
                1
            }
        }
    }
}

/// Main-thread CPU per round of `workload`, `rounds` of them on keys of their own pipelined in
/// windows of 100 rounds on one connection (µs a round).
fn round_cpu(server: &Server, workload: Workload, sha: &str, rounds: usize, pass: usize) -> f64 {
    let mut admin = server.conn();
    fresh(&mut admin);
    let windows: Vec<Window> = (0..rounds)
        .collect::<Vec<_>>()
        .chunks(100)
        .map(|chunk| {
            let mut out = Vec::new();
            let replies = chunk
                .iter()
                .map(|i| workload.encode(&mut out, &format!("cache:{pass}:{i}"), sha.as_bytes()))
                .sum();
            (out, replies)
        })
        .collect();
    let (_, cpu, _) = timed(
        server,
        &mut admin,
        vec![move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
            exchange(stream, inbox, &windows, false);
        }],
    );
    cpu * 1e6 / rounds as f64
}

/// What loading EchoMQ costs commands on other keys, by main-thread CPU: each workload's rounds
/// on a server without the module and on servers with it, interleaved over `passes` (in each
/// pass, each workload on each server in turn). The medians (µs a round) and the ratios to the
/// bare server, per workload and over the four summed.
pub fn unrelated_key_tax(md: &mut String, rounds: usize, passes: usize) {
    let learn = |value: &str| Options::default().arg("emq.learn-foreign-writes", value);
    let servers = [
        ("without the module", Options::without_module()),
        ("with EchoMQ, default settings", Options::default()),
        ("with EchoMQ, `emq.learn-foreign-writes yes`", learn("yes")),
        ("with EchoMQ, `emq.learn-foreign-writes no`", learn("no")),
    ]
    .map(|(name, options)| (name, Server::start(options)));
    let shas: Vec<String> = servers
        .iter()
        .map(|(_, server)| {
            cmd("SCRIPT")
                .arg("LOAD")
                .arg(SCRIPT)
                .query(&mut server.conn())
                .expect("script load")
        })
        .collect();
    // cpu[workload][server][pass], µs a round.
    let mut cpu = vec![vec![Vec::new(); servers.len()]; Workload::ALL.len()];
    // Each pass starts at the next server, so no server always runs first or after another.
    for pass in 0..passes {
        for (w, &workload) in Workload::ALL.iter().enumerate() {
            for k in 0..servers.len() {
                let s = (pass + k) % servers.len();
                cpu[w][s].push(round_cpu(&servers[s].1, workload, &shas[s], rounds, pass));
            }
        }
    }
    let _ = writeln!(
        md,
        "## What EchoMQ costs commands on other keys\n\nMain-thread CPU (`INFO cpu`) per round of four workloads on keys outside the grammar: `ZADD`, `SET ... EX 3600` and `DEL`; `SET` then `GET` twice; `HSET`, `HGET` and `HINCRBY`; an `EVALSHA` of a script that runs `ZADD` and `GET` (loaded once per server). {rounds} rounds of each, pipelined 100 at a time on one connection, on four servers side by side: without the module, with EchoMQ at its default settings, and with `emq.learn-foreign-writes` set to `yes` and to `no`; interleaved over {passes} passes, each running every workload on every server in turn, from a different server each pass. Medians (min–max) over the passes; ratios are medians of the per-pass ratios to the server without the module, with their min–max. The last rows sum each pass's four workloads. `make profile` counts the first workload's round in instructions.\n\n| workload | server | µs/round (median, min–max) | × without the module |\n|---|---|---|---|"
    );
    let row = |md: &mut String, label: &str, name: &str, own: &[f64], bare: &[f64]| {
        let ratios = own.iter().zip(bare).map(|(a, b)| a / b).collect();
        let _ = writeln!(
            md,
            "| {label} | {name} | {} | {} |",
            spread(own.to_vec(), 2),
            ratio_spread(ratios, 3)
        );
    };
    for (w, workload) in Workload::ALL.iter().enumerate() {
        for (s, (name, _)) in servers.iter().enumerate() {
            row(md, workload.label(), name, &cpu[w][s], &cpu[w][0]);
        }
    }
    let summed: Vec<Vec<f64>> = (0..servers.len())
        .map(|s| {
            (0..passes)
                .map(|p| cpu.iter().map(|by_server| by_server[s][p]).sum())
                .collect()
        })
        .collect();
    for (s, (name, _)) in servers.iter().enumerate() {
        row(md, "all four, summed", name, &summed[s], &summed[0]);
    }
    let _ = writeln!(md);
}
