//! The worker's settlers, one a queue: acknowledgements batched into one `EMQ.MACK` (followed
//! by `WAIT` with `wait_replicas`), each job's own outcome handed back to its task and reported
//! to the hook. A partitioned queue's jobs are acknowledged in their partitions, each apart.

use std::collections::HashMap;
use std::sync::Arc;

use redis::aio::ConnectionLike;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::events::{outcome_of, EventKind, EventOutcome, Fields, Hook, SettleAction};
use crate::queue::{places, Queue, Sent};
use crate::worker::SETTLE_BATCH;

/// An acknowledgement on its way to the settler, and where its job's outcome comes back.
pub(crate) struct Ack {
    /// The queue the job was claimed from.
    pub queue: String,
    pub id: String,
    pub attempt: i64,
    pub result: Option<Vec<u8>>,
    pub outcome: oneshot::Sender<Result<()>>,
}

/// The settler: hands each acknowledgement to its queue's own settler (a partitioned queue's
/// are its partitions'), started at the first, so a queue whose primary fails over holds up no
/// other queue's settles. Each ends once the worker's acknowledgements end and it has sent its
/// own.
pub(crate) async fn send_acks<C>(
    queue: Queue<C>,
    mut waiting: mpsc::UnboundedReceiver<Ack>,
    hook: Arc<Hook>,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut settlers: HashMap<String, mpsc::UnboundedSender<Ack>> = HashMap::new();
    while let Some(ack) = waiting.recv().await {
        let to = settlers.entry(ack.queue.clone()).or_insert_with(|| {
            let (to, from) = mpsc::unbounded_channel();
            let at = match ack.queue == queue.name {
                true => queue.clone(),
                false => queue.at(ack.queue.clone()),
            };
            tokio::spawn(settle_queue(at, from, hook.clone()));
            to
        });
        if let Err(mpsc::error::SendError(ack)) = to.send(ack) {
            let _ = ack
                .outcome
                .send(Err(Error::Batch("the settler stopped".into())));
        }
    }
}

/// One queue's settler: sends the acknowledgements waiting, up to [`SETTLE_BATCH`], as one
/// `EMQ.MACK` (followed by `WAIT` with `wait_replicas`), while the tasks behind them wait for
/// their outcomes; under load one call carries many, alone it carries one.
async fn settle_queue<C>(
    queue: Queue<C>,
    mut waiting: mpsc::UnboundedReceiver<Ack>,
    hook: Arc<Hook>,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    while let Some(first) = waiting.recv().await {
        let mut batch = vec![first];
        while batch.len() < SETTLE_BATCH {
            match waiting.try_recv() {
                Ok(ack) => batch.push(ack),
                Err(_) => break,
            }
        }
        settle(&queue, batch, &hook).await;
    }
}

/// One `EMQ.MACK` of `batch`, all of `queue`; each job's outcome sent back, and its event.
async fn settle<C>(queue: &Queue<C>, batch: Vec<Ack>, hook: &Hook)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    {
        let jobs: Vec<(&str, i64, Option<&[u8]>)> = batch
            .iter()
            .map(|a| (a.id.as_str(), a.attempt, a.result.as_deref()))
            .collect();
        let sent = queue.mack(&jobs, true).await;
        drop(jobs);
        let (unsure, replicated) = (sent.unsure, replicated(queue, &sent));
        let (sent_ns, answered_ns) = (sent.sent_ns, sent.answered_ns);
        // Each job's outcome, and what the server's answer was for it.
        let outcomes: Vec<(Result<()>, EventOutcome)> = match places(sent.reply) {
            Ok(places) if places.len() == batch.len() => places
                .into_iter()
                .map(|place| {
                    let outcome = match &place {
                        Ok(()) => EventOutcome::Ok,
                        Err(e) => outcome_of(e, unsure),
                    };
                    (place, outcome)
                })
                .collect(),
            Ok(places) => {
                let why = format!("{} places for {} jobs", places.len(), batch.len());
                let e = || Err(Error::Reply(why.clone()));
                batch.iter().map(|_| (e(), EventOutcome::Unknown)).collect()
            }
            Err(Error::Payload(_)) if batch.len() > 1 => {
                // One result larger than the server takes refuses the whole call, and nothing
                // of it was written: each job is acknowledged alone, so only that one's is
                // refused.
                for ack in batch {
                    Box::pin(settle(queue, vec![ack], hook)).await;
                }
                return;
            }
            Err(e) if batch.len() == 1 => {
                let outcome = outcome_of(&e, unsure);
                vec![(Err(e), outcome)]
            }
            Err(e) => {
                // The call failed as a whole: its answer stands for each job.
                let outcome = outcome_of(&e, unsure);
                let why = e.to_string();
                let e = || Err(Error::Batch(why.clone()));
                batch.iter().map(|_| (e(), outcome)).collect()
            }
        };
        for (ack, (place, outcome)) in batch.into_iter().zip(outcomes) {
            hook.emit(Fields {
                sent_ns,
                answered_ns,
                outcome,
                error: place.as_ref().err().map(|e| e.to_string()),
                action: Some(SettleAction::Ack),
                replicated,
                ..Fields::at(EventKind::Settle, &ack.id, ack.attempt, 0)
            });
            let _ = ack.outcome.send(place);
        }
    }
}

/// Whether a settle's wait confirmed the worker's `wait_replicas` (`None` without a wait).
pub(crate) fn replicated<C>(queue: &Queue<C>, sent: &Sent) -> Option<bool> {
    sent.replicas.map(|r| r >= queue.wait_replicas as i64)
}
