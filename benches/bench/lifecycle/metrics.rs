//! What the server's metrics (docs/observability.md) cost a job's whole life: the batched life,
//! settled by `EMQ.ACK` ×100 and by `EMQ.MACK` ×100, with `emq.metrics yes` and `no` in turn
//! on the same server (which goes first alternates by pair), by main-thread CPU per job, the
//! server on a CPU of its own where it can be; and a control row, on against on.

use std::fmt::Write as _;

use crate::measure::{ratio_interval, spread};
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

/// How many pairs of lives a round of the other tables makes here, each on a fifth of their
/// jobs: short pairs meet the same spell of the machine on both sides.
const PAIRS_A_ROUND: usize = 15;

/// Each pair's two lives: the settings, and the row's name.
struct Row {
    settle: Life,
    first: &'static str,
    second: &'static str,
    name: &'static str,
}

const ROWS: [Row; 3] = [
    Row {
        settle: Life::Acks,
        first: "yes",
        second: "no",
        name: "`EMQ.ACK` ×100, on against off",
    },
    Row {
        settle: Life::Mack,
        first: "yes",
        second: "no",
        name: "`EMQ.MACK` ×100, on against off",
    },
    Row {
        settle: Life::Mack,
        first: "yes",
        second: "yes",
        name: "`EMQ.MACK` ×100, on against on (the method's own spread)",
    },
];

/// The table: each settle's CPU per job in each pair's two lives, and the median of the
/// per-pair ratios with its 95% interval.
pub fn table(md: &mut String, server: &Server, rounds: usize, jobs: usize) {
    let (pairs, jobs) = (rounds * PAIRS_A_ROUND, (jobs / 5).max(1));
    let pinned = pinned::apart(server);
    let placed = pinned.as_ref().map_or_else(
        || "the server and the bench's client threads unpinned".to_string(),
        pinned::Pinned::describe,
    );
    let _ = write!(
        md,
        "\n## What the server's metrics cost\n\nThe batched whole life of {jobs} jobs (`EMQ.MENQUEUE` ×100, `EMQ.CLAIM COUNT 100`, then the settle named) with `emq.metrics yes` (the default: every event counted, each claim's wait, each attempt's run and each ack's end-to-end time in the histograms) and with `emq.metrics no`, in pairs on the same server (the first of the row's two settings first in even pairs, second in odd ones), each life on its own ids, {placed}. The last row runs both lives with the metrics on: how far apart two runs of the same thing land on this machine. Main-thread CPU (`INFO cpu`) per job; medians (min–max) over {pairs} pairs; the ratio is the median of the per-pair ratios, with the interval that holds the true median with 95% confidence.\n\n| settled by | first: CPU µs / job | second | ratio (95% interval) |\n|---|---|---|---|\n"
    );
    let mut admin = server.conn();
    for row in &ROWS {
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for pair in 0..pairs {
            let ids = minted(jobs, pair as u64);
            let mut life = |metrics: &str| {
                config_set(&mut admin, "emq.metrics", metrics);
                whole_life(server, &ids, Policy::Plain, row.settle)
            };
            // The order turns by pair: neither setting gains from going second.
            let (a, b) = if pair % 2 == 0 {
                let a = life(row.first);
                (a, life(row.second))
            } else {
                let b = life(row.second);
                (life(row.first), b)
            };
            config_set(&mut admin, "emq.metrics", "yes");
            eprintln!("metrics {} pair {pair}: {a} / {b}", row.name);
            first.push(a.cpu_us_per_job);
            second.push(b.cpu_us_per_job);
        }
        let ratios = first.iter().zip(&second).map(|(a, b)| a / b).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            row.name,
            spread(first, 3),
            spread(second, 3),
            ratio_interval(ratios, 3)
        );
    }
}
