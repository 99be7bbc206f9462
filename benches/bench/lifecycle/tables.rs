//! The lifecycle's Markdown: the whole life with the event stream off and on, the whole life
//! by settle, and what the scheduling policies cost a job.

use std::fmt::Write as _;

use super::{Life, LifeSamples, LifecycleSamples, Rounds, EVENTS_MAXLEN, LIFE_ROWS};
use crate::measure::{median, ratio_spread, spread, Sample};
use crate::workload::CONNECTIONS;

/// The three lifecycle sections of `rounds`, each its heading, what it measures and its table.
pub fn write(md: &mut String, rounds: &Rounds, jobs: usize) {
    let _ = writeln!(
        md,
        "## A job's whole life, the event stream off and on\n\nIn each of the first table's rounds, after its five variants, the round's {jobs} monotonic ids, with the same payload, go from enqueue to acknowledgement on one queue, by the same {CONNECTIONS} clients, on an empty server each run. Batched: each client sends `EMQ.MENQUEUE` ×100 with `EMQ.CLAIM <q> COUNT 100 LEASE 60000`, then one `EMQ.ACK` per claimed job with the token the claim replied, pipelined, until its share is done (jobs/s, not the server figures, includes the clients' reading of the claims and encoding of the acks). One at a time: every job enqueued with `EMQ.ENQUEUE`, then claimed with `COUNT 1`, then acknowledged, at pipeline depth 16, each phase timed apart (its acks encoded from the claims' replies before it starts). Events on is the queue after `EMQ.EVENTS <q> ON MAXLEN {EVENTS_MAXLEN}`: each transition also appends a stream entry, an `XADD` run inside the module's call, so the `commandstats` figure sums the `EMQ.*` commands and nothing else. Figures are per job (for a phase, per transition); on / off is the median of the per-round ratios. Each run checks that no job is left pending or active and, with the stream on, that one `XADD` ran per transition.\n"
    );
    life_table(md, &rounds.life);
    let _ = writeln!(
        md,
        "## The whole life by settle: batched settle, claim-next, Lua and the native floor\n\nIn the same rounds, right after the round's enqueue variants, the round's {jobs} monotonic ids go from enqueue to acknowledgement on one plain queue (events off), by the same {CONNECTIONS} clients, 100 jobs a batch, on an empty server each run, five ways back to back. EchoMQ with one `EMQ.ACK` per job (pipelined), with one `EMQ.MACK` of the batch, and with claim-next (each batch's `EMQ.MENQUEUE` sent with `EMQ.MACK` of the last batch `CLAIM 100`, one round trip a batch); a Lua implementation of the same transitions (benches/lua: the reference `@enqueue` per job, a claim script of `COUNT 100` and an ack script per job that checks the token, all `EVALSHA`, every key declared but the claim's rows, which no claim knows before it reads the ids); and the floor, a hand-written pipeline of native commands, neither atomic nor fenced (`HSET`+`ZADD` per job with `ZPOPMIN pending 100`, then `ZADD active` of the 100 with `HSET`/`HINCRBY`/`HGET` per job, then `ZREM`/`HSET`/`PEXPIRE` per job). Figures per job, medians (min–max) over the rounds; a ratio is the median of the per-round ratios. Round trips are a batch's once under way. Each run checks that nothing is left pending or active and that every job was acknowledged once.\n"
    );
    lifecycle_table(md, &rounds.lifecycle);
    let _ = writeln!(
        md,
        "## What the scheduling policies cost a job\n\nThe same rounds, the same workloads, on a queue with claim limits that never bind (`EMQ.LIMIT <q> CONCURRENCY 1000000 RATE 10000 PER 1`: every claim reads the limits, counts its room and adds each job it takes to the rate window, which claims and the timer trim) and on one whose every `EMQ.ENQUEUE` carries a unique key of its own (`UNIQUE <id>`: a lookup, then the table's entry and the row's `unique` field; batches take no unique keys, hence no batched figure). None is the plain queue of the table above (events off). What a queue that uses none of them pays is the plain figure itself; `make profile` counts it by instructions against an earlier build (docs/bench.md).\n"
    );
    policy_table(md, &rounds.life);
}

/// The whole-life table: each figure's median (min–max) over the rounds with the stream off
/// and on, and the median of the per-round ratios on / off.
fn life_table(md: &mut String, life: &LifeSamples) {
    type Figure = fn(&Sample) -> f64;
    let figures: [Figure; 3] = [
        |x| x.cpu_us_per_job,
        |x| x.server_us_per_job,
        |x| x.jobs_per_sec,
    ];
    let _ = writeln!(md, "| workload | main-thread CPU µs/job, events off | events on | on / off | commandstats µs/job, events off | events on | on / off | jobs/s, events off | events on | on / off |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (name, by_policy) in LIFE_ROWS.iter().zip(life) {
        let (off, on) = (&by_policy[0], &by_policy[1]);
        let mut row = format!("| {name} |");
        for (i, f) in figures.into_iter().enumerate() {
            for samples in [off, on] {
                let cell = spread(samples.iter().map(f).collect(), if i == 2 { 0 } else { 2 });
                let _ = write!(row, " {cell} |");
            }
            let ratio = median(on.iter().zip(off).map(|(x, b)| f(x) / f(b)).collect()).0;
            let _ = write!(row, " {ratio:.2}× |");
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}

/// The lifecycle table: each variant's main-thread CPU per job with its ratios to the native
/// floor and to Lua, its commandstats time per job, jobs/s and round trips a batch.
pub(super) fn lifecycle_table(md: &mut String, lifecycle: &LifecycleSamples) {
    let [.., lua, native] = lifecycle;
    let cpu = |x: &Sample| x.cpu_us_per_job;
    // The median of the rounds' ratios, with their least and greatest.
    let ratio = |of: &[Sample], to: &[Sample]| {
        ratio_spread(of.iter().zip(to).map(|(a, b)| cpu(a) / cpu(b)).collect(), 2)
    };
    let _ = writeln!(md, "| variant | main-thread CPU µs/job | vs native floor | vs Lua | commandstats µs/job | jobs/s | round trips a batch |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (how, samples) in Life::ALL.iter().zip(lifecycle) {
        let figure =
            |f: fn(&Sample) -> f64, decimals| spread(samples.iter().map(f).collect(), decimals);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            how.name(),
            figure(cpu, 2),
            ratio(samples, native),
            ratio(samples, lua),
            figure(|x| x.server_us_per_job, 2),
            figure(|x| x.jobs_per_sec, 0),
            how.round_trips()
        );
    }
    let _ = writeln!(md);
}

/// The scheduling-policy table: each workload's main-thread CPU per job with no policy, with
/// claim limits and with unique keys, and the median of the per-round ratios to no policy.
fn policy_table(md: &mut String, life: &LifeSamples) {
    let cpu = |x: &Sample| x.cpu_us_per_job;
    let _ = writeln!(md, "| workload | main-thread CPU µs/job, none | with limits | limits / none | with unique keys | unique / none |");
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for (name, by_policy) in LIFE_ROWS.iter().zip(life) {
        let plain = &by_policy[0];
        let mut row = format!(
            "| {name} | {} |",
            spread(plain.iter().map(cpu).collect(), 2)
        );
        for samples in [&by_policy[2], &by_policy[3]] {
            if samples.is_empty() {
                row.push_str(" — | — |");
                continue;
            }
            let cell = spread(samples.iter().map(cpu).collect(), 2);
            let ratio = median(
                samples
                    .iter()
                    .zip(plain)
                    .map(|(x, b)| cpu(x) / cpu(b))
                    .collect(),
            )
            .0;
            let _ = write!(row, " {cell} | {ratio:.2}× |");
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}
