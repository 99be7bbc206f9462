//! What loading EchoMQ costs commands on other keys, by the server's main-thread CPU.

use std::fmt::Write as _;
use std::net::TcpStream;

use crate::measure::{ratio_spread, spread, timed};
use crate::resp::{encode, exchange, Window};
use crate::support::{Options, Server};
use crate::workload::{fresh, PAYLOAD};

/// Main-thread CPU per round of `ZADD`, `SET ... EX` and `DEL` on keys outside EchoMQ's
/// grammar, `rounds` of them pipelined in windows of 100 rounds on one connection (µs a round).
fn unrelated_round_cpu(server: &Server, rounds: usize, pass: usize) -> f64 {
    let mut admin = server.conn();
    fresh(&mut admin);
    let windows: Vec<Window> = (0..rounds)
        .collect::<Vec<_>>()
        .chunks(100)
        .map(|chunk| {
            let mut out = Vec::new();
            for &i in chunk {
                let (z, k) = (format!("cache:{pass}:z{i}"), format!("cache:{pass}:k{i}"));
                encode(&mut out, &[b"ZADD", z.as_bytes(), b"1", b"member"]);
                encode(&mut out, &[b"SET", k.as_bytes(), PAYLOAD, b"EX", b"3600"]);
                encode(&mut out, &[b"DEL", k.as_bytes()]);
            }
            (out, chunk.len() * 3)
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

/// What loading EchoMQ costs commands on other keys, by main-thread CPU: the same rounds on a
/// server without the module, with it, and with it set not to learn foreign writes,
/// interleaved over `passes`. The medians (µs a round) and the ratios to the bare server.
pub fn unrelated_key_tax(md: &mut String, rounds: usize, passes: usize) {
    let servers = [
        (
            "without the module",
            Server::start(Options::without_module()),
        ),
        ("with EchoMQ", Server::start(Options::default())),
        (
            "with EchoMQ, `emq.learn-foreign-writes no`",
            Server::start(Options::default().arg("emq.learn-foreign-writes", "no")),
        ),
    ];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
    for pass in 0..passes {
        for (i, (_, server)) in servers.iter().enumerate() {
            cpu[i].push(unrelated_round_cpu(server, rounds, pass));
        }
    }
    let _ = writeln!(
        md,
        "## What EchoMQ costs commands on other keys\n\nMain-thread CPU (`INFO cpu`) per round of `ZADD`, `SET ... EX 3600` and `DEL` on keys outside the grammar, {rounds} rounds pipelined 100 at a time on one connection, on three servers side by side, interleaved over {passes} passes; ratios are medians of the per-pass ratios to the server without the module. `make profile` counts the same round in instructions.\n\n| server | µs/round (median, min–max) | × without the module |\n|---|---|---|"
    );
    for (i, (name, _)) in servers.iter().enumerate() {
        let ratios = cpu[i].iter().zip(&cpu[0]).map(|(a, b)| a / b).collect();
        let _ = writeln!(
            md,
            "| {name} | {} | {} |",
            spread(cpu[i].clone(), 2),
            ratio_spread(ratios, 3)
        );
    }
    let _ = writeln!(md);
}
