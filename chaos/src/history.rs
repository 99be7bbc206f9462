//! The history a phase records: every enqueue, every flow built (each try of each of its
//! writes), and every claim, renewal, settle and handler run of the workers (the shipped
//! clients', through their `on_event` hook), each with its send and answer times on one clock
//! (wall-clock Unix-epoch nanoseconds).

use std::sync::{Arc, Mutex};

/// How an operation ended: the server answered, refused it, or the answer never came (it may
/// or may not have happened).
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Ok,
    Refused(String),
    Unknown(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Claim,
    Renew,
    Settle,
    HandlerStart,
    HandlerEnd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Ack,
    Fail,
}

/// One worker-side event, one job each (a claim of five jobs is five events with the same
/// times). For a handler's start and end, `sent_ns` and `answered_ns` are both the moment.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: Kind,
    pub worker: String,
    pub queue: String,
    pub id: String,
    /// The token a claim returned, or the one a renewal or settle sent.
    pub token: i64,
    pub sent_ns: u64,
    pub answered_ns: u64,
    pub outcome: Outcome,
    /// Settles only.
    pub action: Option<Action>,
    /// Whether a replica confirmed the write (`WAIT 1` after it), where the worker asked.
    pub replicated: Option<bool>,
}

/// `EMQ.ENQUEUE <queue> * <payload>`, then `WAIT 1`: `replicated` when a replica had it.
#[derive(Clone, Debug)]
pub struct Enqueue {
    pub queue: String,
    pub payload: String,
    pub id: Option<String>,
    pub replicated: bool,
    pub outcome: Outcome,
    pub sent_ns: u64,
    pub answered_ns: u64,
}

/// A write of a flow's build: the parent's enqueue (`CHILDREN n`), or child `i`'s adoption on
/// the parent's node (`EMQ.ADOPT`) or its enqueue (`PARENT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Parent,
    Adopt(usize),
    Child(usize),
}

/// One try of a flow's write, then `WAIT 1`: `replicated` when a replica had it.
#[derive(Clone, Debug)]
pub struct FlowWrite {
    pub step: Step,
    pub outcome: Outcome,
    pub replicated: bool,
    pub sent_ns: u64,
    pub answered_ns: u64,
}

/// A flow the producer built: a parent and its children, each in a queue of its own primary,
/// and every try of every write. A batch's children are `ON-FAIL IGNORE`, the others' `FAIL`.
#[derive(Clone, Debug)]
pub struct Flow {
    /// `(queue, id)` of the parent, then of each child.
    pub parent: (String, String),
    pub children: Vec<(String, String)>,
    pub batch: bool,
    pub writes: Vec<FlowWrite>,
}

impl Flow {
    /// Every write of the flow was confirmed by a replica (on some try).
    pub fn acknowledged(&self) -> bool {
        let confirmed = |step: Step| {
            self.writes
                .iter()
                .any(|w| w.step == step && w.outcome == Outcome::Ok && w.replicated)
        };
        confirmed(Step::Parent)
            && (0..self.children.len())
                .all(|i| confirmed(Step::Adopt(i)) && confirmed(Step::Child(i)))
    }
}

/// One reading of a limit during the run: what the server counted against it.
#[derive(Clone, Debug)]
pub struct LimitSample {
    /// What is limited, e.g. `queue f1-42 concurrency` (a group's limit reads the same way).
    pub scope: String,
    pub limit: i64,
    pub observed: i64,
    pub at_ns: u64,
}

/// A phase's history, shared by the threads that write it.
#[derive(Default)]
pub struct Log {
    pub enqueues: Vec<Enqueue>,
    pub flows: Vec<Flow>,
    pub events: Vec<Event>,
    pub limits: Vec<LimitSample>,
}

pub type History = Arc<Mutex<Log>>;

/// Now, on the history's clock.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub fn record_enqueue(history: &History, op: Enqueue) {
    if let Ok(mut h) = history.lock() {
        h.enqueues.push(op);
    }
}

pub fn record_flow(history: &History, flow: Flow) {
    if let Ok(mut h) = history.lock() {
        h.flows.push(flow);
    }
}

pub fn record(history: &History, event: Event) {
    if let Ok(mut h) = history.lock() {
        h.events.push(event);
    }
}

pub fn record_limit(history: &History, sample: LimitSample) {
    if let Ok(mut h) = history.lock() {
        h.limits.push(sample);
    }
}
