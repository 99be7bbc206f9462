//! The flows' rules, on the flows the producer built (each try of each write) and the
//! workers' events of their jobs: a parent never runs before all its children finished, never
//! runs again after an `ACK` that stands, and an acknowledged flow's parent runs (or, for a
//! flow whose child died with `ON-FAIL FAIL`, dies); a batch's callback runs once.

use std::collections::{BTreeMap, HashMap};

use super::{Input, Job, Report, Row};
use crate::history::{Action, Event, Flow, Kind, Outcome};

/// The flows' figures of a phase.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Flows whose build began.
    pub tried: usize,
    /// Flows every write of which a replica confirmed.
    pub acknowledged: usize,
    /// Their children.
    pub children: usize,
    /// Acknowledged flows whose parent is done, with no run after its `ACK` that stands and
    /// no second such `ACK`.
    pub parents_once: usize,
    /// Acknowledged batches, and those whose callback ran to one `ACK` that stands.
    pub batches: usize,
    pub batches_once: usize,
    /// Acknowledged `ON-FAIL FAIL` flows whose parent a dead child failed.
    pub failed: usize,
}

impl Figures {
    pub fn summary(&self) -> String {
        format!(
            "flows tried {}, acknowledged {} ({} children), parents done once {}, batches {} (callback once {}), failed by a child {}",
            self.tried,
            self.acknowledged,
            self.children,
            self.parents_once,
            self.batches,
            self.batches_once,
            self.failed
        )
    }
}

/// The flows by their parent, for the rules on rows.
pub struct Index<'a> {
    parents: HashMap<(&'a str, &'a str), Vec<&'a Flow>>,
}

fn row<'a>(input: &'a Input, (queue, id): &(String, String)) -> Option<&'a Row> {
    input.finals.get(queue).and_then(|f| f.rows.get(id))
}

fn state<'a>(input: &'a Input, job: &(String, String)) -> Option<&'a str> {
    row(input, job).map(|r| r.state.as_str())
}

/// Whether `flow` fails its parent: an `ON-FAIL FAIL` flow with a child dead at the end.
fn child_died(input: &Input, flow: &Flow) -> bool {
    !flow.batch
        && flow
            .children
            .iter()
            .any(|c| state(input, c) == Some("dead"))
}

impl<'a> Index<'a> {
    pub fn new(flows: &'a [Flow]) -> Index<'a> {
        let mut parents: HashMap<(&str, &str), Vec<&Flow>> = HashMap::new();
        for f in flows {
            parents
                .entry((f.parent.0.as_str(), f.parent.1.as_str()))
                .or_default()
                .push(f);
        }
        Index { parents }
    }

    /// Whether the job is a flow's parent.
    pub fn is_parent(&self, queue: &str, id: &str) -> bool {
        self.parents.contains_key(&(queue, id))
    }

    /// Whether the job is a parent a child's death failed (dead with no attempt of its own).
    pub fn failed_by_child(&self, input: &Input, queue: &str, id: &str) -> bool {
        self.parents
            .get(&(queue, id))
            .is_some_and(|flows| flows.iter().any(|f| child_died(input, f)))
    }
}

/// The earliest a child may have finished: the first send of a settle that can finish it (an
/// `ACK`, or a `FAIL` of its last attempt) that was not refused.
fn finished_at(input: &Input, events: &[&Event]) -> Option<u64> {
    events
        .iter()
        .filter(|e| {
            e.kind == Kind::Settle
                && !matches!(e.outcome, Outcome::Refused(_))
                && match e.action {
                    Some(Action::Ack) => true,
                    Some(Action::Fail) => e.token >= input.max_attempts,
                    None => false,
                }
        })
        .map(|e| e.sent_ns)
        .min()
}

/// When the job's `ACK` that stands was answered: the first accepted one a replica confirmed
/// (or any accepted one, in a phase without a failover, where nothing undoes it).
fn stands(input: &Input, e: &Event) -> bool {
    e.kind == Kind::Settle
        && e.action == Some(Action::Ack)
        && e.outcome == Outcome::Ok
        && (e.replicated == Some(true) || !input.failover)
}

/// A run of a parent: a claim that returned it (when answered), or its handler's start.
fn runs<'e>(events: &'e [&'e Event]) -> impl Iterator<Item = (&'e Event, u64)> + 'e {
    events.iter().filter_map(|e| match e.kind {
        Kind::Claim if e.outcome == Outcome::Ok => Some((*e, e.answered_ns)),
        Kind::HandlerStart => Some((*e, e.sent_ns)),
        _ => None,
    })
}

/// The four rules on every flow, and the figures.
pub fn check(input: &Input, jobs: &BTreeMap<Job, Vec<&Event>>, r: &mut Report) {
    let none = Vec::new();
    for flow in input.flows {
        let (pq, pid) = &flow.parent;
        let events = jobs.get(&flow.parent).unwrap_or(&none);
        r.flows.tried += 1;
        before_children(input, jobs, flow, events, r);
        let again = after_ack(input, flow, events, r);
        let once = batch(input, flow, events, r);
        if !flow.acknowledged() {
            continue;
        }
        r.flows.acknowledged += 1;
        r.flows.children += flow.children.len();
        for c in flow.children.iter().filter(|c| row(input, c).is_none()) {
            r.violations.push(format!(
                "flow {pq}/{pid}: acknowledged, but its child {}/{} is gone",
                c.0, c.1
            ));
        }
        let died = child_died(input, flow);
        let want = if died { "dead" } else { "done" };
        let got = state(input, &flow.parent);
        if got != Some(want) {
            r.violations.push(format!(
                "flow {pq}/{pid}: acknowledged, but its parent is {got:?} at the end, not {want}{}",
                if died { " (a child died)" } else { "" }
            ));
        } else if died {
            r.flows.failed += 1;
        } else if !again && once {
            r.flows.parents_once += 1;
        }
        if flow.batch {
            r.flows.batches += 1;
            if got == Some("done") && once {
                r.flows.batches_once += 1;
            }
        }
    }
}

/// A parent that ran (a claim answered, or its handler started) before one of its children
/// can have finished: before the first send of a settle that finished it, or when none did.
fn before_children(
    input: &Input,
    jobs: &BTreeMap<Job, Vec<&Event>>,
    flow: &Flow,
    events: &[&Event],
    r: &mut Report,
) {
    let Some((first, at)) = runs(events).min_by_key(|(_, at)| *at) else {
        return;
    };
    let (pq, pid) = &flow.parent;
    for child in &flow.children {
        let finished = jobs
            .get(child)
            .and_then(|events| finished_at(input, events));
        let early = match finished {
            Some(t) => at < t,
            // A child the timer buried (its last lease ran out) has no settle to go by.
            None => state(input, child) != Some("dead"),
        };
        if early {
            r.violations.push(format!(
                "flow parent {pq}/{pid}: run ({:?} by {}, token {}) before its child {}/{} finished",
                first.kind, first.worker, first.token, child.0, child.1
            ));
        }
    }
}

/// A parent run again (claimed, or its handler started) after its `ACK` that stands; whether
/// it was.
fn after_ack(input: &Input, flow: &Flow, events: &[&Event], r: &mut Report) -> bool {
    let Some(acked) = events
        .iter()
        .filter(|e| stands(input, e))
        .map(|e| e.answered_ns)
        .min()
    else {
        return false;
    };
    let (pq, pid) = &flow.parent;
    let mut again = false;
    for (e, _) in runs(events).filter(|(e, _)| e.sent_ns > acked) {
        again = true;
        r.violations.push(format!(
            "flow parent {pq}/{pid}: run again ({:?} by {}, token {}) after its acknowledged ACK",
            e.kind, e.worker, e.token
        ));
    }
    again
}

/// A batch's callback: at most one `ACK` that stands (any batch), and for an acknowledged one
/// at least one accepted `ACK`; whether it ran to one `ACK` that stands, or to accepted ones a
/// failover may have undone but never to two that stand.
fn batch(input: &Input, flow: &Flow, events: &[&Event], r: &mut Report) -> bool {
    let accepted = events
        .iter()
        .filter(|e| e.kind == Kind::Settle && e.action == Some(Action::Ack))
        .filter(|e| e.outcome == Outcome::Ok)
        .count();
    let standing = events.iter().filter(|e| stands(input, e)).count();
    if !flow.batch {
        return standing <= 1;
    }
    let (pq, pid) = &flow.parent;
    if standing > 1 {
        r.violations.push(format!(
            "batch {pq}/{pid}: its callback ran twice ({standing} acknowledged ACKs)"
        ));
    }
    if flow.acknowledged() && accepted == 0 {
        r.violations.push(format!(
            "batch {pq}/{pid}: acknowledged, but its callback never ran to an ACK"
        ));
    }
    standing <= 1 && accepted >= 1
}
