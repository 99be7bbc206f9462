//! Reading a phase's final state from the servers, for the checker: each queue's rows, set
//! members and outbox size on its primary (a partitioned queue's its partitions' together), and whether every replica's data equals its
//! primary's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use redis::Value;

use crate::check::{QueueState, Row};
use crate::cluster::{connect, owner, slot_map};
use crate::docker::Node;
use crate::spanned::{merge, Spanned};
use crate::workload::Queues;

const SETS: [&str; 5] = ["pending", "active", "schedule", "dead", "waiting"];

fn read_queue(ip: &str, queue: &str) -> Result<QueueState, String> {
    let mut con = connect(ip, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let mut fin = QueueState::default();
    for set in SETS {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("emq:{{{queue}}}:{set}"))
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        for id in ids {
            fin.members.entry(id).or_default().push(set.to_string());
        }
    }
    fin.outbox = redis::cmd("HLEN")
        .arg(format!("emq:{{{queue}}}:outbox"))
        .query(&mut con)
        .map_err(|e| e.to_string())?;
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
            let get = |f: &str| fields.get(f).cloned().unwrap_or_default();
            fin.rows.insert(
                id,
                Row {
                    state: get("state"),
                    payload: get("payload"),
                    attempts: get("attempts").parse().unwrap_or(0),
                },
            );
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(fin)
}

/// Each of `queues` as its primary holds it now, and `spanned` as its partitions do together
/// ([`crate::spanned::merge`]), with the rows found out of place.
pub fn read(
    nodes: &[Node],
    queues: &Queues,
    spanned: &Spanned,
) -> Result<(BTreeMap<String, QueueState>, Vec<String>), String> {
    let map = slot_map(nodes).ok_or("no node gives the slot map")?;
    let on_owner = |queue: &str, slot: u16| -> Result<QueueState, String> {
        let ip = owner(&map, slot).ok_or("a queue's slot has no owner")?;
        read_queue(ip, queue)
    };
    let mut finals = BTreeMap::new();
    for (queue, slot) in &queues.0 {
        finals.insert(queue.clone(), on_owner(queue, *slot)?);
    }
    let parts = spanned
        .partitions
        .iter()
        .map(|(p, slot)| on_owner(p, *slot))
        .collect::<Result<Vec<_>, _>>()?;
    let (whole, mut misplaced) = merge(&spanned.queue, parts);
    // The queue's own name takes no job: anything there is out of place too.
    let own = on_owner(&spanned.queue, spanned.slot)?;
    if !own.rows.is_empty() || !own.members.is_empty() {
        misplaced.push(format!(
            "{}: {} rows and {} set members under the partitioned queue's own name",
            spanned.queue,
            own.rows.len(),
            own.members.len()
        ));
    }
    finals.insert(spanned.queue.clone(), whole);
    Ok((finals, misplaced))
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
