//! A partitioned queue as the console shows it (docs/cluster.md): one row with its partitions'
//! totals, and a row a partition, each with the primary that serves it.

use echomq_client::partition;
use echomq_client::slot::slot;
use redis::Value;

use super::{counts, text, QueueRow};
use crate::deployment::{Deployment, Routed};
use crate::error::Result;

/// The highest slot.
const LAST_SLOT: u16 = 16_383;

/// The queue's width (`EMQ.WIDTH`): its partitions, 0 for an ordinary queue.
pub async fn width(dep: &Deployment, name: &str) -> Result<u16> {
    let reply = dep.queue(name).call("EMQ.WIDTH", &[]).await?;
    let fields: Vec<(String, &Value)> = match &reply {
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v)))
            .collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|p| Some((text(p.first()?)?, p.get(1)?)))
            .collect(),
        _ => Vec::new(),
    };
    Ok(fields
        .iter()
        .find(|(k, _)| k == "width")
        .and_then(|(_, v)| text(v)?.parse().ok())
        .unwrap_or(0))
}

/// The primaries' slot ranges (`CLUSTER SLOTS`), each with its address; one range of every slot
/// for a single server.
async fn owners(dep: &Deployment) -> Result<Vec<(u16, u16, String)>> {
    let Routed::Cluster(mut router) = dep.routed.clone() else {
        let addr = dep
            .primaries
            .first()
            .map(|n| n.addr.clone())
            .unwrap_or_default();
        return Ok(vec![(0, LAST_SLOT, addr)]);
    };
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut router)
        .await?;
    let mut out = Vec::new();
    let Value::Array(ranges) = reply else {
        return Ok(out);
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(first), Some(last), Some(Value::Array(node))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let number = |v: &Value| text(v).and_then(|t| t.parse::<u16>().ok());
        let (Some(first), Some(last)) = (number(first), number(last)) else {
            continue;
        };
        let host = node.first().and_then(text).unwrap_or_default();
        let port = node.get(1).and_then(text).unwrap_or_default();
        out.push((first, last, format!("{host}:{port}")));
    }
    Ok(out)
}

/// The rows of the partitions of `name`'s `width`, in order, each with its primary.
pub async fn rows(dep: &Deployment, name: &str, width: u16, now: u64) -> Result<Vec<QueueRow>> {
    let owners = owners(dep).await?;
    let mut rows = Vec::with_capacity(usize::from(width));
    for i in 0..width {
        let Some(part) = partition::name(name, i, width) else {
            continue;
        };
        let s = slot(&part);
        let primary = owners
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&s))
            .map(|(_, _, addr)| addr.clone());
        let mut row = match counts(dep, &part, now).await {
            Ok(row) => row,
            Err(e) => QueueRow {
                name: part,
                error: Some(e.to_string()),
                ..QueueRow::default()
            },
        };
        row.primary = primary;
        rows.push(row);
    }
    Ok(rows)
}

/// The partitioned queue's row: its partitions' counts added up, the longest wait among them,
/// paused when every one is, and the partitions themselves.
pub fn total(name: &str, partitions: Vec<QueueRow>) -> QueueRow {
    let sum = |f: fn(&QueueRow) -> i64| partitions.iter().map(f).sum();
    QueueRow {
        name: name.to_string(),
        pending: sum(|r| r.pending),
        active: sum(|r| r.active),
        scheduled: sum(|r| r.scheduled),
        dead: sum(|r| r.dead),
        waiting: sum(|r| r.waiting),
        groups: sum(|r| r.groups),
        paused: !partitions.is_empty() && partitions.iter().all(|r| r.paused),
        oldest_pending_ms: partitions.iter().filter_map(|r| r.oldest_pending_ms).max(),
        error: partitions.iter().find_map(|r| r.error.clone()),
        partitions,
        ..QueueRow::default()
    }
}
