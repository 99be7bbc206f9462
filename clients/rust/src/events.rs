//! The worker's observability hook: a [`WorkerEvent`] for each job a claim returned, each
//! renewal and settle of it (with the server's answer), each start and end of its handler, its
//! cancel or its attempt's deadline learned while it ran, and each command of its sweep of the
//! queue's outbox (`Handover`, `Delivered`, and `Outbox` for a page read that failed), passed
//! to the worker's `on_event` synchronously, from the task that did it. A hook that panics is logged and
//! counted, never the worker's end. The Python and Node workers keep the same contract.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redis::ErrorKind;

use crate::error::Error;
use crate::queue::Sent;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A job a claim returned (one event a job).
    Claim,
    /// A renewal of a job's lease (`EMQ.RENEW`).
    Renew,
    /// A job's outcome sent: an acknowledgement (`EMQ.MACK`, one event a job of the batch,
    /// with that job's own answer) or a failure (`EMQ.FAIL`).
    Settle,
    /// The handler was called.
    HandlerStart,
    /// The handler ended (its failure, or its panic, in `error`).
    HandlerEnd,
    /// The job was cancelled (`EMQ.CANCEL`) while it ran: a renewal was answered
    /// `EMQCANCELLED`, and the handler's future was dropped unfinished (no `HandlerEnd`), or
    /// the settle was, after the handler ended. No outcome is sent for it (`error`: the
    /// server's refusal). The job is `dead` with the error `cancelled`; its slot is free.
    Cancelled,
    /// The attempt ran past its deadline (the job's `timeout`, or its queue's): a renewal was
    /// answered `EMQTIMEOUT`, and the handler's future was dropped unfinished (no
    /// `HandlerEnd`). No outcome is sent for it (`error`: the server's refusal). The server
    /// retries the job with backoff, or buries it in `dead`, with the error `timeout`; its
    /// slot is free.
    TimedOut,
    /// A finished child's hand-over sent to its parent's queue (`EMQ.HANDOVER`; one event an
    /// outbox entry, `id` the child's, `token` 0; with `wait_replicas`, `replicated` says
    /// whether that many of the parent's replicas confirmed it).
    Handover,
    /// The entry removed from the outbox once the parent's side had it (`EMQ.DELIVERED`; `id`
    /// the child's, `token` 0).
    Delivered,
    /// A page of the outbox whose read failed (`EMQ.OUTBOX`; `id` empty, `token` 0); a page
    /// read is not reported otherwise.
    Outbox,
}

/// What the server's answer to the command was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventOutcome {
    /// The server answered and did it (and for the handler's events, always).
    Ok,
    /// The server answered with an error for this job (a stale token, `EMQLEASE`, say): it
    /// did not happen.
    Refused,
    /// No answer came (a lost connection, a timeout), or a refusal came only after a try that
    /// got none: it may or may not have happened.
    Unknown,
}

/// What a settle sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleAction {
    Ack,
    Fail,
}

/// One event of a worker, as `on_event` gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerEvent {
    pub kind: EventKind,
    /// The worker's `name`.
    pub worker: String,
    pub queue: String,
    /// The job's id.
    pub id: String,
    /// The lease token: the attempt.
    pub token: i64,
    /// Wall-clock Unix-epoch nanoseconds when the command was sent (its first try) and when
    /// its reply (or error) came; for `HandlerStart` and `HandlerEnd` both are that moment.
    pub sent_ns: u64,
    pub answered_ns: u64,
    pub outcome: EventOutcome,
    /// The server's refusal, the lost connection, or for `HandlerEnd` the failure (or panic)
    /// the handler ended with; `None` when there was none.
    pub error: Option<String>,
    /// For `Settle`: what was sent.
    pub action: Option<SettleAction>,
    /// For `Settle` and `Handover`: `None` unless the worker has `wait_replicas`, else whether
    /// `WAIT` reported at least that many replicas.
    pub replicated: Option<bool>,
}

/// The callback `on_event` takes.
pub type OnEvent = Arc<dyn Fn(&WorkerEvent) + Send + Sync + 'static>;

/// Now, in Unix-epoch nanoseconds.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `<hostname>:<pid>:<6 random hex digits>`: unique to one worker.
pub fn default_name() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    let tag = rand::random::<u32>() & 0xff_ffff;
    format!("{host}:{}:{tag:06x}", std::process::id())
}

/// Whether an error is the server's own answer (a refusal), rather than no answer.
pub(crate) fn answered(e: &redis::RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

/// The outcome of a command that ended in `e`, `unsure` when a try before got no answer.
/// How a sent command ended, for its event: its outcome and, unless it was answered, the error.
pub(crate) fn answer_of(sent: &Sent) -> (EventOutcome, Option<String>) {
    match &sent.reply {
        Ok(_) => (EventOutcome::Ok, None),
        Err(e) => (outcome_of(e, sent.unsure), Some(e.to_string())),
    }
}

pub(crate) fn outcome_of(e: &Error, unsure: bool) -> EventOutcome {
    let refused = match e {
        Error::Redis(r) => answered(r),
        Error::Batch(_) => false,
        _ => true,
    };
    if refused && !unsure {
        EventOutcome::Refused
    } else {
        EventOutcome::Unknown
    }
}

/// A worker's hook: its callback (if any), the names every event carries, and how many times
/// the callback panicked.
pub(crate) struct Hook {
    on_event: Option<OnEvent>,
    worker: String,
    queue: String,
    panics: AtomicU64,
}

/// The fields of an event a call site fills in; the hook adds the names.
pub(crate) struct Fields<'a> {
    pub kind: EventKind,
    pub id: &'a str,
    pub token: i64,
    pub sent_ns: u64,
    pub answered_ns: u64,
    pub outcome: EventOutcome,
    pub error: Option<String>,
    pub action: Option<SettleAction>,
    pub replicated: Option<bool>,
}

impl Fields<'_> {
    /// A handler's event: both times `at`, no answer to wait for.
    pub(crate) fn at(kind: EventKind, id: &str, token: i64, at: u64) -> Fields<'_> {
        Fields {
            kind,
            id,
            token,
            sent_ns: at,
            answered_ns: at,
            outcome: EventOutcome::Ok,
            error: None,
            action: None,
            replicated: None,
        }
    }
}

impl Hook {
    pub(crate) fn new(on_event: Option<OnEvent>, worker: &str, queue: &str) -> Hook {
        Hook {
            on_event,
            worker: worker.to_string(),
            queue: queue.to_string(),
            panics: AtomicU64::new(0),
        }
    }

    /// Calls the callback with the event; a panic in it is logged and counted.
    pub(crate) fn emit(&self, f: Fields<'_>) {
        let Some(on_event) = &self.on_event else {
            return;
        };
        let event = WorkerEvent {
            kind: f.kind,
            worker: self.worker.clone(),
            queue: self.queue.clone(),
            id: f.id.to_string(),
            token: f.token,
            sent_ns: f.sent_ns,
            answered_ns: f.answered_ns,
            outcome: f.outcome,
            error: f.error,
            action: f.action,
            replicated: f.replicated,
        };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| on_event(&event))) {
            self.panics.fetch_add(1, Ordering::SeqCst);
            let message = crate::unwind::panic_message(payload.as_ref());
            tracing::warn!(panic = %message, ?event, "the on_event hook panicked; the worker goes on");
        }
    }

    /// How many times the callback panicked.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::SeqCst)
    }
}
