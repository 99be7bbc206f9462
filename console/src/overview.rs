//! What the console shows, read from the server: each queue's counts, a page of a set's jobs,
//! one job, and a rolling minute of samples the rates and sparklines come from. `emq`'s plain
//! commands, `emq top` and `emq web` all read through here.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use echomq_client::ids;

use crate::error::{Error, Result};
use redis::{FromRedisValue, Value};
use serde::Serialize;

use crate::deployment::{page, Deployment};

pub mod partitions;

/// The sets `EMQ.JOBS` pages through (`waiting`: parents waiting for their children,
/// docs/flows.md).
pub const SETS: [&str; 5] = ["pending", "active", "scheduled", "dead", "waiting"];
/// The sets a purge can empty (active jobs are leased to workers; a waiting parent is
/// cancelled, with its children, by `EMQ.CANCEL`, docs/flows.md).
pub const PURGEABLE: [&str; 3] = ["pending", "scheduled", "dead"];

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One queue at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueueRow {
    pub name: String,
    pub pending: i64,
    pub active: i64,
    pub scheduled: i64,
    pub dead: i64,
    /// Parents waiting for their children (docs/flows.md).
    pub waiting: i64,
    /// Its named groups ([`crate::groups`]); 0 for a queue whose jobs are all in the default one.
    pub groups: i64,
    pub paused: bool,
    /// How long the job first in line has waited since its id was minted (ms).
    pub oldest_pending_ms: Option<u64>,
    /// Why the queue could not be read (a key of another type, say); the counts are then 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The queue's transitions since the previous sample, from the server's own counts
    /// (`EMQ.METRICS`); `None` where they cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
    /// A partitioned queue's partitions, each a row of its own (docs/cluster.md); the counts
    /// above are theirs added up.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<QueueRow>,
    /// The primary that serves a partition (`host:port`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
}

/// Transitions of one queue between two samples, and their latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Flow {
    pub enqueued: u64,
    pub claimed: u64,
    pub acked: u64,
    pub latency: crate::waits::Latency,
}

impl Flow {
    pub fn get(&self, event: &str) -> u64 {
        match event {
            "enqueued" => self.enqueued,
            "claimed" => self.claimed,
            "acked" => self.acked,
            _ => 0,
        }
    }
}

impl QueueRow {
    pub fn count(&self, set: &str) -> i64 {
        match set {
            "pending" => self.pending,
            "active" => self.active,
            "scheduled" => self.scheduled,
            "dead" => self.dead,
            "waiting" => self.waiting,
            _ => 0,
        }
    }

    /// Its partitions' number, as a client learns it from `EMQ.WIDTH` (0: not partitioned).
    pub fn width(&self) -> u16 {
        u16::try_from(self.partitions.len()).unwrap_or(u16::MAX)
    }
}

/// One job of a page of `EMQ.JOBS ... WITHPAYLOADS`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobEntry {
    pub id: String,
    /// Its score in the set: priority in `pending`, due time in `scheduled`, lease deadline in
    /// `active`, time of death in `dead`, due time (0 for none) in `waiting`.
    pub score: i64,
    pub attempts: i64,
    /// The payload, or its first bytes when the page was read with a cut ([`jobs`]).
    pub payload: String,
    /// The whole payload's size in bytes.
    #[serde(skip)]
    pub payload_bytes: usize,
    /// The last error, or its first bytes when the page was read with a cut.
    pub error: Option<String>,
}

/// A page's payloads and errors whole ([`jobs`]).
pub const WHOLE: usize = usize::MAX;
/// The longest cut the server makes itself (`EMQ.JOBS ... PREVIEW`); a longer one is read whole
/// and cut here.
const MAX_PREVIEW: usize = 65_536;

/// The first `limit` bytes of `bytes` as text (cut back to a character's start when it is
/// UTF-8, invalid bytes shown as U+FFFD), and whether anything was left out.
pub fn cut(bytes: &[u8], limit: usize) -> (String, bool) {
    if bytes.len() <= limit {
        return (String::from_utf8_lossy(bytes).into_owned(), false);
    }
    let mut head = &bytes[..limit];
    if let Err(e) = std::str::from_utf8(head) {
        // A character cut in two at the end: drop its first bytes.
        if e.error_len().is_none() {
            head = &head[..e.valid_up_to()];
        }
    }
    (String::from_utf8_lossy(head).into_owned(), true)
}

pub fn text(v: &Value) -> Option<String> {
    bytes(v).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A reply's value as the bytes it stands for.
fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(n) => Some(n.to_string().into_bytes()),
        Value::Double(d) => Some(d.to_string().into_bytes()),
        _ => None,
    }
}

fn number(v: &Value) -> i64 {
    text(v)
        .and_then(|t| t.parse::<f64>().ok())
        .map_or(0, |f| f as i64)
}

/// The queue's counts and the age of its first pending job; a partitioned queue's, its
/// partitions' added up, with a row of each.
pub async fn queue_row(dep: &Deployment, name: &str, now: u64) -> Result<QueueRow> {
    match partitions::width(dep, name).await? {
        0 => counts(dep, name, now).await,
        width => Ok(partitions::total(
            name,
            partitions::rows(dep, name, width, now).await?,
        )),
    }
}

/// One queue's own counts and the age of its first pending job.
pub async fn counts(dep: &Deployment, name: &str, now: u64) -> Result<QueueRow> {
    let stats = dep.queue(name).stats().await?;
    let get = |k: &str| stats.get(k).copied().flatten().unwrap_or(0);
    let mut row = QueueRow {
        name: name.to_string(),
        pending: get("pending"),
        active: get("active"),
        scheduled: get("scheduled"),
        dead: get("dead"),
        waiting: get("waiting"),
        groups: get("groups"),
        paused: get("paused") == 1,
        oldest_pending_ms: None,
        error: None,
        flow: None,
        partitions: Vec::new(),
        primary: None,
    };
    if row.pending > 0 {
        let (_, first) = jobs(dep, name, "pending", "0", 1, None).await?;
        row.oldest_pending_ms = first
            .first()
            .and_then(|j| ids::minted_at_ms(&j.id))
            .map(|at| now.saturating_sub(at));
    }
    Ok(row)
}

/// Every queue of the deployment, in name order; a queue that cannot be read is listed with
/// its error, so one broken key does not hide the others.
pub async fn overview(dep: &Deployment) -> Result<Vec<QueueRow>> {
    let now = now_ms();
    let mut rows = Vec::new();
    for name in dep.queues().await? {
        rows.push(match queue_row(dep, &name, now).await {
            Ok(row) => row,
            Err(e) => QueueRow {
                name,
                error: Some(e.to_string()),
                ..QueueRow::default()
            },
        });
    }
    Ok(rows)
}

/// A page of one set: the next cursor (`"0"` at the end) and its jobs, with `payloads` their
/// payloads and last errors cut to that many bytes each ([`WHOLE`] for all of them). The server
/// sends them whole (`EMQ.JOBS` has no range): the cut bounds what is kept and shown.
pub async fn jobs(
    dep: &Deployment,
    queue: &str,
    set: &str,
    cursor: &str,
    count: usize,
    payloads: Option<usize>,
) -> Result<(String, Vec<JobEntry>)> {
    let with_payloads = payloads.is_some();
    let limit = payloads.unwrap_or(WHOLE);
    // A cut page asks the server for the first bytes alone (and their lengths): a page of
    // large jobs stays small on the wire too.
    let preview = with_payloads && limit < MAX_PREVIEW;
    let args = |inner: &str| {
        let mut args = vec![
            set.as_bytes().to_vec(),
            b"CURSOR".to_vec(),
            inner.as_bytes().to_vec(),
            b"COUNT".to_vec(),
            count.to_string().into_bytes(),
        ];
        if preview {
            args.extend([b"PREVIEW".to_vec(), limit.max(1).to_string().into_bytes()]);
        } else if with_payloads {
            args.push(b"WITHPAYLOADS".to_vec());
        }
        args
    };
    // A partitioned queue's set is walked partition by partition (the client's cursor).
    let listed = dep
        .queue(queue)
        .listing(cursor, |part, inner| {
            let args = args(&inner);
            async move {
                let reply = part.call("EMQ.JOBS", &args).await?;
                entries(&reply, preview, limit)
                    .map_err(|e| echomq_client::Error::Reply(e.to_string()))
            }
        })
        .await?;
    Ok(listed)
}

/// An `EMQ.JOBS` reply as its next cursor and its jobs, each payload and last error cut to
/// `limit` bytes (`preview`: the server cut them, and sent each one's whole length).
fn entries(reply: &Value, preview: bool, limit: usize) -> Result<(String, Vec<JobEntry>)> {
    let (next, _) = page(reply)?;
    let Value::Array(parts) = reply else {
        return Err(Error::Reply(format!("{reply:?}")));
    };
    let mut out = Vec::new();
    if let Some(Value::Array(items)) = parts.get(1) {
        for item in items {
            let Value::Array(fields) = item else { continue };
            let field = |i: usize| fields.get(i).and_then(text);
            let Some(id) = field(0) else { continue };
            let payload = fields.get(3).and_then(bytes).unwrap_or_default();
            let payload_bytes = match fields.get(5) {
                Some(whole) if preview => usize::try_from(number(whole)).unwrap_or(0),
                _ => payload.len(),
            };
            out.push(JobEntry {
                id,
                score: fields.get(1).map_or(0, number),
                attempts: fields.get(2).map_or(0, number),
                payload: cut(&payload, limit).0,
                payload_bytes,
                error: fields.get(4).and_then(bytes).map(|e| cut(&e, limit).0),
            });
        }
    }
    Ok((String::from_utf8_lossy(&next).into_owned(), out))
}

/// One job's row, set and score, field by field in the server's order; `None` when there is
/// no such job.
pub async fn job(dep: &Deployment, queue: &str, id: &str) -> Result<Option<Vec<(String, String)>>> {
    Ok(job_bytes(dep, queue, id).await?.map(|fields| {
        fields
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect()
    }))
}

/// [`job`], each value as the bytes the server sent.
pub async fn job_bytes(
    dep: &Deployment,
    queue: &str,
    id: &str,
) -> Result<Option<Vec<(String, Vec<u8>)>>> {
    let reply = dep
        .queue(queue)
        .call("EMQ.JOB", &[id.as_bytes().to_vec()])
        .await?;
    if reply == Value::Nil {
        return Ok(None);
    }
    let fields = pairs(&reply).ok_or_else(|| Error::Reply(format!("{reply:?}")))?;
    Ok(Some(
        fields
            .into_iter()
            .map(|(k, v)| {
                // A map of its own (`headers`): its lines as the row keeps them, `key:value`.
                let value = bytes(v).unwrap_or_else(|| {
                    let lines: Vec<String> = pairs(v)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| format!("{k}:{}", text(v).unwrap_or_default()))
                        .collect();
                    lines.join("\n").into_bytes()
                });
                (k, value)
            })
            .collect(),
    ))
}

/// A map reply (a map under RESP3, a flat array of pairs under RESP2) as its fields in the
/// server's order, each name as text; `None` for a reply of another kind.
pub fn pairs(reply: &Value) -> Option<Vec<(String, &Value)>> {
    let pair = |k: &Value, v| Some((text(k)?, v));
    match reply {
        Value::Map(m) => Some(m.iter().filter_map(|(k, v)| pair(k, v)).collect()),
        Value::Array(items) => Some(
            items
                .chunks(2)
                .filter_map(|kv| pair(kv.first()?, kv.get(1)?))
                .collect(),
        ),
        _ => None,
    }
}

/// The last entries of the queue's event stream for one job (newest last), when the stream is
/// on: the job's history.
pub async fn job_history(
    dep: &Deployment,
    queue: &str,
    id: &str,
    limit: usize,
) -> Result<Vec<(u64, String)>> {
    let key = format!("emq:{{{queue}}}:events");
    let mut conn = dep.routed.clone();
    let reply: Value = redis::cmd("XREVRANGE")
        .arg(&key)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(HISTORY_SCAN)
        .query_async(&mut conn)
        .await?;
    let mut out = Vec::new();
    let Value::Array(entries) = reply else {
        return Ok(out);
    };
    for entry in entries {
        let Value::Array(parts) = entry else { continue };
        let (Some(entry_id), Some(Value::Array(fields))) =
            (parts.first().and_then(text), parts.get(1))
        else {
            continue;
        };
        let fields: BTreeMap<String, String> = fields
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?)?, kv.get(1).and_then(text)?)))
            .collect();
        if fields.get("id").map(String::as_str) == Some(id) {
            let at = entry_id
                .split('-')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            out.push((at, fields.get("event").cloned().unwrap_or_default()));
            if out.len() >= limit {
                break;
            }
        }
    }
    out.reverse();
    Ok(out)
}

/// Stream entries a job's history reads back through, at most.
pub const HISTORY_SCAN: usize = 2_000;

/// A duration in the largest unit that keeps it short: 850ms, 12s, 4m, 3h, 2d.
pub fn age(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}s", ms / 1_000),
        60_000..=3_599_999 => format!("{}m", ms / 60_000),
        3_600_000..=86_399_999 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

/// Calls `command <queue> args...` (a bounded step of up to 1,000 jobs: `EMQ.PURGE <set>`,
/// `EMQ.REQUEUE DEAD`) on the queue, or on each partition of a partitioned one, until a step
/// answers 0 or as many steps as `set`'s size there at the start takes (so jobs that keep
/// arriving cannot hold it in the loop), telling `progress` how many jobs it has moved so far
/// after each step; how many it moved in all.
pub async fn drain(
    dep: &Deployment,
    queue: &str,
    command: &[&str],
    set: &str,
    mut progress: impl FnMut(i64),
) -> Result<i64> {
    let q = dep.queue(queue);
    q.width().await?;
    let args: Vec<Vec<u8>> = command[1..].iter().map(|a| a.as_bytes().to_vec()).collect();
    let mut done = 0;
    for (part, stats) in q.partition_stats().await? {
        let size = stats.get(set).copied().flatten().unwrap_or(0).max(0);
        let p = dep.queue(&part);
        for _ in 0..size / 1000 + 2 {
            let n = int(&p.call(command[0], &args).await?)?;
            if n <= 0 {
                break;
            }
            done += n;
            progress(done);
        }
    }
    Ok(done)
}

/// A reply's integer, when it is one (`EMQ.PURGE`, `EMQ.REQUEUE ... DEAD`).
pub fn int(v: &Value) -> Result<i64> {
    i64::from_redis_value_ref(v).map_err(|_| Error::Reply(format!("{v:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_whole_characters_and_says_it_cut() {
        assert_eq!(cut(b"abc", 3), ("abc".to_string(), false));
        assert_eq!(cut(b"abcd", 3), ("abc".to_string(), true));
        // "é" is two bytes: a cut between them drops its first.
        assert_eq!(cut("aé".as_bytes(), 2), ("a".to_string(), true));
        assert_eq!(
            cut(b"\xff\xfeab", 3),
            ("\u{fffd}\u{fffd}a".to_string(), true)
        );
    }
}
