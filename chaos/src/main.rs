//! `make chaos`: EchoMQ under the faults a deployment meets. A 3-primary, 3-replica cluster runs
//! in containers on a docker network of the harness's own; each fault is done under load
//! (producers with `WAIT 1`; flows of a parent and 1–10 children on other primaries, each write
//! confirmed with `WAIT 1`; the shipped Python, Rust and Node workers, settling and handing over with
//! `WAIT 1`, now and then frozen past their lease), then healed; once every node is back and
//! the cluster stable, the checker reads the history and the final state.
//!
//! `emq-chaos [--seed N | --seeds N,M,...] [--jobs N] [--faults a,b,...] [--report docs/reliability.md]`
//! (`--jobs`: enqueues tried per fault; each seed runs on a cluster of its own). A violation
//! fails the run and prints what was involved.

mod check;
mod cluster;
mod delay;
mod docker;
mod fleet;
mod flows;
mod history;
mod queues;
mod report;
mod spanned;
mod state;
mod watch;
mod worker;
mod workload;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use check::Report;
use cluster::{connect, field, pairs, stable, wait_for};
use docker::{Net, Node};
use fleet::{Fleet, LEASE_MS};
use history::{History, Log, Outcome};
use watch::{Limit, Watch};
use workload::{Load, Queues};

/// The concurrency limit set on one queue of each phase (its second).
const CONCURRENCY: i64 = 3;
/// The nodes' `emq.max-attempts` (the default).
const MAX_ATTEMPTS: i64 = 25;

const NODE_TIMEOUT_MS: u64 = 2_000;
const FAULTS: [&str; 10] = [
    "partition-primary",
    "pause-primary",
    "kill-primary",
    "partition-replica",
    "rolling-restart",
    "reshard-under-partition",
    "slow-primary",
    "memory-pressure",
    "disk-full",
    "clock-jump",
];

#[derive(Clone)]
struct Args {
    /// The seed of the run going on; `seeds` are all the runs'.
    seed: u64,
    seeds: Vec<u64>,
    jobs: usize,
    faults: Vec<String>,
    report: Option<String>,
    image: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        seed: 1,
        seeds: vec![1],
        jobs: 2_000,
        faults: FAULTS.iter().map(|f| f.to_string()).collect(),
        report: None,
        image: "echomq:dev".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => a.seeds = vec![value()?.parse().map_err(|e| format!("--seed: {e}"))?],
            "--seeds" => {
                a.seeds = value()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--seeds: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--jobs" => a.jobs = value()?.parse().map_err(|e| format!("--jobs: {e}"))?,
            "--faults" => a.faults = value()?.split(',').map(str::to_string).collect(),
            "--report" => a.report = Some(value()?),
            "--image" => a.image = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    for f in &a.faults {
        if !FAULTS.contains(&f.as_str()) {
            return Err(format!("unknown fault {f} (one of {})", FAULTS.join(", ")));
        }
    }
    Ok(a)
}

fn role(node: &Node) -> Option<String> {
    let mut con = connect(&node.ip, Duration::from_millis(500)).ok()?;
    let info: String = redis::cmd("INFO").arg("replication").query(&mut con).ok()?;
    field(&info, "role")
}

/// The node that owns `slot` as a primary now.
fn owner_of(nodes: &[Node], slot: u16) -> Option<Node> {
    let map = cluster::slot_map(nodes)?;
    let ip = cluster::owner(&map, slot)?.to_string();
    nodes.iter().find(|n| n.ip == ip).cloned()
}

fn others(nodes: &[Node], node: &Node) -> Vec<Node> {
    nodes.iter().filter(|n| n.ip != node.ip).cloned().collect()
}

/// The slowed links of `slow-primary`: a delay each way, its jitter, and the share lost. A
/// round trip then takes 0.2–1 s before any retransmission: `WAIT 1 300` and the clients'
/// 800 ms timeouts run out, and a lost packet's retransmission can outlast a 2 s lease.
const SLOW_MS: u64 = 300;
const SLOW_JITTER_MS: u64 = 200;
const SLOW_LOSS: f64 = 0.1;
/// The least median `PING` that shows the delay held.
const SLOW_MIN_PING_MS: f64 = 200.0;

/// `PING` round trips to `node`, in ms, sorted: one after another until `window` has passed
/// (and past it, up to `PING_GRACE` more, until one came back). Each waits up to 5 s; a
/// connection whose `PING` (or handshake) failed is dropped and a new one made, since under
/// 10% loss each way one lost packet's retransmissions can outlast any single try.
fn ping_times(node: &Node, window: Duration) -> Vec<f64> {
    let started = Instant::now();
    let mut times: Vec<f64> = Vec::new();
    let mut con = None;
    while started.elapsed() < window
        || (times.is_empty() && started.elapsed() < window + PING_GRACE)
    {
        if con.is_none() {
            con = connect(&node.ip, Duration::from_secs(5)).ok();
            if con.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        let Some(c) = con.as_mut() else { continue };
        let sent = Instant::now();
        match redis::cmd("PING").query::<String>(c) {
            Ok(_) => times.push(sent.elapsed().as_secs_f64() * 1000.0),
            Err(_) => con = None,
        }
    }
    times.sort_by(f64::total_cmp);
    times
}

/// How long past the fault's window the harness goes on trying for a first `PING`.
const PING_GRACE: Duration = Duration::from_secs(10);

fn hold() {
    std::thread::sleep(Duration::from_millis(NODE_TIMEOUT_MS * 3));
}

/// Does `fault` to the cluster (under the load already running) and heals it; `seed` draws
/// what the fault itself draws (a slowed link's delays). Says what was done, and the error
/// code the fault must be seen refusing enqueues with, if any.
fn inject(
    net: &Net,
    fault: &str,
    slot: u16,
    seed: u64,
    clock_steps: &mut Vec<(u64, i64)>,
) -> Result<(String, Option<&'static str>), String> {
    let primary = || owner_of(&net.nodes, slot).ok_or("no owner of the busy slot");
    match fault {
        "clock-jump" => clock_jump(net, &primary()?, clock_steps).map(|what| (what, None)),
        "memory-pressure" => memory_pressure(&primary()?).map(|what| (what, Some("OOM"))),
        "disk-full" => disk_full(net, &primary()?).map(|what| (what, Some("MISCONF"))),
        _ => inject_net(net, fault, slot, seed).map(|what| (what, None)),
    }
}

/// How far the clock fault steps a primary's wall clock, forward and then back.
const CLOCK_STEP_MS: i64 = 30_000;

/// `node`'s wall clock as its `TIME` says, off the harness's, in ms.
fn clock_offset_ms(node: &Node) -> Option<i64> {
    let mut con = connect(&node.ip, Duration::from_secs(1)).ok()?;
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis() as i64;
    Some(secs * 1000 + micros / 1000 - now)
}

/// Steps `node`'s clock to `offset_ms` and waits until its `TIME` shows it (within 5 s).
fn step_clock(net: &Net, node: &Node, offset_ms: i64) -> Result<i64, String> {
    net.set_clock(node, offset_ms)?;
    let mut seen = None;
    let stepped = wait_for(Duration::from_secs(10), || {
        seen = clock_offset_ms(node);
        seen.is_some_and(|off| (off - offset_ms).abs() < 5_000)
    });
    match seen {
        Some(off) if stepped => Ok(off),
        _ => Err(format!(
            "{}'s clock did not step to {offset_ms} ms (its TIME was {seen:?} ms off)",
            node.ip
        )),
    }
}

/// The primary's wall clock moves 30 s ahead, holds, then steps back 30 s; both steps are
/// recorded, as the step back lengthens every lease the primary held then (see
/// `check::Input`).
fn clock_jump(
    net: &Net,
    primary: &Node,
    clock_steps: &mut Vec<(u64, i64)>,
) -> Result<String, String> {
    clock_steps.push((history::now_ns(), CLOCK_STEP_MS));
    let ahead = step_clock(net, primary, CLOCK_STEP_MS)?;
    hold();
    clock_steps.push((history::now_ns(), -CLOCK_STEP_MS));
    let back = step_clock(net, primary, 0);
    let back = back?;
    hold();
    Ok(format!(
        "{}'s wall clock stepped {} s ahead (its `TIME` {:+.1} s off), then back ({:+.1} s)",
        primary.ip,
        CLOCK_STEP_MS / 1000,
        ahead as f64 / 1000.0,
        back as f64 / 1000.0
    ))
}

fn memory_pressure(primary: &Node) -> Result<String, String> {
    let config = |value: u64| -> Result<(), String> {
        let mut con = connect(&primary.ip, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(value)
            .query::<()>(&mut con)
            .map_err(|e| format!("CONFIG SET maxmemory {value}: {e}"))
    };
    let mut con = connect(&primary.ip, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    let used: u64 = field(&info, "used_memory")
        .and_then(|v| v.parse().ok())
        .ok_or("no used_memory")?;
    // Just under what it holds: the next write that needs memory is refused.
    let limit = used.saturating_sub(64 * 1024).max(1 << 20);
    config(limit)?;
    hold();
    config(0)?;
    Ok(format!(
        "{}'s `maxmemory` set to {} KB (it held {} KB), then lifted",
        primary.ip,
        limit >> 10,
        used >> 10
    ))
}

fn disk_full(net: &Net, primary: &Node) -> Result<String, String> {
    let filled = net.fill_disk(primary)?;
    hold();
    net.free_disk(primary)?;
    // The server retries the AOF write once there is room, and takes writes again.
    let writes = || {
        connect(&primary.ip, Duration::from_secs(1))
            .ok()
            .and_then(|mut con| {
                redis::cmd("INFO")
                    .arg("persistence")
                    .query::<String>(&mut con)
                    .ok()
            })
            .and_then(|info| field(&info, "aof_last_write_status"))
            .is_some_and(|s| s == "ok")
    };
    if !wait_for(Duration::from_secs(30), writes) {
        return Err(format!(
            "{}'s AOF writes did not resume once the disk had room",
            primary.ip
        ));
    }
    // Then its AOF is all it has: a restart replays it.
    net.restart(primary)?;
    Ok(format!(
        "{}'s data filesystem filled ({filled} MB of filler) under its AOF, then emptied, then the node restarted from its AOF",
        primary.ip
    ))
}

/// The faults of links and processes.
fn inject_net(net: &Net, fault: &str, slot: u16, seed: u64) -> Result<String, String> {
    let nodes = &net.nodes;
    let primary = owner_of(nodes, slot).ok_or("no owner of the busy slot")?;
    match fault {
        "partition-primary" => {
            net.cut(&primary, &others(nodes, &primary))?;
            hold();
            net.heal(&primary)?;
            Ok(format!("{} cut off from the other five", primary.ip))
        }
        "pause-primary" => {
            net.signal(&primary, "STOP")?;
            hold();
            net.signal(&primary, "CONT")?;
            Ok(format!("{} stopped (SIGSTOP), then resumed", primary.ip))
        }
        "kill-primary" => {
            net.signal(&primary, "KILL")?;
            hold();
            net.start_again(&primary)?;
            Ok(format!(
                "{} killed (SIGKILL), then started again",
                primary.ip
            ))
        }
        "partition-replica" => {
            let (_, replica) = pairs(nodes)
                .into_iter()
                .find(|(p, _)| p.ip == primary.ip)
                .ok_or("the busy primary has no replica")?;
            net.cut(&replica, &others(nodes, &replica))?;
            hold();
            net.heal(&replica)?;
            Ok(format!("replica {} cut off, then back", replica.ip))
        }
        "rolling-restart" => {
            for node in nodes {
                net.restart(node)?;
                if !wait_for(Duration::from_secs(90), || stable(nodes)) {
                    return Err(format!("not stable after restarting {}", node.ip));
                }
            }
            Ok("all six nodes restarted, one at a time".into())
        }
        "reshard-under-partition" => {
            // A third primary cut off (its replica takes over on the majority side) while the
            // busy slot moves between the other two.
            let primaries = cluster::primaries(nodes).ok_or("no slot map")?;
            let target = primaries
                .iter()
                .find(|n| n.ip != primary.ip)
                .cloned()
                .ok_or("no second primary")?;
            let third = primaries
                .iter()
                .find(|n| n.ip != primary.ip && n.ip != target.ip)
                .cloned()
                .ok_or("no third primary")?;
            net.cut(&third, &others(nodes, &third))?;
            std::thread::sleep(Duration::from_millis(NODE_TIMEOUT_MS));
            let moved = cluster::move_slot(nodes, slot, &primary, &target, &third);
            hold();
            net.heal(&third)?;
            let moved = moved?;
            Ok(format!(
                "slot {slot} ({moved} keys) moved from {} to {} while {} was cut off",
                primary.ip, target.ip, third.ip
            ))
        }
        "slow-primary" => {
            // Every link of the busy primary: its replica's, the bus's and the clients'.
            let mut slow = net.slow(&primary, SLOW_MS, SLOW_JITTER_MS, SLOW_LOSS, seed)?;
            // What the harness's own round trips took meanwhile, on one connection.
            let pings = ping_times(&primary, Duration::from_millis(NODE_TIMEOUT_MS * 3));
            // The loop is checked last thing before the heal: a loop gone at any moment is
            // gone then too (and the fault would have been loss alone).
            let alive = slow.alive();
            slow.heal(net)?;
            if !alive {
                return Err("the delay loop died during the fault".into());
            }
            let Some(median) = pings.get(pings.len() / 2).copied() else {
                return Err("no `PING` came back during the fault".into());
            };
            if median < SLOW_MIN_PING_MS {
                return Err(format!(
                    "a `PING` took {median:.0} ms (median of {}), under {SLOW_MIN_PING_MS} ms: the delay did not hold",
                    pings.len()
                ));
            }
            Ok(format!(
                "{} delayed {}–{} ms each way and {:.0}% of its packets dropped, on all its links: a `PING` took {median:.0} ms (median of {}), the delay loop alive throughout",
                primary.ip,
                SLOW_MS - SLOW_JITTER_MS,
                SLOW_MS + SLOW_JITTER_MS,
                SLOW_LOSS * 100.0,
                pings.len()
            ))
        }
        other => Err(format!("unknown fault {other}")),
    }
}

fn phase(net: &Net, fault: &str, index: usize, a: &Args) -> Result<(Report, String), String> {
    let nodes = &net.nodes;
    let seed = queues::phase_seed(a.seed, index);
    let mut queues = Vec::new();
    for name in queues::names(a.seed, index) {
        let slot = cluster::slot_of(&nodes[0].ip, &name)?;
        queues.push((name, slot));
    }
    let queues = Queues(queues);
    let spanned = spanned::Spanned::new(&queues::spanned(a.seed, index))?;
    spanned.span(nodes)?;
    let history: History = Arc::new(Mutex::new(Log::default()));
    let limit = Limit {
        queue: queues.0[queues::LIMITED].0.clone(),
        slot: queues.0[queues::LIMITED].1,
        concurrency: CONCURRENCY,
        group_concurrency: queues::GROUP_CONCURRENCY,
        own: ("g0".into(), queues::G0_CONCURRENCY),
    };
    limit.set(nodes)?;
    let flow_queues = Queues(
        queues::FLOW_QUEUES
            .iter()
            .map(|q| queues.0[*q].clone())
            .collect(),
    );
    let owners: Vec<String> = flow_queues
        .0
        .iter()
        .filter_map(|(_, slot)| owner_of(nodes, *slot).map(|n| n.ip))
        .collect();
    if owners.len() != 3
        || owners[0] == owners[1]
        || owners[0] == owners[2]
        || owners[1] == owners[2]
    {
        return Err(format!(
            "the flow queues {:?} are not on three primaries ({owners:?})",
            flow_queues.0
        ));
    }
    let watch = Watch::start(nodes, limit, &history);
    let mut load = Load::start(nodes, &queues, &spanned, &history, seed, 2, a.jobs);
    let flows_wanted = queues::flows_of(a.jobs);
    load.flows(
        nodes,
        flows::Plan {
            scope: flow_queues.0[0].0.clone(),
            queues: flow_queues,
            seed: seed ^ 0xf10,
            max: flows_wanted,
            pause_ms: (workload::SPREAD.as_millis() as u64 / flows_wanted as u64).max(1),
        },
        &history,
    );
    // The workers of the partitioned queue are given its name, as a user's would be.
    let worked = Queues(
        queues
            .0
            .iter()
            .cloned()
            .chain([(spanned.queue.clone(), spanned.slot)])
            .collect(),
    );
    let fleet = match Fleet::start(nodes, &worked, &history, seed) {
        Ok(fleet) => fleet,
        Err(e) => {
            load.stop();
            watch.stop();
            return Err(e);
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut clock_steps = Vec::new();
    let injected = inject(net, fault, queues.0[0].1, seed, &mut clock_steps);
    let healed = wait_for(Duration::from_secs(120), || stable(nodes));
    let (what, refusal) = match injected {
        Ok(done) => done,
        Err(e) => {
            load.stop();
            fleet.stop();
            watch.stop();
            return Err(e);
        }
    };
    if !healed {
        load.stop();
        fleet.stop();
        watch.stop();
        return Err(format!("{fault}: the cluster is not stable after healing"));
    }
    // The rest of the jobs go in, then the workers drain the queues.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120)
        && (enqueues(&history) < a.jobs || built(&history) < flows_wanted)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    load.stop_producing();
    // Drained: nothing pending, active or scheduled and no hand-over in an outbox, read three
    // times in a row (a hand-over delivered between the reads of two queues may release a
    // parent a read before missed).
    let mut quiet = 0;
    let drained = wait_for(Duration::from_secs(120), || {
        let idle = queues
            .0
            .iter()
            .chain(&spanned.partitions)
            .all(|(q, slot)| left(nodes, q, *slot) == Some(0));
        quiet = if idle { quiet + 1 } else { 0 };
        quiet >= 3
    });
    load.stop();
    let workers = fleet.stop();
    wait_for(Duration::from_secs(60), || stable(nodes));
    let failover = watch.stop();
    let log = std::mem::take(&mut *history.lock().map_err(|_| "the history's lock")?);
    let (finals, misplaced) = state::read(nodes, &queues, &spanned)?;
    let mut report = check::check(&check::Input {
        enqueues: &log.enqueues,
        flows: &log.flows,
        events: &log.events,
        limits: &log.limits,
        finals: &finals,
        lease_ms: LEASE_MS,
        max_attempts: MAX_ATTEMPTS,
        failover,
        clock_steps: &clock_steps,
    });
    if !drained {
        report
            .violations
            .push("the queues had not drained 120 s after the last enqueue".into());
    }
    // A phase that met no load proves nothing: each must have acknowledged enqueues and
    // readings of the limit (and frozen workers: the fleet's own check).
    for (seen, what) in [
        (report.acknowledged, "acknowledged enqueue"),
        (report.flows.acknowledged, "acknowledged flow"),
        (report.limit_samples, "reading of the limited queue"),
    ] {
        if seen == 0 {
            report
                .violations
                .push(format!("no {what} in the phase: it proved nothing"));
        }
    }
    // A fault that must be seen refusing writes: the code in some enqueue's refusal.
    if let Some(code) = refusal {
        let seen = log
            .enqueues
            .iter()
            .filter(|e| matches!(&e.outcome, Outcome::Refused(why) if why.contains(code)))
            .count();
        report.refusals = Some((code, seen));
        if seen == 0 {
            let mut others: Vec<&str> = log
                .enqueues
                .iter()
                .filter_map(|e| match &e.outcome {
                    Outcome::Refused(why) | Outcome::Unknown(why) => Some(why.as_str()),
                    Outcome::Ok => None,
                })
                .collect();
            others.sort_unstable();
            others.dedup();
            others.truncate(5);
            report.violations.push(format!(
                "{fault}: no enqueue was refused with {code} (other errors: {others:?})"
            ));
        }
    }
    report.violations.extend(misplaced);
    report.violations.extend(state::digests(&pairs(nodes)));
    report.violations.extend(workers.problems);
    if workers.freezes == 0 {
        report.violations.push(format!(
            "{fault}: no worker was frozen with a handler running"
        ));
    }
    // The partitioned queue must have met load too: acknowledged enqueues, and jobs its
    // workers settled.
    let spanned_acked = log
        .enqueues
        .iter()
        .filter(|e| e.queue == spanned.queue && e.replicated && e.outcome == Outcome::Ok)
        .count();
    let spanned_settled = log
        .events
        .iter()
        .filter(|e| e.queue == spanned.queue && e.kind == history::Kind::Settle)
        .count();
    if spanned_acked == 0 || spanned_settled == 0 {
        report.violations.push(format!(
            "{}: {spanned_acked} acknowledged enqueues and {spanned_settled} settles: the partitioned queue proved nothing",
            spanned.queue
        ));
    }
    let what = format!(
        "{what}; {} worker processes frozen (SIGSTOP) {} ms each, then resumed; {spanned_acked} of the acknowledged enqueues in the {}-partition queue",
        workers.freezes,
        LEASE_MS + 2_000,
        spanned::WIDTH
    );
    Ok((report, what))
}

fn enqueues(history: &History) -> usize {
    history.lock().map_or(0, |h| h.enqueues.len())
}

fn built(history: &History) -> usize {
    history.lock().map_or(0, |h| h.flows.len())
}

/// Jobs of `queue` not yet settled for good (pending, active and scheduled), and hand-overs
/// in its outbox. Waiting parents are not counted: a flow given up leaves its parent waiting.
fn left(nodes: &[Node], queue: &str, slot: u16) -> Option<i64> {
    let owner = owner_of(nodes, slot)?;
    let mut con = connect(&owner.ip, Duration::from_secs(1)).ok()?;
    let counts: Vec<(String, Option<i64>)> =
        redis::cmd("EMQ.STATS").arg(queue).query(&mut con).ok()?;
    let outbox: i64 = redis::cmd("HLEN")
        .arg(format!("emq:{{{queue}}}:outbox"))
        .query(&mut con)
        .ok()?;
    let jobs: i64 = counts
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "pending" | "active" | "scheduled"))
        .filter_map(|(_, v)| *v)
        .sum();
    Some(jobs + outbox)
}

fn main() {
    // `emq-chaos delay <ms> <jitter-ms> <seed>`: the delay loop, run by the harness inside a
    // node's network namespace.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("delay") {
        let num = |i: usize| argv.get(i).and_then(|v| v.parse::<u64>().ok());
        let (Some(ms), Some(jitter), Some(seed)) = (num(2), num(3), num(4)) else {
            eprintln!("emq-chaos delay <ms> <jitter-ms> <seed>");
            std::process::exit(2);
        };
        if let Err(e) = delay::serve(ms, jitter, seed) {
            eprintln!("emq-chaos delay: {e}");
            std::process::exit(1);
        }
        return;
    }
    // `emq-chaos worker --queue Q ...`: the real Rust worker the harness runs as a child.
    if argv.get(1).map(String::as_str) == Some("worker") {
        let run = worker::Args::parse(&argv[2..]).and_then(worker::run);
        if let Err(e) = run {
            eprintln!("emq-chaos worker: {e}");
            std::process::exit(1);
        }
        return;
    }
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("emq-chaos: {e}");
            std::process::exit(2);
        }
    };
    let mut rows = Vec::new();
    let mut failed = false;
    for seed in &a.seeds {
        let one = Args {
            seed: *seed,
            ..a.clone()
        };
        println!("seed {seed}:");
        failed |= !run(&one, &mut rows);
    }
    if let Some(path) = &a.report {
        let phases = a.seeds.len() * a.faults.len();
        if let Err(e) = report::write(path, &a.seeds, a.jobs, phases, &rows) {
            eprintln!("emq-chaos: {e}");
            failed = true;
        }
    }
    std::process::exit(i32::from(failed));
}

/// One seed's run on a cluster of its own: its rows, and whether every fault passed.
fn run(a: &Args, rows: &mut Vec<report::Row>) -> bool {
    // A producer and a worker user for each of the run's queues, limited to its keys.
    let spanned: Vec<String> = (0..a.faults.len())
        .map(|i| queues::spanned(a.seed, i))
        .collect();
    let all_queues: Vec<String> = (0..a.faults.len())
        .flat_map(|i| queues::names(a.seed, i))
        .chain(spanned.iter().cloned())
        .collect();
    // Each producer and worker user may touch one queue: the first queue's, checked on every
    // node, may not touch the second's on the node that owns it.
    let (Some(own), Some(other)) = (all_queues.first(), all_queues.get(1)) else {
        eprintln!("emq-chaos: no fault to run");
        return false;
    };
    let flow_groups: Vec<Vec<String>> = (0..a.faults.len())
        .map(|i| queues::flow_group(a.seed, i))
        .collect();
    let net = match Net::start(
        &a.image,
        6,
        NODE_TIMEOUT_MS,
        &all_queues,
        &spanned,
        &flow_groups,
    ) {
        Ok(net) => net,
        Err(e) => {
            eprintln!("emq-chaos: {e}");
            return false;
        }
    };
    let up = wait_for(Duration::from_secs(30), || {
        net.nodes.iter().all(|n| role(n).is_some())
    });
    if !up
        || cluster::create(&net).is_err()
        || !wait_for(Duration::from_secs(60), || stable(&net.nodes))
    {
        eprintln!("emq-chaos: the cluster did not form");
        return false;
    }
    let other_owner = cluster::slot_of(&net.nodes[0].ip, other)
        .ok()
        .and_then(|slot| owner_of(&net.nodes, slot));
    let acl = match other_owner {
        None => Err(format!("no owner of {other}'s slot")),
        Some(owner) => net
            .nodes
            .iter()
            .try_for_each(|n| cluster::acl_holds(n, own, other, n.ip == owner.ip)),
    };
    if let Err(e) = acl {
        eprintln!("emq-chaos: the ACL does not hold: {e}");
        return false;
    }
    let mut passed = true;
    for (i, fault) in a.faults.iter().enumerate() {
        let started = Instant::now();
        match phase(&net, fault, i, a) {
            Ok((report, what)) => {
                println!(
                    "{fault}: {what}; {}, {:.0} s",
                    report.summary(),
                    started.elapsed().as_secs_f64()
                );
                for v in report.violations.iter().take(20) {
                    println!("  VIOLATION {v}");
                }
                passed &= report.violations.is_empty();
                rows.push(report::Row {
                    seed: a.seed,
                    fault: fault.clone(),
                    what,
                    report,
                });
            }
            Err(e) => {
                println!("{fault}: could not run: {e}");
                passed = false;
                // In the report too: a phase that did not run proved nothing.
                rows.push(report::Row {
                    seed: a.seed,
                    fault: fault.clone(),
                    what: "could not run".into(),
                    report: check::Report {
                        violations: vec![format!("could not run: {e}")],
                        ..check::Report::default()
                    },
                });
            }
        }
    }
    passed
}
