//! What the server's metrics (docs/observability.md) cost a job's whole life: the batched life,
//! settled by `EMQ.ACK` ×100 and by `EMQ.MACK` ×100, with `emq.metrics yes` and `no` in turn
//! on the same server (which goes first alternates by round), by main-thread CPU per job, the
//! server on a CPU of its own where it can be.

use std::fmt::Write as _;

use crate::measure::{ratio_spread, spread};
use crate::pinned;
use crate::support::{config_set, job_id, now_ms, Server};

use super::batched::whole_life;
use super::{Life, Policy};

/// `jobs` ids minted now as EchoMQ mints them (41 bits of ms since 2024, 10 of node, 12 of
/// sequence), the round as the node: the wait and end-to-end times count from them.
fn minted(jobs: usize, round: u64) -> Vec<String> {
    let ms = (now_ms() as u64).saturating_sub(1_704_067_200_000);
    (0..jobs as u64)
        .map(|i| job_id(((ms + i / 4096) << 22) | ((round % 1024) << 12) | (i % 4096)))
        .collect()
}

/// The table: each settle's CPU per job with the metrics on and off, and the median of the
/// per-round ratios of on to off.
pub fn table(md: &mut String, server: &Server, rounds: usize, jobs: usize) {
    let pinned = pinned::apart(server);
    let placed = pinned.as_ref().map_or_else(
        || "the server and the bench's client threads unpinned".to_string(),
        pinned::Pinned::describe,
    );
    let _ = write!(
        md,
        "\n## What the server's metrics cost\n\nThe batched whole life of {jobs} jobs (`EMQ.MENQUEUE` ×100, `EMQ.CLAIM COUNT 100`, then the settle named) with `emq.metrics yes` (the default: every event counted, each claim's wait, each attempt's run and each ack's end-to-end time in the histograms) and with `emq.metrics no`, in turn on the same server (on first in even rounds, off first in odd ones), each round on its own ids, {placed}. Main-thread CPU (`INFO cpu`) per job; medians (min–max) over {rounds} rounds; the ratio is the median of the per-round ratios of on to off.\n\n| settled by | metrics on: CPU µs / job | metrics off | on against off |\n|---|---|---|---|\n"
    );
    let mut admin = server.conn();
    for how in [Life::Acks, Life::Mack] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let ids = minted(jobs, round as u64);
            let mut life = |metrics: &str| {
                config_set(&mut admin, "emq.metrics", metrics);
                whole_life(server, &ids, Policy::Plain, how)
            };
            // On first in even rounds, off first in odd ones: neither gains from going second.
            let (with, without) = if round % 2 == 0 {
                let with = life("yes");
                (with, life("no"))
            } else {
                let without = life("no");
                (life("yes"), without)
            };
            config_set(&mut admin, "emq.metrics", "yes");
            eprintln!("metrics {how:?} round {round}: on {with} off {without}");
            on.push(with.cpu_us_per_job);
            off.push(without.cpu_us_per_job);
        }
        let ratios = on.iter().zip(&off).map(|(a, b)| a / b).collect();
        let name = match how {
            Life::Mack => "`EMQ.MACK` ×100",
            _ => "`EMQ.ACK` ×100",
        };
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} |",
            spread(on, 3),
            spread(off, 3),
            ratio_spread(ratios, 3)
        );
    }
}
