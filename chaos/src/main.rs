//! `make chaos`: EchoMQ under the faults a deployment meets. A 3-primary, 3-replica cluster runs
//! in containers on a docker network of the harness's own; each fault is done under load
//! (producers with `WAIT 1`, workers that claim, settle with `WAIT 1` or die), then healed; once
//! every node is back and the cluster stable, the checker reads the history and the final state.
//!
//! `emq-chaos [--seed N] [--jobs N] [--faults a,b,...] [--report docs/reliability.md]`
//! (`--jobs`: enqueues tried per fault). A violation fails the run and prints what was involved.

mod check;
mod cluster;
mod delay;
mod docker;
mod workload;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use check::Report;
use cluster::{connect, field, pairs, stable, wait_for};
use docker::{Net, Node};
use workload::{History, Load, Queues};

const NODE_TIMEOUT_MS: u64 = 2_000;
const FAULTS: [&str; 7] = [
    "partition-primary",
    "pause-primary",
    "kill-primary",
    "partition-replica",
    "rolling-restart",
    "reshard-under-partition",
    "slow-primary",
];

struct Args {
    seed: u64,
    jobs: usize,
    faults: Vec<String>,
    report: Option<String>,
    image: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        seed: 1,
        jobs: 2_000,
        faults: FAULTS.iter().map(|f| f.to_string()).collect(),
        report: None,
        image: "echomq:dev".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
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

/// `n` `PING` round trips to `node` on one connection, in ms, sorted (those that came back
/// within 5 s).
fn ping_times(node: &Node, n: usize) -> Vec<f64> {
    let Ok(mut con) = connect(&node.ip, Duration::from_secs(5)) else {
        return Vec::new();
    };
    let mut times: Vec<f64> = (0..n)
        .filter_map(|_| {
            let sent = Instant::now();
            redis::cmd("PING")
                .query::<String>(&mut con)
                .ok()
                .map(|_| sent.elapsed().as_secs_f64() * 1000.0)
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

fn hold() {
    std::thread::sleep(Duration::from_millis(NODE_TIMEOUT_MS * 3));
}

/// Does `fault` to the cluster (under the load already running) and heals it; `seed` draws
/// what the fault itself draws (a slowed link's delays).
fn inject(net: &Net, fault: &str, slot: u16, seed: u64) -> Result<String, String> {
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
            let slow = net.slow(&primary, SLOW_MS, SLOW_JITTER_MS, SLOW_LOSS, seed)?;
            // What the harness's own round trips took meanwhile, on one connection.
            let started = Instant::now();
            let pings = ping_times(&primary, 5);
            std::thread::sleep(
                (Duration::from_millis(NODE_TIMEOUT_MS * 3)).saturating_sub(started.elapsed()),
            );
            slow.heal(net)?;
            let ping = match pings.get(pings.len() / 2) {
                Some(ms) => format!("a `PING` took {ms:.0} ms (median of {})", pings.len()),
                None => "no `PING` came back".to_string(),
            };
            Ok(format!(
                "{} delayed {}–{} ms each way and {:.0}% of its packets dropped, on all its links: {ping}",
                primary.ip,
                SLOW_MS - SLOW_JITTER_MS,
                SLOW_MS + SLOW_JITTER_MS,
                SLOW_LOSS * 100.0
            ))
        }
        other => Err(format!("unknown fault {other}")),
    }
}

/// The seed of fault `index`'s phase.
fn phase_seed(a: &Args, index: usize) -> u64 {
    a.seed.wrapping_mul(1_000).wrapping_add(index as u64)
}

/// The four queues of fault `index`'s phase, drawn from its seed.
fn queue_names(a: &Args, index: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(phase_seed(a, index));
    (0..4)
        .map(|q| format!("f{index}-{}", rng.random_range(0..1_000_000u32) + q))
        .collect()
}

fn phase(net: &Net, fault: &str, index: usize, a: &Args) -> Result<(Report, String), String> {
    let nodes = &net.nodes;
    let seed = phase_seed(a, index);
    let mut queues = Vec::new();
    for name in queue_names(a, index) {
        let slot = cluster::slot_of(&nodes[0].ip, &name)?;
        queues.push((name, slot));
    }
    let queues = Queues(queues);
    let history: History = Arc::new(Mutex::new(Vec::new()));
    let load = Load::start(nodes, &queues, &history, seed, 2, 3, a.jobs);
    std::thread::sleep(Duration::from_secs(2));
    let what = inject(net, fault, queues.0[0].1, seed)?;
    if !wait_for(Duration::from_secs(120), || stable(nodes)) {
        load.stop();
        return Err(format!("{fault}: the cluster is not stable after healing"));
    }
    // The rest of the jobs go in, then the workers drain the queues.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) && enqueues(&history) < a.jobs {
        std::thread::sleep(Duration::from_millis(200));
    }
    load.stop_producing();
    let drained = wait_for(Duration::from_secs(120), || {
        queues
            .0
            .iter()
            .all(|(q, slot)| left(nodes, q, *slot) == Some(0))
    });
    load.stop();
    if !drained {
        eprintln!("{fault}: some jobs were still queued when the drain ended");
    }
    wait_for(Duration::from_secs(60), || stable(nodes));
    let ops = history.lock().map(|h| h.clone()).unwrap_or_default();
    let mut report = check::check(nodes, &queues, &ops)?;
    report.violations.extend(check::digests(&pairs(nodes)));
    Ok((report, what))
}

fn enqueues(history: &History) -> usize {
    history.lock().map_or(0, |h| {
        h.iter()
            .filter(|op| matches!(op, workload::Op::Enqueue { .. }))
            .count()
    })
}

/// Jobs of `queue` not yet settled for good: pending, active and scheduled.
fn left(nodes: &[Node], queue: &str, slot: u16) -> Option<i64> {
    let owner = owner_of(nodes, slot)?;
    let mut con = connect(&owner.ip, Duration::from_secs(1)).ok()?;
    let counts: Vec<(String, Option<i64>)> =
        redis::cmd("EMQ.STATS").arg(queue).query(&mut con).ok()?;
    Some(
        counts
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "pending" | "active" | "scheduled"))
            .filter_map(|(_, v)| *v)
            .sum(),
    )
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
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("emq-chaos: {e}");
            std::process::exit(2);
        }
    };
    // A producer and a worker user for each of the run's queues, limited to its keys.
    let all_queues: Vec<String> = (0..a.faults.len())
        .flat_map(|i| queue_names(&a, i))
        .collect();
    // Each producer and worker user may touch one queue: the first queue's, checked on every
    // node, may not touch the second's on the node that owns it.
    let (Some(own), Some(other)) = (all_queues.first(), all_queues.get(1)) else {
        eprintln!("emq-chaos: no fault to run");
        std::process::exit(2);
    };
    let net = match Net::start(&a.image, 6, NODE_TIMEOUT_MS, &all_queues) {
        Ok(net) => net,
        Err(e) => {
            eprintln!("emq-chaos: {e}");
            std::process::exit(1);
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
        drop(net);
        std::process::exit(1);
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
        drop(net);
        std::process::exit(1);
    }
    let mut rows = Vec::new();
    let mut failed = false;
    for (i, fault) in a.faults.iter().enumerate() {
        let started = Instant::now();
        match phase(&net, fault, i, &a) {
            Ok((r, what)) => {
                println!(
                    "{fault}: {what}; tried {}, acknowledged {}, found {}, lost {}, duplicated {}, re-run after ack {}, unconfirmed and lost {}, unknown {} (found {}), settles accepted {} (answer never came {}, the same attempt settled twice without WAIT {}), {:.0} s",
                    r.tried, r.acknowledged, r.found, r.lost, r.duplicated, r.rerun_after_ack,
                    r.unconfirmed_lost, r.unknown, r.unknown_found, r.settles_accepted, r.settles_unknown, r.settles_superseded,
                    started.elapsed().as_secs_f64()
                );
                for v in r.violations.iter().take(20) {
                    println!("  VIOLATION {v}");
                }
                failed |= !r.violations.is_empty();
                rows.push((fault.clone(), what, r));
            }
            Err(e) => {
                println!("{fault}: could not run: {e}");
                failed = true;
            }
        }
    }
    drop(net);
    if let Some(path) = &a.report {
        if let Err(e) = report::write(path, a.seed, a.jobs, &rows) {
            eprintln!("emq-chaos: {e}");
            failed = true;
        }
    }
    std::process::exit(i32::from(failed));
}

mod report;
