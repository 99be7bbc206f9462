//! A job's whole life (enqueue, claim, ack): batched and one at a time, under each queue
//! policy, and the batched life by the way it settles, against Lua and the native floor.

mod batched;
pub mod metrics;
mod one_at_a_time;
pub mod tables;

use redis::cmd;

use crate::measure::{command_stat, Sample};
use crate::support::{self, set_key, Server};
use crate::workload::{fresh, ids_for, reset_stats, Ids};
use batched::whole_life;
use one_at_a_time::one_at_a_time;

/// Jobs per `EMQ.MENQUEUE` and per claim in the batched whole-life run.
const LIFE_BATCH: usize = 100;
/// The event stream's cap when it is on.
const EVENTS_MAXLEN: &str = "10000";

/// What a whole-life run turns on for its queue.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    /// Nothing: the queue as a Lua speaker's.
    Plain,
    /// The event stream (`EMQ.EVENTS ... ON`).
    Events,
    /// Claim limits that never bind (`EMQ.LIMIT ... CONCURRENCY 1000000 RATE 10000 PER 1`):
    /// every claim reads them, counts its room and writes the rate window.
    Limits,
    /// Every enqueue with a unique key of its own (`EMQ.ENQUEUE ... UNIQUE <id>`): a lookup and
    /// a table write per job. Batches take no unique keys.
    Unique,
}

/// The policies in the order of [`LifeSamples`]' columns.
const POLICIES: [Policy; 4] = [
    Policy::Plain,
    Policy::Events,
    Policy::Limits,
    Policy::Unique,
];

/// How a batched whole-life run claims and settles (the lifecycle table's variants).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Life {
    /// `EMQ.MENQUEUE` ×100 with `EMQ.CLAIM COUNT 100`, then one `EMQ.ACK` per job, pipelined.
    Acks,
    /// The same, settled by one `EMQ.MACK` of the 100.
    Mack,
    /// `EMQ.MENQUEUE` of the next 100 with `EMQ.MACK` of the last 100 `CLAIM 100`: one round
    /// trip a batch.
    ClaimNext,
    /// The reference `@enqueue` script per job, the bench's claim script (`COUNT 100`), then
    /// its ack script per job, all by `EVALSHA`.
    Lua,
    /// The floor, neither atomic nor fenced: `HSET`+`ZADD` per job with `ZPOPMIN pending 100`,
    /// then `ZADD active` of the 100 with `HSET`/`HINCRBY`/`HGET` per job, then
    /// `ZREM`/`HSET`/`PEXPIRE` per job.
    Native,
}

impl Life {
    const ALL: [Life; 5] = [
        Life::Acks,
        Life::Mack,
        Life::ClaimNext,
        Life::Lua,
        Life::Native,
    ];

    fn name(self) -> &'static str {
        match self {
            Life::Acks => "EchoMQ: `EMQ.MENQUEUE` ×100, `EMQ.CLAIM COUNT 100`, `EMQ.ACK` ×100",
            Life::Mack => "EchoMQ: `EMQ.MENQUEUE` ×100, `EMQ.CLAIM COUNT 100`, `EMQ.MACK` ×100",
            Life::ClaimNext => "EchoMQ: `EMQ.MENQUEUE` ×100, `EMQ.MACK` ×100 `CLAIM 100`",
            Life::Lua => "Lua: `@enqueue` ×100, claim script `COUNT 100`, ack script ×100",
            Life::Native => "native floor (not atomic, no token check)",
        }
    }

    /// The commandstats entries whose time is this variant's server time.
    fn stats(self) -> &'static [&'static str] {
        match self {
            Life::Acks => &["emq.menqueue", "emq.claim", "emq.ack"],
            Life::Mack | Life::ClaimNext => &["emq.menqueue", "emq.claim", "emq.mack"],
            Life::Lua => &["evalsha"],
            Life::Native => &[
                "hset", "zadd", "zpopmin", "hincrby", "hget", "zrem", "pexpire",
            ],
        }
    }

    /// Round trips a batch of 100 takes, once under way.
    fn round_trips(self) -> usize {
        match self {
            Life::ClaimNext => 1,
            Life::Native => 3,
            _ => 2,
        }
    }
}

/// An empty server, the queue's `policy` set, and the statistics reset.
fn fresh_queue(con: &mut support::Connection, queue: &str, policy: Policy) {
    fresh(con);
    let setup = match policy {
        Policy::Plain | Policy::Unique => return,
        Policy::Events => cmd("EMQ.EVENTS")
            .arg(queue)
            .arg("ON")
            .arg("MAXLEN")
            .arg(EVENTS_MAXLEN)
            .clone(),
        Policy::Limits => cmd("EMQ.LIMIT")
            .arg(queue)
            .arg("CONCURRENCY")
            .arg(1_000_000)
            .arg("RATE")
            .arg(10_000)
            .arg("PER")
            .arg(1)
            .clone(),
    };
    let _: redis::Value = setup.query(con).expect("the queue's policy");
    reset_stats(con);
}

/// Every job acknowledged: nothing left pending or active, one acknowledgement per job in the
/// commands `how` settles with, and with the stream on one `XADD` (run inside the module's
/// call) per transition.
fn check_done(con: &mut support::Connection, queue: &str, jobs: usize, policy: Policy, how: Life) {
    for set in ["pending", "active"] {
        let card: usize = cmd("ZCARD")
            .arg(set_key(queue, set))
            .query(con)
            .expect("zcard");
        assert_eq!(card, 0, "no job left {set}");
    }
    let (settles, per_job) = match how {
        Life::Acks => ("emq.ack", 1),
        Life::Mack | Life::ClaimNext => ("emq.mack", LIFE_BATCH),
        Life::Lua => ("evalsha", 0),
        Life::Native => ("pexpire", 1),
    };
    if per_job > 0 {
        let calls = command_stat(con, &[settles], "calls") as usize;
        assert_eq!(
            calls * per_job,
            jobs,
            "{how:?}: one acknowledgement per job"
        );
    }
    let appended = command_stat(con, &["xadd"], "calls") as usize;
    let expected = if policy == Policy::Events {
        3 * jobs
    } else {
        0
    };
    assert_eq!(appended, expected, "enqueued, claimed and acked appended");
}

/// The rows of the whole-life table, each measured with the event stream off and on.
const LIFE_ROWS: [&str; 5] = [
    "whole life, batched: `EMQ.MENQUEUE` ×100, `EMQ.CLAIM` `COUNT 100`, `EMQ.ACK` ×100",
    "one at a time: `EMQ.ENQUEUE`",
    "one at a time: `EMQ.CLAIM` `COUNT 1`",
    "one at a time: `EMQ.ACK`",
    "one at a time: the three together",
];

/// Each row's samples by policy, `[plain, events, limits, unique]`, one per round (none for a
/// batch with unique keys, which batches do not take).
type LifeSamples = [[Vec<Sample>; 4]; 5];

/// The lifecycle table's samples, one list per [`Life`] variant.
type LifecycleSamples = [Vec<Sample>; 5];

/// The whole-life samples of the rounds so far: the rows of the whole-life and policy tables,
/// and of the lifecycle table.
#[derive(Default)]
pub struct Rounds {
    life: LifeSamples,
    lifecycle: LifecycleSamples,
}

impl Rounds {
    /// One round of the whole-life workloads on `ids`: batched, then one at a time, under each
    /// policy in turn.
    pub fn round(&mut self, server: &Server, ids: &[String], depth: usize) {
        for (v, how) in Life::ALL.into_iter().enumerate() {
            let s = whole_life(server, ids, Policy::Plain, how);
            eprintln!(
                "         lifecycle, {:<10}           {s}",
                format!("{how:?}")
            );
            self.lifecycle[v].push(s);
        }
        for (p, policy) in POLICIES.into_iter().enumerate() {
            if policy == Policy::Unique {
                continue;
            }
            let s = whole_life(server, ids, policy, Life::Acks);
            eprintln!(
                "         whole life, {:<8}             {s}",
                format!("{policy:?}")
            );
            self.life[0][p].push(s);
        }
        const ONE_BY_ONE: [&str; 4] = [
            "one by one: enqueue",
            "one by one: claim",
            "one by one: ack",
            "one by one: all",
        ];
        for (p, policy) in POLICIES.into_iter().enumerate() {
            for (row, s) in one_at_a_time(server, ids, policy, depth)
                .into_iter()
                .enumerate()
            {
                eprintln!(
                    "         {:<22} {:<8} {s}",
                    ONE_BY_ONE[row],
                    format!("{policy:?}")
                );
                self.life[row + 1][p].push(s);
            }
        }
    }
}

/// The lifecycle table alone (`BENCH_ONLY=lifecycle`): its rounds on `server`, each on its own
/// ids, then the table, without its heading.
pub fn by_settle_alone(md: &mut String, server: &Server, rounds: usize, jobs: usize) {
    let mut lifecycle: LifecycleSamples = Default::default();
    for round in 0..rounds {
        let ids = ids_for(Ids::Monotonic, jobs, round as u64 + 1);
        for (v, how) in Life::ALL.into_iter().enumerate() {
            lifecycle[v].push(whole_life(server, &ids, Policy::Plain, how));
        }
        eprintln!("done: lifecycle round {}", round + 1);
    }
    tables::lifecycle_table(md, &lifecycle);
}
