//! The checker: reads the history and the final state of a phase's queues (every node back,
//! the cluster stable) and counts what each guarantee met.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use redis::Value;

use crate::cluster::{connect, owner, slot_map};
use crate::docker::Node;
use crate::workload::{Op, Outcome, Queues};

/// A phase's figures, and the violations found (each with the operations involved).
#[derive(Debug, Default)]
pub struct Report {
    pub tried: usize,
    /// Enqueues a replica confirmed (`WAIT` ≥ 1).
    pub acknowledged: usize,
    /// Of those, found once in the final state.
    pub found: usize,
    pub lost: usize,
    pub duplicated: usize,
    /// Jobs claimed again after an acknowledged `ACK`.
    pub rerun_after_ack: usize,
    /// Enqueues a primary took with no replica's `WAIT` (a primary cut off from its replica, or
    /// one about to lose its role), later gone: Valkey's replication is asynchronous, and
    /// such a write is not acknowledged. Counted, never a pass.
    pub unconfirmed_lost: usize,
    /// Enqueues whose answer never came, found once (the others were not written).
    pub unknown_found: usize,
    pub unknown: usize,
    pub settles_accepted: usize,
    /// Attempts settled twice, at most once with a replica's `WAIT`: a primary cut off from
    /// its replica took one, its failover undid it, and the new primary gave the same token to
    /// the job's next claim. Counted, never a pass.
    pub settles_superseded: usize,
    /// Settles whose answer never came.
    pub settles_unknown: usize,
    pub violations: Vec<String>,
}

const SETS: [(&str, &str); 4] = [
    ("pending", "pending"),
    ("active", "active"),
    ("schedule", "scheduled"),
    ("dead", "dead"),
];

/// One queue's final state on its primary: rows (id → state, payload) and set members.
struct Final {
    rows: HashMap<String, (String, String)>,
    members: HashMap<String, Vec<&'static str>>,
}

fn read_queue(ip: &str, queue: &str) -> Result<Final, String> {
    let mut con = connect(ip, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let mut members: HashMap<String, Vec<&'static str>> = HashMap::new();
    for (set, _) in SETS {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("emq:{{{queue}}}:{set}"))
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        for id in ids {
            members.entry(id).or_default().push(set);
        }
    }
    let mut rows = HashMap::new();
    let prefix = format!("emq:{{{queue}}}:job:");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        for key in keys {
            let fields: HashMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            let id = key.trim_start_matches(&prefix).to_string();
            rows.insert(
                id,
                (
                    fields.get("state").cloned().unwrap_or_default(),
                    fields.get("payload").cloned().unwrap_or_default(),
                ),
            );
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(Final { rows, members })
}

/// Checks the phase's `history` against the final state of its `queues`.
pub fn check(nodes: &[Node], queues: &Queues, history: &[Op]) -> Result<Report, String> {
    let map = slot_map(nodes).ok_or("no node gives the slot map")?;
    let mut report = Report::default();
    // payload -> (queue, id) found; and each queue's final state.
    let mut by_payload: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut states: HashMap<(String, String), String> = HashMap::new();
    for (queue, slot) in &queues.0 {
        let ip = owner(&map, *slot).ok_or("a queue's slot has no owner")?;
        let fin = read_queue(ip, queue)?;
        for (id, sets) in &fin.members {
            if !fin.rows.contains_key(id) {
                report.violations.push(format!(
                    "{queue}/{id}: a member of {sets:?} without its row"
                ));
            }
            if sets.len() > 1 {
                report
                    .violations
                    .push(format!("{queue}/{id}: in two sets at once: {sets:?}"));
            }
        }
        for (id, (state, payload)) in &fin.rows {
            let sets = fin.members.get(id).cloned().unwrap_or_default();
            let expected: Vec<&str> = SETS
                .iter()
                .filter(|(_, s)| s == state)
                .map(|(set, _)| *set)
                .collect();
            if state != "done" && sets != expected || state == "done" && !sets.is_empty() {
                report
                    .violations
                    .push(format!("{queue}/{id}: state {state} but in {sets:?}"));
            }
            by_payload
                .entry((queue.clone(), payload.clone()))
                .or_default()
                .push(id.clone());
            states.insert((queue.clone(), id.clone()), state.clone());
        }
    }

    // Enqueues.
    for op in history {
        let Op::Enqueue {
            queue,
            payload,
            id,
            replicated,
            outcome,
        } = op
        else {
            continue;
        };
        report.tried += 1;
        let found = by_payload
            .get(&(queue.clone(), payload.clone()))
            .map_or(0, Vec::len);
        if found > 1 {
            report.duplicated += 1;
            report.violations.push(format!(
                "{queue}: payload {payload} (enqueued as {id:?}) in {found} jobs"
            ));
        }
        match outcome {
            Outcome::Ok if *replicated => {
                report.acknowledged += 1;
                if found == 0 {
                    report.lost += 1;
                    report
                        .violations
                        .push(format!("{queue}: acknowledged enqueue lost ({op:?})"));
                } else {
                    report.found += 1;
                }
            }
            Outcome::Ok => {
                if found == 0 {
                    report.unconfirmed_lost += 1;
                }
            }
            Outcome::Unknown(_) => {
                report.unknown += 1;
                if found == 1 {
                    report.unknown_found += 1;
                }
            }
            Outcome::Refused(why) => {
                if found > 0 {
                    report.violations.push(format!(
                        "{queue}: a refused enqueue ({why}) was written ({op:?})"
                    ));
                }
            }
        }
    }

    // Settles: fencing, and no claim after an acknowledged ACK.
    let mut accepted: BTreeMap<(String, String, i64), usize> = BTreeMap::new();
    let mut taken: BTreeMap<(String, String, i64), usize> = BTreeMap::new();
    let mut acked: HashMap<(String, String), std::time::Instant> = HashMap::new();
    for op in history {
        if let Op::Settle {
            outcome: Outcome::Unknown(_),
            ..
        } = op
        {
            report.settles_unknown += 1;
        }
        if let Op::Settle {
            queue,
            id,
            token,
            fail,
            accepted: true,
            replicated,
            answered,
            ..
        } = op
        {
            report.settles_accepted += 1;
            // Fencing is a promise about settles a replica confirmed: one a primary took
            // without (cut off from its replica) may be undone by its failover, and the job's
            // new primary hand out the same token again.
            *accepted
                .entry((queue.clone(), id.clone(), *token))
                .or_default() += usize::from(*replicated);
            *taken
                .entry((queue.clone(), id.clone(), *token))
                .or_default() += 1;
            if !fail && *replicated {
                acked.insert((queue.clone(), id.clone()), *answered);
            }
        }
    }
    for ((queue, id, token), n) in &accepted {
        if *n > 1 {
            report.violations.push(format!(
                "{queue}/{id}: {n} settles accepted for token {token}: fencing failed"
            ));
        }
    }
    report.settles_superseded = taken.values().filter(|n| **n > 1).count();
    let mut rerun: BTreeSet<(String, String)> = BTreeSet::new();
    for op in history {
        if let Op::Claim { queue, jobs, sent } = op {
            for (id, token) in jobs {
                let key = (queue.clone(), id.clone());
                if acked.get(&key).is_some_and(|at| sent > at) && rerun.insert(key) {
                    report.violations.push(format!(
                        "{queue}/{id}: claimed again (token {token}) after an acknowledged ACK"
                    ));
                }
            }
        }
    }
    report.rerun_after_ack = rerun.len();
    for (key, _) in acked {
        if states.get(&key).map(String::as_str) != Some("done") {
            report.violations.push(format!(
                "{}/{}: acknowledged ACK but the job is {:?}",
                key.0,
                key.1,
                states.get(&key)
            ));
        }
    }
    Ok(report)
}

/// Whether every replica's `DEBUG DIGEST` equals its primary's; the pairs that differ.
pub fn digests(pairs: &[(Node, Node)]) -> Vec<String> {
    let digest = |ip: &str| -> Option<String> {
        let mut con = connect(ip, Duration::from_secs(5)).ok()?;
        match redis::cmd("DEBUG")
            .arg("DIGEST")
            .query::<Value>(&mut con)
            .ok()?
        {
            Value::SimpleString(s) => Some(s),
            Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        }
    };
    pairs
        .iter()
        .filter(|(p, r)| {
            let primary = digest(&p.ip);
            primary.is_none() || primary != digest(&r.ip)
        })
        .map(|(p, r)| format!("replica {} differs from its primary {}", r.ip, p.ip))
        .collect()
}
