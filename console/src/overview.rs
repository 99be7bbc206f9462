//! What the console shows, read from the server: each queue's counts, a page of a set's jobs,
//! one job, and a rolling minute of samples the rates and sparklines come from. `emq`'s plain
//! commands, `emq top` and `emq web` all read through here.

use std::collections::{BTreeMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use echomq_client::ids;

use crate::error::{Error, Result};
use redis::{FromRedisValue, Value};
use serde::Serialize;

use crate::deployment::{page, Deployment};

/// The sets `EMQ.JOBS` pages through.
pub const SETS: [&str; 4] = ["pending", "active", "scheduled", "dead"];
/// How long the rates and sparklines look back.
pub const WINDOW_MS: u64 = 60_000;
/// Samples a history keeps at most, whatever the refresh interval.
const MAX_SAMPLES: usize = 600;

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
    pub paused: bool,
    /// How long the job first in line has waited since its id was minted (ms).
    pub oldest_pending_ms: Option<u64>,
    /// Why the queue could not be read (a key of another type, say); the counts are then 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The queue's transitions since the previous sample, read from its event stream; `None`
    /// while the stream is off (`EMQ.EVENTS <queue> ON` turns it on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
}

/// Transitions of one queue between two samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Flow {
    pub enqueued: u64,
    pub claimed: u64,
    pub acked: u64,
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

/// Stream entries one sample reads of a queue, at most: a queue busier than that between two
/// samples shows a floor of its rate.
pub const FLOW_READ: usize = 10_000;

impl QueueRow {
    pub fn count(&self, set: &str) -> i64 {
        match set {
            "pending" => self.pending,
            "active" => self.active,
            "scheduled" => self.scheduled,
            "dead" => self.dead,
            _ => 0,
        }
    }
}

/// One job of a page of `EMQ.JOBS ... WITHPAYLOADS`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobEntry {
    pub id: String,
    /// Its score in the set: priority in `pending`, due time in `scheduled`, lease deadline in
    /// `active`, time of death in `dead`.
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

fn text(v: &Value) -> Option<String> {
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

/// The queue's counts and the age of its first pending job.
pub async fn queue_row(dep: &Deployment, name: &str, now: u64) -> Result<QueueRow> {
    let stats = dep.queue(name).stats().await?;
    let get = |k: &str| stats.get(k).copied().flatten().unwrap_or(0);
    let mut row = QueueRow {
        name: name.to_string(),
        pending: get("pending"),
        active: get("active"),
        scheduled: get("scheduled"),
        dead: get("dead"),
        paused: get("paused") == 1,
        oldest_pending_ms: None,
        error: None,
        flow: None,
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
    let mut args = vec![
        set.as_bytes().to_vec(),
        b"CURSOR".to_vec(),
        cursor.as_bytes().to_vec(),
        b"COUNT".to_vec(),
        count.to_string().into_bytes(),
    ];
    if with_payloads {
        args.push(b"WITHPAYLOADS".to_vec());
    }
    let reply = dep.queue(queue).call("EMQ.JOBS", &args).await?;
    let (next, _) = page(&reply)?;
    let Value::Array(parts) = &reply else {
        return Err(Error::Reply(format!("{reply:?}")));
    };
    let mut out = Vec::new();
    if let Some(Value::Array(items)) = parts.get(1) {
        for item in items {
            let Value::Array(fields) = item else { continue };
            let field = |i: usize| fields.get(i).and_then(text);
            let Some(id) = field(0) else { continue };
            let payload = fields.get(3).and_then(bytes).unwrap_or_default();
            out.push(JobEntry {
                id,
                score: fields.get(1).map_or(0, number),
                attempts: fields.get(2).map_or(0, number),
                payload: cut(&payload, limit).0,
                payload_bytes: payload.len(),
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
    let pairs: Vec<(String, Vec<u8>)> = match &reply {
        Value::Nil => return Ok(None),
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| (text(k).unwrap_or_default(), bytes(v).unwrap_or_default()))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| {
                Some((
                    text(kv.first()?)?,
                    kv.get(1).and_then(bytes).unwrap_or_default(),
                ))
            })
            .collect(),
        other => return Err(Error::Reply(format!("{other:?}"))),
    };
    Ok(Some(pairs))
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

/// The deployment at one moment: its queues and its summed `INFO emq` counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub at_ms: u64,
    pub queues: Vec<QueueRow>,
    pub counters: BTreeMap<String, i64>,
    /// Why there are no counters: a user who may not run `INFO` sees the queues without them.
    pub counters_error: Option<String>,
}

/// Takes the samples of one view: it remembers where it last read each queue's event stream.
#[derive(Default)]
pub struct Sampler {
    cursors: BTreeMap<String, String>,
    /// When the previous sample was taken: a stream first seen now is read from then.
    last_at: Option<u64>,
}

impl Sampler {
    pub async fn sample(&mut self, dep: &Deployment) -> Result<Sample> {
        let at_ms = now_ms();
        let mut queues = overview(dep).await?;
        for q in &mut queues {
            q.flow = self.flow(dep, &q.name).await;
        }
        let (counters, counters_error) = match dep.counters().await {
            Ok(c) => (c, None),
            Err(e) => (BTreeMap::new(), Some(e.to_string())),
        };
        self.last_at = Some(at_ms);
        Ok(Sample {
            at_ms,
            queues,
            counters,
            counters_error,
        })
    }

    /// The queue's transitions since this sampler last looked, from its event stream; `None`
    /// when it has no stream (or may not read it). A stream first seen is read from the
    /// previous sample on (from now, at the first sample).
    async fn flow(&mut self, dep: &Deployment, queue: &str) -> Option<Flow> {
        let key = format!("emq:{{{queue}}}:events");
        let mut conn = dep.routed.clone();
        let cursor = match (self.cursors.get(queue), self.last_at) {
            (Some(c), _) => c.clone(),
            (None, Some(at)) => format!("{at}-0"),
            (None, None) => {
                if !exists(&mut conn, &key).await? {
                    return None;
                }
                self.cursors
                    .insert(queue.to_string(), format!("{}-0", now_ms()));
                return Some(Flow::default());
            }
        };
        let reply: Value = redis::cmd("XRANGE")
            .arg(&key)
            .arg(format!("({cursor}"))
            .arg("+")
            .arg("COUNT")
            .arg(FLOW_READ)
            .query_async(&mut conn)
            .await
            .ok()?;
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut flow = Flow::default();
        for entry in &entries {
            let Value::Array(parts) = entry else { continue };
            if let Some(id) = parts.first().and_then(text) {
                self.cursors.insert(queue.to_string(), id);
            }
            let Some(Value::Array(fields)) = parts.get(1) else {
                continue;
            };
            let event = fields
                .chunks(2)
                .find(|kv| kv.first().and_then(text).as_deref() == Some("event"))
                .and_then(|kv| kv.get(1).and_then(text));
            match event.as_deref() {
                Some("enqueued") => flow.enqueued += 1,
                Some("claimed") => flow.claimed += 1,
                Some("acked") => flow.acked += 1,
                _ => {}
            }
        }
        if entries.is_empty() && !exists(&mut conn, &key).await? {
            self.cursors.remove(queue);
            return None;
        }
        Some(flow)
    }
}

/// Whether `key` exists; `None` when the server would not say (a user without permission).
async fn exists(conn: &mut crate::deployment::Routed, key: &str) -> Option<bool> {
    let n: i64 = redis::cmd("EXISTS").arg(key).query_async(conn).await.ok()?;
    Some(n == 1)
}

/// The counters whose rates the console shows, with their labels.
pub const RATES: [(&str, &str); 3] = [
    ("emq_enqueued", "enqueued"),
    ("emq_claimed", "claimed"),
    ("emq_acked", "acked"),
];

/// The last minute of samples, oldest first.
#[derive(Clone, Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    pub fn push(&mut self, sample: Sample) {
        let horizon = sample.at_ms.saturating_sub(WINDOW_MS);
        self.samples.push_back(sample);
        while self.samples.len() > MAX_SAMPLES
            || (self.samples.len() > 2 && self.samples.get(1).is_some_and(|s| s.at_ms <= horizon))
        {
            self.samples.pop_front();
        }
    }

    pub fn latest(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// A counter's rate per second over the window (`None` before two samples). A counter that
    /// went down was reset (a restarted server, a failover) and counts again from 0.
    pub fn rate(&self, counter: &str) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        last.counters.get(counter)?;
        let seconds = last.at_ms.checked_sub(first.at_ms)? as f64 / 1000.0;
        if seconds <= 0.0 {
            return None;
        }
        Some(self.increases(counter).iter().sum::<i64>() as f64 / seconds)
    }

    /// A counter's rate per second between each two samples, oldest first.
    pub fn rate_series(&self, counter: &str) -> Vec<f64> {
        let gaps = self
            .samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| b.at_ms.saturating_sub(a.at_ms).max(1) as f64 / 1000.0);
        self.increases(counter)
            .into_iter()
            .zip(gaps)
            .map(|(delta, seconds)| delta as f64 / seconds)
            .collect()
    }

    /// How much a counter grew between each two samples, a reset counting from 0.
    fn increases(&self, counter: &str) -> Vec<i64> {
        let get = |s: &Sample| s.counters.get(counter).copied().unwrap_or(0);
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| {
                if get(b) >= get(a) {
                    get(b) - get(a)
                } else {
                    get(b)
                }
            })
            .collect()
    }

    /// One queue's rate of one event (`enqueued`, `claimed`, `acked`) per second over the
    /// window, from its event stream; `None` while the stream is off.
    pub fn queue_rate(&self, queue: &str, event: &str) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        let flow_of = |s: &Sample| {
            s.queues
                .iter()
                .find(|q| q.name == queue)
                .and_then(|q| q.flow)
        };
        flow_of(last)?;
        let seconds = last.at_ms.checked_sub(first.at_ms)? as f64 / 1000.0;
        if seconds <= 0.0 {
            return None;
        }
        let total: u64 = self
            .samples
            .iter()
            .skip(1)
            .filter_map(flow_of)
            .map(|f| f.get(event))
            .sum();
        Some(total as f64 / seconds)
    }

    /// One queue's rate of one event between each two samples, oldest first (0 where its
    /// stream was off).
    pub fn queue_rate_series(&self, queue: &str, event: &str) -> Vec<f64> {
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| {
                let seconds = b.at_ms.saturating_sub(a.at_ms).max(1) as f64 / 1000.0;
                let n = b
                    .queues
                    .iter()
                    .find(|q| q.name == queue)
                    .and_then(|q| q.flow)
                    .map_or(0, |f| f.get(event));
                n as f64 / seconds
            })
            .collect()
    }

    /// One queue's count of one set at each sample, oldest first.
    pub fn backlog_series(&self, queue: &str, set: &str) -> Vec<f64> {
        self.samples
            .iter()
            .map(|s| {
                s.queues
                    .iter()
                    .find(|q| q.name == queue)
                    .map_or(0.0, |q| q.count(set) as f64)
            })
            .collect()
    }
}

/// A reply's integer, when it is one (`EMQ.PURGE`, `EMQ.REQUEUE ... DEAD`).
pub fn int(v: &Value) -> Result<i64> {
    i64::from_redis_value_ref(v).map_err(|_| Error::Reply(format!("{v:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, enqueued: i64, pending: i64) -> Sample {
        Sample {
            at_ms: ms,
            queues: vec![QueueRow {
                name: "q".into(),
                pending,
                ..QueueRow::default()
            }],
            counters: [("emq_enqueued".to_string(), enqueued)].into(),
            counters_error: None,
        }
    }

    fn with_flow(ms: u64, acked: Option<u64>) -> Sample {
        Sample {
            at_ms: ms,
            queues: vec![QueueRow {
                name: "q".into(),
                flow: acked.map(|acked| Flow {
                    acked,
                    ..Flow::default()
                }),
                ..QueueRow::default()
            }],
            ..Sample::default()
        }
    }

    #[test]
    fn rates_are_over_the_window_and_a_reset_counter_counts_from_zero() {
        let mut h = History::default();
        assert_eq!(h.rate("emq_enqueued"), None);
        h.push(at(1_000, 0, 0));
        h.push(at(2_000, 10, 5));
        h.push(at(3_000, 30, 7));
        assert_eq!(h.rate("emq_enqueued"), Some(15.0));
        assert_eq!(h.rate_series("emq_enqueued"), vec![10.0, 20.0]);
        assert_eq!(h.backlog_series("q", "pending"), vec![0.0, 5.0, 7.0]);
        h.push(at(4_000, 3, 0));
        assert_eq!(h.rate("emq_enqueued"), Some(11.0));
        assert_eq!(h.rate_series("emq_enqueued"), vec![10.0, 20.0, 3.0]);
    }

    #[test]
    fn a_queue_s_rates_come_from_its_flows_and_are_none_while_its_stream_is_off() {
        let mut h = History::default();
        h.push(with_flow(0, None));
        assert_eq!(h.queue_rate("q", "acked"), None);
        h.push(with_flow(1_000, Some(0)));
        h.push(with_flow(2_000, Some(6)));
        h.push(with_flow(3_000, Some(3)));
        assert_eq!(h.queue_rate("q", "acked"), Some(3.0));
        assert_eq!(h.queue_rate_series("q", "acked"), vec![0.0, 6.0, 3.0]);
        assert_eq!(h.queue_rate("other", "acked"), None);
    }

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

    #[test]
    fn a_history_keeps_one_minute() {
        let mut h = History::default();
        for s in 0..200 {
            h.push(at(s * 1_000, s as i64, 0));
        }
        let first = h.samples.front().map(|s| s.at_ms).unwrap_or_default();
        assert_eq!(first, 199_000 - WINDOW_MS);
        assert_eq!(h.rate("emq_enqueued"), Some(1.0));
    }
}
