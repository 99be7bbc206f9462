//! The worker's delivery of its queue's outbox: a finished child whose parent the module could
//! not reach in the same step (another slot of a cluster, or no permission) leaves a hand-over
//! in `emq:{q}:outbox`. A sweep pages it (`EMQ.OUTBOX`) and, for each entry, sends
//! `EMQ.HANDOVER` to the parent's node, then `EMQ.DELIVERED` to the child's (`ORPHAN` when the
//! parent had no room for it). With the worker's `wait_replicas`, the hand-over is followed by
//! `WAIT` on the parent's node, and the entry stays until that many of the parent's replicas
//! confirmed it: a failover of the parent's primary cannot then lose a count whose entry is
//! gone. An error leaves the entry to the next sweep: a worker stopped between the two steps
//! delays the parent, never loses it. Sweeps run every second, and again at once while the last
//! one delivered something. Each command is an event (`Handover`, `Delivered`; `Outbox` only
//! for a page read that failed), as the Python worker reports them.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Value};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::events::{answer_of, outcome_of, EventKind, EventOutcome, Fields, Hook};
use crate::queue::Queue;

/// The longest a hand-over waits in the outbox for a running worker.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Entries one `EMQ.OUTBOX` page asks for.
const PAGE: &[u8] = b"100";

/// One hand-over of the outbox: `[<cid>, <pq>, <pid>, <outcome>, <policy>, <data>]`.
struct Entry {
    child: String,
    parent_queue: Vec<u8>,
    parent: Vec<u8>,
    outcome: Vec<u8>,
    policy: Vec<u8>,
    data: Vec<u8>,
}

/// Sweeps `queue`'s outbox until `stop` is cancelled.
pub(crate) async fn deliver<C>(queue: Queue<C>, hook: Arc<Hook>, stop: CancellationToken)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    while !stop.is_cancelled() {
        let delivered = match sweep(&queue, &hook).await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, queue = %queue.name, "the outbox sweep failed");
                0
            }
        };
        // An entry that failed every time waits for the next second, not a busy loop.
        if delivered == 0 {
            tokio::select! {
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
}

/// One sweep of the outbox, from cursor 0 to the end; the entries delivered.
async fn sweep<C>(queue: &Queue<C>, hook: &Hook) -> Result<usize>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut cursor = b"0".to_vec();
    let mut delivered = 0;
    loop {
        let args = [b"CURSOR".to_vec(), cursor, b"COUNT".to_vec(), PAGE.to_vec()];
        let read = queue.send(&queue.command("EMQ.OUTBOX", &args), false).await;
        let paged = match read.reply {
            Ok(reply) => page(&reply).map_err(|e| (EventOutcome::Unknown, e)),
            Err(e) => Err((outcome_of(&e, read.unsure), e)),
        };
        let (next, entries) = match paged {
            Ok(paged) => paged,
            Err((outcome, e)) => {
                hook.emit(Fields {
                    sent_ns: read.sent_ns,
                    answered_ns: read.answered_ns,
                    outcome,
                    error: Some(e.to_string()),
                    ..Fields::at(EventKind::Outbox, "", 0, 0)
                });
                return Err(e);
            }
        };
        for entry in entries {
            if hand_over(queue, hook, &entry).await {
                delivered += 1;
            }
        }
        if next == b"0" {
            return Ok(delivered);
        }
        cursor = next;
    }
}

/// A page of `EMQ.OUTBOX`: the next cursor and the entries.
fn page(reply: &Value) -> Result<(Vec<u8>, Vec<Entry>)> {
    type Row = (String, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, Option<Vec<u8>>);
    let (next, rows) = <(Vec<u8>, Vec<Row>)>::from_redis_value_ref(reply)
        .map_err(|_| Error::Reply(format!("{reply:?}")))?;
    let entries = rows
        .into_iter()
        .map(
            |(child, parent_queue, parent, outcome, policy, data)| Entry {
                child,
                parent_queue,
                parent,
                outcome,
                policy,
                data: data.unwrap_or_default(),
            },
        )
        .collect();
    Ok((next, entries))
}

/// `EMQ.HANDOVER` to the parent's node (with `WAIT` there when the worker waits for
/// replicas), then `EMQ.DELIVERED` to the child's; whether the entry is gone. An event for each
/// command sent.
async fn hand_over<C>(queue: &Queue<C>, hook: &Hook, e: &Entry) -> bool
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut handover = Cmd::new();
    handover
        .arg("EMQ.HANDOVER")
        .arg(&e.parent_queue)
        .arg(&e.parent)
        .arg(&queue.name)
        .arg(&e.child)
        .arg(&e.outcome)
        .arg(&e.policy)
        .arg(&e.data);
    // The pipeline goes where its first key does: the parent's node, which `WAIT` then asks.
    let first = queue.send(&handover, true).await;
    let replicated = match (&first.reply, first.replicas) {
        (Ok(_), Some(n)) => Some(n >= queue.wait_replicas as i64),
        _ => None,
    };
    let orphan = match &first.reply {
        Ok(v) => match String::from_redis_value_ref(v).as_deref() {
            Ok("counted" | "duplicate") => Ok(false),
            Ok("orphan") => Ok(true),
            _ => Err((EventOutcome::Unknown, format!("unexpected reply: {v:?}"))),
        },
        Err(e) => Err((outcome_of(e, first.unsure), e.to_string())),
    };
    let (outcome, error) = match &orphan {
        Ok(_) => (EventOutcome::Ok, None),
        Err((outcome, error)) => (*outcome, Some(error.clone())),
    };
    hook.emit(Fields {
        sent_ns: first.sent_ns,
        answered_ns: first.answered_ns,
        outcome,
        error,
        replicated,
        ..Fields::at(EventKind::Handover, &e.child, 0, 0)
    });
    // Not yet on enough of the parent's replicas: the entry waits for the next sweep.
    let (Ok(orphan), None | Some(true)) = (orphan, replicated) else {
        return false;
    };
    let mut args = vec![
        e.child.clone().into_bytes(),
        e.parent_queue.clone(),
        e.parent.clone(),
    ];
    if orphan {
        args.push(b"ORPHAN".to_vec());
    }
    let second = queue
        .send(&queue.command("EMQ.DELIVERED", &args), false)
        .await;
    let (outcome, error) = answer_of(&second);
    hook.emit(Fields {
        sent_ns: second.sent_ns,
        answered_ns: second.answered_ns,
        outcome,
        error,
        ..Fields::at(EventKind::Delivered, &e.child, 0, 0)
    });
    second.reply.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_page_reads_as_its_cursor_and_entries() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = |data: Value| {
            Value::Array(vec![
                text("JOB00000000001"),
                text("reports"),
                text("JOB00000000000"),
                text("acked"),
                text("fail"),
                data,
            ])
        };
        let reply = Value::Array(vec![
            text("12"),
            Value::Array(vec![entry(text("42")), entry(Value::Nil)]),
        ]);
        let (next, entries) = page(&reply).unwrap();
        assert_eq!(next, b"12");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].child, "JOB00000000001");
        assert_eq!(entries[0].parent_queue, b"reports");
        assert_eq!(entries[0].outcome, b"acked");
        assert_eq!(entries[0].data, b"42");
        assert!(entries[1].data.is_empty());
        assert!(matches!(page(&Value::Nil), Err(Error::Reply(_))));
    }
}
