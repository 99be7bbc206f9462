//! A queue's named groups as `EMQ.GROUPS` pages them, the largest backlog first, and one
//! group's pause and resume (`EMQ.PAUSE`/`EMQ.RESUME <queue> GROUP <g>`). `emq groups`, `emq
//! pause|resume --group` and the queue page of `emq web` read and change them through here.

use redis::Value;
use serde::Serialize;

use crate::deployment::{page_of, Deployment};
use crate::error::{Error, Result};
use crate::overview::{age, int, pairs, text};

/// One group of a page, as the server counts it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GroupRow {
    pub group: String,
    /// Its jobs waiting for a claim.
    pub ready: i64,
    /// Its jobs running.
    pub active: i64,
    /// How many of its jobs may run at once: its own limit, or the queue's for every group.
    pub concurrency: Option<i64>,
    pub paused: bool,
    /// When a pause given a length (`FOR`) ends, in unix ms; `None` for a pause until resumed.
    pub paused_until: Option<i64>,
    /// Its limit holds it back: its ready jobs wait until one of its running jobs leaves.
    pub held: bool,
}

impl GroupRow {
    /// How long its pause has left, when it has a length: `4m`.
    pub fn left(&self, now_ms: u64) -> Option<String> {
        let until = u64::try_from(self.paused_until?).unwrap_or(0);
        Some(age(until.saturating_sub(now_ms)))
    }
}

/// One page of the queue's groups from `cursor` (`"0"`: the first), at most `count`: the next
/// cursor (`"0"` at the end) and the groups, the largest backlog first.
pub async fn groups(
    dep: &Deployment,
    queue: &str,
    cursor: &str,
    count: usize,
) -> Result<(String, Vec<GroupRow>)> {
    // A partitioned queue's groups are walked partition by partition (the client's cursor).
    let listed = dep
        .queue(queue)
        .listing(cursor, |part, inner| {
            let args = [
                b"CURSOR".to_vec(),
                inner.into_bytes(),
                b"COUNT".to_vec(),
                count.to_string().into_bytes(),
            ];
            async move {
                let reply = part.call("EMQ.GROUPS", &args).await?;
                rows(&reply).map_err(|e| echomq_client::Error::Reply(e.to_string()))
            }
        })
        .await?;
    Ok(listed)
}

/// An `EMQ.GROUPS` reply, `[next-cursor, [map ...]]`, as the cursor and the groups.
fn rows(reply: &Value) -> Result<(String, Vec<GroupRow>)> {
    let unexpected = || Error::Reply(format!("{reply:?}"));
    let (next, items) = page_of(reply)?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut row = GroupRow::default();
        for (name, v) in pairs(item).ok_or_else(unexpected)? {
            let n = || int(v).ok();
            match name.as_str() {
                "group" => row.group = text(v).unwrap_or_default(),
                "ready" => row.ready = n().unwrap_or(0),
                "active" => row.active = n().unwrap_or(0),
                "concurrency" => row.concurrency = n(),
                "paused" => row.paused = n() == Some(1),
                "paused-until" => row.paused_until = n(),
                "held" => row.held = n() == Some(1),
                _ => {}
            }
        }
        out.push(row);
    }
    Ok((String::from_utf8_lossy(&next).into_owned(), out))
}

/// Keeps claims off the group's jobs, until resumed or, with `for_ms`, that long (a group
/// paused already is given the new end); whether it was not paused before.
pub async fn pause(
    dep: &Deployment,
    queue: &str,
    group: &str,
    for_ms: Option<u64>,
) -> Result<bool> {
    let mut args = vec![b"GROUP".to_vec(), group.as_bytes().to_vec()];
    if let Some(ms) = for_ms {
        args.extend([b"FOR".to_vec(), ms.to_string().into_bytes()]);
    }
    Ok(int(&dep.queue(queue).call("EMQ.PAUSE", &args).await?)? == 1)
}

/// Lets claims take the group's jobs again; whether it was paused.
pub async fn resume(dep: &Deployment, queue: &str, group: &str) -> Result<bool> {
    let args = [b"GROUP".to_vec(), group.as_bytes().to_vec()];
    Ok(int(&dep.queue(queue).call("EMQ.RESUME", &args).await?)? == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_page_reads_the_same_as_resp2_pairs_and_as_a_resp3_map() {
        let fields = [
            ("group", bulk("<b>x</b>")),
            ("ready", Value::Int(3)),
            ("active", Value::Int(1)),
            ("concurrency", Value::Int(1)),
            ("paused", Value::Int(1)),
            ("paused-until", Value::Int(1_796_000_060_000)),
            ("held", Value::Int(0)),
        ];
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| [bulk(k), v.clone()])
                .collect(),
        );
        let map = Value::Map(fields.iter().map(|(k, v)| (bulk(k), v.clone())).collect());
        let want = GroupRow {
            group: "<b>x</b>".into(),
            ready: 3,
            active: 1,
            concurrency: Some(1),
            paused: true,
            paused_until: Some(1_796_000_060_000),
            held: false,
        };
        for item in [flat, map] {
            let reply = Value::Array(vec![bulk("7"), Value::Array(vec![item])]);
            assert_eq!(
                rows(&reply).expect("a page"),
                ("7".into(), vec![want.clone()])
            );
        }
        assert_eq!(want.left(1_796_000_000_000).as_deref(), Some("1m"));
    }

    #[test]
    fn no_limit_and_no_end_are_none() {
        let item = Value::Array(vec![
            bulk("group"),
            bulk("a"),
            bulk("concurrency"),
            Value::Nil,
            bulk("paused"),
            Value::Int(1),
            bulk("paused-until"),
            Value::Nil,
        ]);
        let reply = Value::Array(vec![bulk("0"), Value::Array(vec![item])]);
        let (next, groups) = rows(&reply).expect("a page");
        assert_eq!(next, "0");
        assert_eq!(
            (groups[0].concurrency, groups[0].paused_until),
            (None, None)
        );
        assert!(groups[0].paused && groups[0].left(0).is_none());
        assert!(rows(&Value::Int(1)).is_err());
    }
}
