//! Enqueueing: one job or a batch, each to its partition on a partitioned queue (learning the
//! width from a refusal), a child adopted first by its parents out of reach.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;
use redis::Value;

use crate::error::{Error, Result};
use crate::flow::{self, Parent};
use crate::headers;
use crate::ids;
use crate::partition::route;
use crate::slot::slot;
use crate::trace;

use crate::queue::{millis, timeout_ms, Queue};

/// Jobs one `EMQ.MENQUEUE` carries (the server takes up to 10,000).
pub const CHUNK: usize = 1000;
/// Times one enqueue routes its jobs again after an `EMQSPANNED` refusal taught it a width.
pub const REROUTES: u32 = 2;

/// How an enqueue places its job.
#[derive(Clone, Debug, Default)]
pub struct Enqueue {
    /// The job's id; minted here when `None`, so a retried call stays one job.
    pub id: Option<String>,
    /// Due after this long.
    pub delay: Option<Duration>,
    /// Due at this time (`AT`, unix ms; a time past is due now). With `delay` too, refused
    /// before anything is sent ([`Error::Argument`]).
    pub at: Option<SystemTime>,
    /// Ahead of (lower) or behind (higher) the default 0.
    pub priority: Option<i64>,
    /// Written only while no job holds this key (then the holder's id is the answer), for
    /// `unique_for` or until the holder is done or dead.
    pub unique: Option<String>,
    pub unique_for: Option<Duration>,
    /// The job's limit on one attempt, counted from its claim (`TIMEOUT <ms>`, 1 ms to 365
    /// days, sent rounded to the nearest ms): past it the server ends the attempt (a retry, or
    /// `dead`, with the error `timeout`). A positive timeout under half a ms is refused before
    /// anything is sent ([`Error::Argument`]). `None`: the queue's default
    /// ([`Limit::timeout`](crate::Limit::timeout)), if any.
    pub timeout: Option<Duration>,
    /// The job's group in its queue (`GROUP <group>`; a tenant, say): claims take the groups
    /// with ready jobs in turn, the jobs without one (the default group) being one more, and
    /// priorities order the jobs within a group. 1 to 128 bytes of printable ASCII without `{`
    /// or `}`, which the server checks. The row's `group` names it ([`Queue::job`]). `None`:
    /// the default group.
    pub group: Option<String>,
    /// Headers that go with the job to each attempt ([`Job::headers`](crate::Job::headers)):
    /// at most 32, each key 1 to 64 letters, digits or ``!#$%&'*+-.^_`|~``, each value up to
    /// 8,192 bytes without CR or LF (the server checks them). With the `otel` feature, the
    /// current trace context is added (these win).
    pub headers: Vec<(String, String)>,
    /// A parent: it waits (`waiting`, never claimed) until this many children have finished.
    pub children: Option<u32>,
    /// The parents this job is a child of, at most [`MAX_PARENTS`](crate::flow::MAX_PARENTS).
    pub parents: Vec<Parent>,
}

/// A job of [`Queue::enqueue_bulk`]: its payload, its id (minted when `None`), its priority
/// and its headers ([`Enqueue`]'s).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BulkJob {
    pub payload: Vec<u8>,
    pub id: Option<String>,
    pub priority: Option<i64>,
    pub headers: Vec<(String, String)>,
}

impl BulkJob {
    pub fn new(payload: impl AsRef<[u8]>) -> BulkJob {
        BulkJob {
            payload: payload.as_ref().to_vec(),
            ..BulkJob::default()
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Enqueues one job now; its id.
    pub async fn enqueue(&self, payload: impl AsRef<[u8]>) -> Result<String> {
        self.enqueue_with(payload, Enqueue::default()).await
    }

    /// Enqueues one job as `how` says; its id, or the holder's for a held unique key. A child
    /// is adopted first by each parent whose queue's slot is not this queue's (`EMQ.ADOPT`).
    /// On a partitioned queue the job goes to the partition of its group, else its id; a
    /// refusal with a width (`EMQSPANNED`) teaches it, and the job is sent again where it
    /// routes then, up to [`REROUTES`] times ([`Error::Spanned`] after that). A child that is
    /// to be adopted reads the queue's width first (`EMQ.WIDTH`, once a call and again after a
    /// refusal), so that its parents register it where it goes, not where a width not yet
    /// learned, or learned before the queue was spanned again, would send it (a parent would
    /// wait for ever for a child registered where none is written).
    pub async fn enqueue_with(&self, payload: impl AsRef<[u8]>, how: Enqueue) -> Result<String> {
        let (id, _) = self
            .enqueue_to(payload.as_ref(), how, &mut false, true)
            .await?;
        Ok(id)
    }

    /// Whether a job with this key (its group, else its id) is adopted by one of `parents`
    /// where the width known sends it: a parent whose slot is not that queue's.
    fn adopts(&self, parents: &[Parent], key: &str) -> bool {
        let here = slot(&self.placed(key).name);
        parents.iter().any(|p| slot(&p.queue) != here)
    }

    /// [`Queue::enqueue_with`]: the job's id and the queue it went to (its partition, on a
    /// partitioned queue). `read`: whether the width was read for this call already (a flow
    /// reads each queue's once); `resolve`: whether the parents name their queues, each to be
    /// resolved to the partition that holds the parent ([`Parent`]), rather than the queue
    /// each went to.
    pub(crate) async fn enqueue_to(
        &self,
        payload: &[u8],
        how: Enqueue,
        read: &mut bool,
        resolve: bool,
    ) -> Result<(String, String)> {
        flow::check(&how.parents)?;
        if how.delay.is_some() && how.at.is_some() {
            return Err(Error::Argument(
                "give a delay or a time (at), not both".into(),
            ));
        }
        let timeout = how.timeout.map(timeout_ms).transpose()?;
        let id = how.id.unwrap_or_else(ids::mint);
        let key = how.group.clone().unwrap_or_else(|| id.clone());
        let mut args = vec![id.clone().into_bytes(), payload.to_vec()];
        let ms = |d: Duration| millis(d).to_string().into_bytes();
        if let Some(d) = how.delay {
            args.extend([b"DELAY".to_vec(), ms(d)]);
        }
        if let Some(at) = how.at {
            args.extend([b"AT".to_vec(), unix_ms(at)?.to_string().into_bytes()]);
        }
        if let Some(p) = how.priority {
            args.extend([b"PRIORITY".to_vec(), p.to_string().into_bytes()]);
        }
        if let Some(key) = how.unique {
            args.extend([b"UNIQUE".to_vec(), key.into_bytes()]);
            if let Some(d) = how.unique_for {
                args.extend([b"FOR".to_vec(), ms(d)]);
            }
        }
        if let Some(t) = timeout {
            args.extend([b"TIMEOUT".to_vec(), t.to_string().into_bytes()]);
        }
        if let Some(group) = how.group {
            args.extend([b"GROUP".to_vec(), group.into_bytes()]);
        }
        let mut sending = trace::Sending::start(&self.name, how.headers);
        args.extend(headers::args(&sending.headers)?);
        let mut parents = match resolve {
            true => self.resolve(&how.parents, false).await?,
            false => how.parents.clone(),
        };
        // A parent not found where a width kept sends it is looked for again, once, by the
        // parent queues' widths read anew.
        let mut looked_again = !resolve || parents.is_empty();
        let mut reroutes = 0;
        let (replicas, reply, went) = loop {
            if !*read && self.adopts(&parents, &key) {
                self.width().await?;
                *read = true;
            }
            let at = self.placed(&key);
            let refused = match at.adopt(&parents, &id).await {
                Err(e) => e,
                Ok(()) => {
                    let mut args = args.clone();
                    args.extend(flow::options(how.children, &parents));
                    let sent = at.send(&at.command("EMQ.ENQUEUE", &args), true).await;
                    match sent.reply {
                        Ok(reply) => break (sent.replicas, reply, at.name.clone()),
                        Err(e) => e,
                    }
                }
            };
            match refused {
                Error::Spanned { width, .. } if reroutes < REROUTES && self.relearn(width) => {
                    reroutes += 1;
                    *read = false;
                }
                Error::Parent(_) if !looked_again => {
                    looked_again = true;
                    parents = self.resolve(&how.parents, true).await?;
                }
                e @ Error::Parent(_) => {
                    return Ok((at.enqueued_before(e, id).await?, at.name.clone()))
                }
                e => return Err(e),
            }
        };
        let id = match reply {
            // 1: written; 0: this id was enqueued already; an id: the unique key's holder.
            Value::Int(_) => id,
            Value::BulkString(holder) => String::from_utf8_lossy(&holder).into_owned(),
            other => return Err(Error::Reply(format!("{other:?}"))),
        };
        sending.sent(&id);
        match self.confirmed(replicas) {
            Ok(()) => Ok((id, went)),
            Err(replicas) => Err(Error::NotReplicated {
                ids: vec![id.clone()],
                replicas,
                wanted: self.wait_replicas,
                enqueued: vec![id],
            }),
        }
    }

    /// A child's enqueue a parent refused (`EMQPARENT`), when the child exists already: the
    /// retry of an enqueue that was written (its parents registered it then) after the parent
    /// stopped waiting, which answers as the duplicate it is. Any other error stands.
    async fn enqueued_before(&self, e: Error, id: String) -> Result<String> {
        match e {
            Error::Parent(_) if self.job(&id).await?.is_some() => Ok(id),
            e => Err(e),
        }
    }

    /// Enqueues every payload, `CHUNK` to an atomic `EMQ.MENQUEUE`; their ids, in order. With
    /// `wait_replicas`, each chunk waits, and the chunks not confirmed make the call's
    /// [`Error::NotReplicated`] (every chunk enqueued still). `EMQ.MENQUEUE` takes no options
    /// but a priority and headers, so these jobs have no timeout of their own (the queue's
    /// applies) and no group (they are the default group's). On a partitioned queue the jobs
    /// are split by partition (each by its id), a call or more to each; a chunk refused with a
    /// width (`EMQSPANNED`) teaches it, and the jobs not yet written are routed again, up to
    /// [`REROUTES`] times (the ids are minted here, so a job sent twice is written once).
    pub async fn enqueue_many<P: AsRef<[u8]>>(
        &self,
        payloads: impl IntoIterator<Item = P>,
    ) -> Result<Vec<String>> {
        self.enqueue_many_with(payloads, Vec::new()).await
    }

    /// [`Queue::enqueue_many`], each job with `headers` ([`Enqueue::headers`]; with the `otel`
    /// feature, the call's trace context is added).
    pub async fn enqueue_many_with<P: AsRef<[u8]>>(
        &self,
        payloads: impl IntoIterator<Item = P>,
        headers: Vec<(String, String)>,
    ) -> Result<Vec<String>> {
        let sending = trace::Sending::start(&self.name, headers);
        let each = headers::args(&sending.headers)?;
        let jobs = payloads.into_iter().map(|p| {
            let id = ids::mint();
            let mut part = each.clone();
            part.extend([id.clone().into_bytes(), p.as_ref().to_vec()]);
            (id, part)
        });
        self.menqueue_all(jobs.collect()).await
    }

    /// [`Queue::enqueue_many`] of jobs each with its own id (minted where `None`: a job given
    /// its id and sent again is written once), priority and headers (beside the call's trace
    /// context, with the `otel` feature; the job's win).
    pub async fn enqueue_bulk(
        &self,
        jobs: impl IntoIterator<Item = BulkJob>,
    ) -> Result<Vec<String>> {
        let sending = trace::Sending::start(&self.name, Vec::new());
        // Every job is checked before the first is sent: a bad one at the end writes none.
        let jobs = jobs.into_iter().map(|job| {
            crate::flow::check_when(job.priority, None, None)?;
            let id = job.id.unwrap_or_else(ids::mint);
            let mut part = Vec::new();
            if let Some(p) = job.priority {
                part.extend([b"PRIORITY".to_vec(), p.to_string().into_bytes()]);
            }
            let own = headers::merged(sending.headers.clone(), job.headers);
            part.extend(headers::args(&own)?);
            part.extend([id.clone().into_bytes(), job.payload]);
            Ok((id, part))
        });
        self.menqueue_all(jobs.collect::<Result<_>>()?).await
    }

    /// Sends `jobs` (each its id and its part of an `EMQ.MENQUEUE`) as the calls of
    /// [`Queue::enqueue_many`] do; their ids, in order.
    async fn menqueue_all(&self, jobs: Vec<(String, Vec<Vec<u8>>)>) -> Result<Vec<String>> {
        let mut unconfirmed = Vec::new();
        let mut fewest: Option<i64> = None;
        // Which jobs are written, and the reroutes so far.
        let mut written = vec![false; jobs.len()];
        let mut reroutes = 0;
        'routing: loop {
            let todo: Vec<usize> = (0..jobs.len()).filter(|&i| !written[i]).collect();
            if todo.is_empty() {
                break;
            }
            let chunks = self.chunks(&todo, |i| jobs[i].0.as_str());
            for (at, chunk) in &chunks {
                let mut args = Vec::new();
                for &i in chunk {
                    args.extend(jobs[i].1.iter().cloned());
                }
                match at.menqueue(args).await {
                    Ok(confirmed) => {
                        if let Some(r) = confirmed {
                            fewest = Some(fewest.map_or(r, |f: i64| f.min(r)));
                            unconfirmed.extend(chunk.iter().map(|&i| jobs[i].0.clone()));
                        }
                        chunk.iter().for_each(|&i| written[i] = true);
                    }
                    Err(Error::Spanned { width, .. })
                        if reroutes < REROUTES && self.relearn(width) =>
                    {
                        reroutes += 1;
                        continue 'routing;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let out: Vec<String> = jobs.into_iter().map(|(id, _)| id).collect();
        match fewest {
            None => Ok(out),
            Some(replicas) => Err(Error::NotReplicated {
                ids: unconfirmed,
                replicas,
                wanted: self.wait_replicas,
                enqueued: out,
            }),
        }
    }

    /// The jobs `todo` (their places, in order) by the queue each goes to, by the width known
    /// (by the id `id_of` each), [`CHUNK`] to a call, each queue's first place first.
    fn chunks<'a>(
        &self,
        todo: &[usize],
        id_of: impl Fn(usize) -> &'a str,
    ) -> Vec<(Queue<C>, Vec<usize>)> {
        let width = self.width.known().unwrap_or(0);
        let mut by_queue: Vec<Vec<usize>> = Vec::new();
        let mut slot_of: HashMap<u16, usize> = HashMap::new();
        for &i in todo {
            let part = if width > 0 { route(width, id_of(i)) } else { 0 };
            let at = *slot_of.entry(part).or_insert_with(|| {
                by_queue.push(Vec::new());
                by_queue.len() - 1
            });
            by_queue[at].push(i);
        }
        by_queue
            .into_iter()
            .flat_map(|places| {
                let at = self.placed(id_of(places[0])).into_owned();
                let chunks: Vec<Vec<usize>> = places.chunks(CHUNK).map(<[usize]>::to_vec).collect();
                chunks.into_iter().map(move |c| (at.clone(), c))
            })
            .collect()
    }
}
/// `at` as unix ms, as `AT` takes it; a time before 1970 is refused ([`Error::Argument`]).
pub(crate) fn unix_ms(at: SystemTime) -> Result<u64> {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
        .map_err(|_| Error::Argument("a time before 1970".into()))
}
