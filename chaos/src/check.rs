//! The checker, pure: a phase's history and the final state of its queues, as plain data, in;
//! its figures and the violations found (each naming what was involved) out. Reading the
//! servers is `state.rs`'s; this file touches nothing but its input, so its tests feed it
//! histories by hand. The flows' rules are `check/flows.rs`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::history::{Action, Enqueue, Event, Flow, Kind, LimitSample, Outcome};

pub mod flows;

/// One job's row at the end.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub state: String,
    pub payload: String,
    pub attempts: i64,
}

/// One queue at the end, on its primary: rows by id, the sets each id is a member of
/// (`pending`, `active`, `schedule`, `dead`, `waiting`), and the hand-overs in its outbox.
#[derive(Clone, Debug, Default)]
pub struct QueueState {
    pub rows: HashMap<String, Row>,
    pub members: HashMap<String, Vec<String>>,
    pub outbox: usize,
}

/// What the checker reads.
pub struct Input<'a> {
    pub enqueues: &'a [Enqueue],
    pub flows: &'a [Flow],
    pub events: &'a [Event],
    pub limits: &'a [LimitSample],
    pub finals: &'a BTreeMap<String, QueueState>,
    /// The workers' lease: a settle sent longer than this (and `GRACE_NS`) after its claim or
    /// last renewal was answered is a zombie's.
    pub lease_ms: u64,
    pub max_attempts: i64,
    /// Whether a primary of the phase lost its role: only then may a write that no replica
    /// confirmed have been undone, and only then is such a write's outcome excused.
    pub failover: bool,
    /// When (wall-clock ns) a primary's clock stepped, and by how many ms (ahead positive): the
    /// server counts a lease by its own clock, so a lease running across steps that put it
    /// behind on the whole ends that much later, and a settle sent within it may be taken
    /// (fencing by tokens still holds); steps ahead only end leases early.
    pub clock_steps: &'a [(u64, i64)],
}

/// How long past a lease's end the server may still take the job back (its timer's tick or
/// so): a settle later than that is refused, whatever the worker thinks.
pub const GRACE_NS: u64 = 1_000_000_000;

/// A phase's figures, and the violations found.
#[derive(Debug, Default)]
pub struct Report {
    pub tried: usize,
    /// Enqueues a replica confirmed (`WAIT` ≥ 1).
    pub acknowledged: usize,
    /// Of those, found once in the final state, done or dead.
    pub found: usize,
    pub lost: usize,
    pub duplicated: usize,
    /// Rows not done or dead at the end (pending, active, scheduled).
    pub unfinished: usize,
    /// Jobs claimed again after an `ACK` a replica confirmed.
    pub rerun_after_ack: usize,
    /// Handler runs beyond a job's first (a lease ran out, a failure retried): counted.
    pub handler_reruns: usize,
    /// Enqueues a primary took with no replica's `WAIT`, later gone, in a phase with a
    /// failover. Counted, never a pass (without a failover such a loss is a violation).
    pub unconfirmed_lost: usize,
    pub unknown: usize,
    /// Enqueues whose answer never came, found once (the others were not written).
    pub unknown_found: usize,
    pub settles_accepted: usize,
    /// Settles whose answer never came.
    pub settles_unknown: usize,
    /// Attempts settled twice, at most once with a replica's `WAIT`, after a failover.
    pub settles_superseded: usize,
    /// A token handed out again, or a stale settle taken, where the newer claim or the settle
    /// had no replica's `WAIT` and a failover came: the write was undone. Counted.
    pub fencing_unconfirmed: usize,
    /// Settles sent past their lease and its grace.
    pub zombies_tried: usize,
    pub zombies_refused: usize,
    pub zombies_unknown: usize,
    /// The most a limit's reading ever showed, and that limit: `(observed, limit)`.
    pub limit_peak: Option<(i64, i64)>,
    pub limit_samples: usize,
    /// For a fault that must refuse writes: the error code, and how many enqueues it refused.
    pub refusals: Option<(&'static str, usize)>,
    pub flows: flows::Figures,
    pub violations: Vec<String>,
}

impl Report {
    /// The figures in one line.
    pub fn summary(&self) -> String {
        let limit = self
            .limit_peak
            .map_or("no limit reading".into(), |(seen, n)| {
                format!(
                    "at most {seen} active of a limit of {n} ({} readings)",
                    self.limit_samples
                )
            });
        let refusals = self.refusals.map_or(String::new(), |(code, n)| {
            format!(", refused with {code} {n}")
        });
        format!(
            "tried {}, acknowledged {}, found {}, lost {}, duplicated {}, unfinished {}, re-run after ack {}, handler re-runs {}, unconfirmed and lost {}, unknown {} (found {}), settles accepted {} (answer never came {}, the same attempt settled twice after a failover {}, unconfirmed fencing after a failover {}), zombie settles {} (refused {}, answer never came {}), {limit}{refusals}, {}",
            self.tried, self.acknowledged, self.found, self.lost, self.duplicated, self.unfinished,
            self.rerun_after_ack, self.handler_reruns, self.unconfirmed_lost, self.unknown,
            self.unknown_found, self.settles_accepted, self.settles_unknown,
            self.settles_superseded, self.fencing_unconfirmed, self.zombies_tried,
            self.zombies_refused, self.zombies_unknown, self.flows.summary()
        )
    }
}

/// The sets a row of each state belongs to (`done` rows are in none).
const SETS: [(&str, &str); 5] = [
    ("pending", "pending"),
    ("active", "active"),
    ("schedule", "scheduled"),
    ("dead", "dead"),
    ("waiting", "waiting"),
];

/// A write no replica confirmed: its `WAIT` answered 0, or it had none (a claim: the shipped
/// workers wait on their settles only). Only a failover can undo it.
fn unconfirmed(e: &Event) -> bool {
    e.replicated != Some(true)
}

/// Checks a phase's history against its final state.
pub fn check(input: &Input) -> Report {
    let mut r = Report::default();
    clock(input, &mut r);
    structure(input, &mut r);
    enqueues(input, &mut r);
    let jobs = by_job(input.events);
    let index = flows::Index::new(input.flows);
    finished(input, &jobs, &index, &mut r);
    fencing(input, &jobs, &mut r);
    zombies(input, &jobs, &mut r);
    after_ack(&jobs, input, &mut r);
    limits(input, &mut r);
    flows::check(input, &jobs, &mut r);
    r
}

type Job = (String, String);

/// Each job's events, in the order recorded.
fn by_job(events: &[Event]) -> BTreeMap<Job, Vec<&Event>> {
    let mut jobs: BTreeMap<Job, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| !e.id.is_empty()) {
        jobs.entry((e.queue.clone(), e.id.clone()))
            .or_default()
            .push(e);
    }
    jobs
}

/// Every record was answered no earlier than it was sent: the time-ordered checks below read
/// the history's clock, and a history whose clock runs backwards cannot be trusted.
fn clock(input: &Input, r: &mut Report) {
    let backwards = input
        .enqueues
        .iter()
        .filter(|e| e.answered_ns < e.sent_ns)
        .count()
        + input
            .events
            .iter()
            .filter(|e| e.answered_ns < e.sent_ns)
            .count()
        + input
            .flows
            .iter()
            .flat_map(|f| &f.writes)
            .filter(|w| w.answered_ns < w.sent_ns)
            .count();
    if backwards > 0 {
        r.violations.push(format!(
            "{backwards} records of the history answered before they were sent"
        ));
    }
}

/// Every member of a set has its row and is in one set, the one its row's state names; no
/// hand-over is left in an outbox (the queues drained).
fn structure(input: &Input, r: &mut Report) {
    for (queue, fin) in input.finals {
        if fin.outbox > 0 {
            r.violations.push(format!(
                "{queue}: {} hand-overs left in its outbox at the end",
                fin.outbox
            ));
        }
        for (id, sets) in &fin.members {
            if !fin.rows.contains_key(id) {
                r.violations.push(format!(
                    "{queue}/{id}: a member of {sets:?} without its row"
                ));
            }
            if sets.len() > 1 {
                r.violations
                    .push(format!("{queue}/{id}: in two sets at once: {sets:?}"));
            }
        }
        for (id, row) in &fin.rows {
            let sets = fin.members.get(id).cloned().unwrap_or_default();
            let expected: Vec<&str> = SETS
                .iter()
                .filter(|(_, s)| *s == row.state)
                .map(|(set, _)| *set)
                .collect();
            if (row.state != "done" && sets != expected)
                || (row.state == "done" && !sets.is_empty())
            {
                r.violations
                    .push(format!("{queue}/{id}: state {} but in {sets:?}", row.state));
            }
        }
    }
}

/// Each enqueue against the rows: acknowledged ones found exactly once, refused ones never.
fn enqueues(input: &Input, r: &mut Report) {
    let mut by_payload: HashMap<(&str, &str), usize> = HashMap::new();
    for (queue, fin) in input.finals {
        for row in fin.rows.values() {
            *by_payload.entry((queue, &row.payload)).or_default() += 1;
        }
    }
    for op in input.enqueues {
        r.tried += 1;
        let found = by_payload
            .get(&(op.queue.as_str(), op.payload.as_str()))
            .copied()
            .unwrap_or(0);
        if found > 1 {
            r.duplicated += 1;
            r.violations.push(format!(
                "{}: payload {} (enqueued as {:?}) in {found} jobs",
                op.queue, op.payload, op.id
            ));
        }
        match &op.outcome {
            Outcome::Ok if op.replicated => {
                r.acknowledged += 1;
                if found == 0 {
                    r.lost += 1;
                    r.violations
                        .push(format!("{}: acknowledged enqueue lost ({op:?})", op.queue));
                } else {
                    r.found += 1;
                }
            }
            Outcome::Ok if found == 0 => {
                if input.failover {
                    r.unconfirmed_lost += 1;
                } else {
                    r.violations.push(format!(
                        "{}: an enqueue the server took is gone, and no primary lost its role ({op:?})",
                        op.queue
                    ));
                }
            }
            Outcome::Ok => {}
            Outcome::Unknown(_) => {
                r.unknown += 1;
                if found == 1 {
                    r.unknown_found += 1;
                }
            }
            Outcome::Refused(why) => {
                if found > 0 {
                    r.violations.push(format!(
                        "{}: a refused enqueue ({why}) was written ({op:?})",
                        op.queue
                    ));
                }
            }
        }
    }
}

/// Every row is done or dead, and its attempts are the claims' account: a done job's
/// `attempts` is the token of an `ACK` a worker sent, a dead one used all its attempts (or is a
/// parent a child's death failed), and no row has fewer attempts than a claim of it returned
/// (one a failover may have undone aside), nor more than its claims could have taken. A parent
/// waiting at the end is the flows' rules' to judge.
fn finished(
    input: &Input,
    jobs: &BTreeMap<Job, Vec<&Event>>,
    index: &flows::Index,
    r: &mut Report,
) {
    let mut unanswered: HashMap<&str, i64> = HashMap::new();
    for e in input.events {
        if e.kind == Kind::Claim && matches!(e.outcome, Outcome::Unknown(_)) {
            *unanswered.entry(&e.queue).or_default() += 1;
        }
    }
    let none = Vec::new();
    for (queue, fin) in input.finals {
        for (id, row) in &fin.rows {
            let what = format!("{queue}/{id}");
            let events = jobs.get(&(queue.clone(), id.clone())).unwrap_or(&none);
            match row.state.as_str() {
                "done" => {
                    let acked = events.iter().any(|e| {
                        e.kind == Kind::Settle
                            && e.action == Some(Action::Ack)
                            && e.token == row.attempts
                            && !matches!(e.outcome, Outcome::Refused(_))
                    });
                    if !acked {
                        r.violations.push(format!(
                            "{what}: done with attempts {}, but no worker sent an ACK with that token",
                            row.attempts
                        ));
                    }
                }
                "dead" => {
                    if row.attempts < input.max_attempts && !index.failed_by_child(input, queue, id)
                    {
                        r.violations.push(format!(
                            "{what}: dead after {} attempts of {}",
                            row.attempts, input.max_attempts
                        ));
                    }
                }
                "waiting" if index.is_parent(queue, id) => {}
                other => {
                    r.unfinished += 1;
                    r.violations.push(format!(
                        "{what}: {other} at the end: the queue did not drain"
                    ));
                }
            }
            let claims = events
                .iter()
                .filter(|e| e.kind == Kind::Claim && e.outcome == Outcome::Ok);
            let most = claims.clone().map(|e| e.token).max().unwrap_or(0);
            let kept = claims
                .filter(|e| !(input.failover && unconfirmed(e)))
                .map(|e| e.token)
                .max()
                .unwrap_or(0);
            if row.attempts < kept {
                r.violations.push(format!(
                    "{what}: attempts {} but a claim returned token {kept}",
                    row.attempts
                ));
            }
            let could = most + unanswered.get(queue.as_str()).copied().unwrap_or(0);
            if row.attempts > could {
                r.violations.push(format!(
                    "{what}: attempts {} but claims could have taken it at most {could} times",
                    row.attempts
                ));
            }
        }
    }
}

/// Tokens only grow, a token is settled once, and a settle with a token older than a claim
/// already answered is refused.
fn fencing(input: &Input, jobs: &BTreeMap<Job, Vec<&Event>>, r: &mut Report) {
    for ((queue, id), events) in jobs {
        let claims: Vec<&&Event> = events
            .iter()
            .filter(|e| e.kind == Kind::Claim && e.outcome == Outcome::Ok)
            .collect();
        for c in &claims {
            for earlier in claims.iter().filter(|e| e.answered_ns < c.sent_ns) {
                if earlier.token >= c.token {
                    if input.failover && unconfirmed(earlier) {
                        r.fencing_unconfirmed += 1;
                    } else {
                        r.violations.push(format!(
                            "{queue}/{id}: claim by {} returned token {} after a claim by {} had returned {}",
                            c.worker, c.token, earlier.worker, earlier.token
                        ));
                    }
                }
            }
        }
        let mut per_token: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
        for s in events
            .iter()
            .filter(|e| e.kind == Kind::Settle && e.outcome == Outcome::Ok)
        {
            r.settles_accepted += 1;
            let n = per_token.entry(s.token).or_default();
            n.0 += 1;
            n.1 += usize::from(s.replicated != Some(false));
            if let Some(newer) = claims
                .iter()
                .find(|c| c.answered_ns < s.sent_ns && c.token > s.token)
            {
                if input.failover && (unconfirmed(newer) || unconfirmed(s)) {
                    r.fencing_unconfirmed += 1;
                } else {
                    r.violations.push(format!(
                        "{queue}/{id}: {:?} by {} with token {} accepted after a claim by {} had returned token {}",
                        s.action, s.worker, s.token, newer.worker, newer.token
                    ));
                }
            }
        }
        for (token, (taken, confirmed)) in per_token {
            if taken < 2 {
                continue;
            }
            if input.failover && confirmed < 2 {
                r.settles_superseded += 1;
            } else {
                r.violations.push(format!(
                    "{queue}/{id}: {taken} settles accepted for token {token}: fencing failed"
                ));
            }
        }
        r.settles_unknown += events
            .iter()
            .filter(|e| e.kind == Kind::Settle && matches!(e.outcome, Outcome::Unknown(_)))
            .count();
    }
}

/// The last start of `worker`'s lease on `token` answered by `before`: its claim's answer, or a
/// renewal's.
fn lease_start<'e>(
    events: &[&'e Event],
    worker: &str,
    token: i64,
    before: u64,
) -> Option<&'e Event> {
    events
        .iter()
        .copied()
        .filter(|e| {
            e.worker == worker
                && e.token == token
                && e.outcome == Outcome::Ok
                && matches!(e.kind, Kind::Claim | Kind::Renew)
                && e.answered_ns <= before
        })
        .max_by_key(|e| e.answered_ns)
}

/// When the lease claim `claim` began last ran from, by `before`: the claim's answer, or a
/// later renewal of that token by the same worker.
fn lease_from(events: &[&Event], claim: &Event, before: u64) -> u64 {
    events
        .iter()
        .filter(|e| {
            e.kind == Kind::Renew
                && e.worker == claim.worker
                && e.token == claim.token
                && e.outcome == Outcome::Ok
                && (claim.answered_ns..=before).contains(&e.answered_ns)
        })
        .map(|e| e.answered_ns)
        .max()
        .unwrap_or(claim.answered_ns)
}

/// Whether a lease that began at `since` still held at `at`, with the grace, and longer by what
/// the primary's clock stepped back in between.
fn held(input: &Input, since: u64, at: u64) -> bool {
    let stepped: i64 = input
        .clock_steps
        .iter()
        .filter(|(when, _)| (since..=at).contains(when))
        .map(|(_, by_ms)| by_ms)
        .sum();
    let stepped_back = (-stepped).max(0) as u64 * 1_000_000;
    at <= since + input.lease_ms * 1_000_000 + GRACE_NS + stepped_back
}

/// A settle sent past its lease (and the grace) must be refused.
fn zombies(input: &Input, jobs: &BTreeMap<Job, Vec<&Event>>, r: &mut Report) {
    for ((queue, id), events) in jobs {
        for s in events.iter().filter(|e| e.kind == Kind::Settle) {
            let Some(start) = lease_start(events, &s.worker, s.token, s.sent_ns) else {
                continue;
            };
            if held(input, start.answered_ns, s.sent_ns) {
                continue;
            }
            r.zombies_tried += 1;
            // A failover that undid the zombie's claim (no replica confirmed it) let the new
            // primary hand its token out again, to another worker or to the zombie itself: a
            // settle that could reach the new primary within that claim's lease holds it, as a
            // stale token's.
            let handed_again = || {
                let claimed = events
                    .iter()
                    .filter(|e| {
                        e.kind == Kind::Claim
                            && e.worker == s.worker
                            && e.token == s.token
                            && e.outcome == Outcome::Ok
                            && e.answered_ns <= s.sent_ns
                    })
                    .max_by_key(|e| e.answered_ns);
                claimed.is_some_and(|c| {
                    unconfirmed(c)
                        && events.iter().any(|e| {
                            e.kind == Kind::Claim
                                && e.outcome == Outcome::Ok
                                && e.token == s.token
                                && !std::ptr::eq(*e, *c)
                                && e.answered_ns > c.sent_ns
                                && e.sent_ns < s.answered_ns
                                && (e.answered_ns > s.sent_ns
                                    || held(input, lease_from(events, e, s.sent_ns), s.sent_ns))
                        })
                })
            };
            match &s.outcome {
                Outcome::Refused(_) => r.zombies_refused += 1,
                Outcome::Unknown(_) => r.zombies_unknown += 1,
                Outcome::Ok if input.failover && handed_again() => r.fencing_unconfirmed += 1,
                Outcome::Ok => r.violations.push(format!(
                    "{queue}/{id}: zombie {:?} by {} with token {} accepted {} ms after its lease began (lease {} ms); the job's steps: {}",
                    s.action,
                    s.worker,
                    s.token,
                    (s.sent_ns - start.answered_ns) / 1_000_000,
                    input.lease_ms,
                    steps(events)
                )),
            }
        }
    }
}

/// A job's claims, renewals and settles, in order, for a violation's message: kind, worker,
/// token, sent and answered (ms after the first was sent), outcome, replica's confirmation.
fn steps(events: &[&Event]) -> String {
    let first = events.iter().map(|e| e.sent_ns).min().unwrap_or(0);
    let ms = |ns: u64| ns.saturating_sub(first) / 1_000_000;
    events
        .iter()
        .filter(|e| matches!(e.kind, Kind::Claim | Kind::Renew | Kind::Settle))
        .take(24)
        .map(|e| {
            format!(
                "{:?} {} t{} {}-{} ms {:?} {:?}",
                e.kind,
                e.worker,
                e.token,
                ms(e.sent_ns),
                ms(e.answered_ns),
                e.outcome,
                e.replicated
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// No claim and no handler run after an `ACK` a replica confirmed, and such a job is done.
fn after_ack(jobs: &BTreeMap<Job, Vec<&Event>>, input: &Input, r: &mut Report) {
    let mut rerun: BTreeSet<Job> = BTreeSet::new();
    for ((queue, id), events) in jobs {
        let starts = events
            .iter()
            .filter(|e| e.kind == Kind::HandlerStart)
            .count();
        r.handler_reruns += starts.saturating_sub(1);
        let Some(acked) = events
            .iter()
            .filter(|e| {
                e.kind == Kind::Settle
                    && e.action == Some(Action::Ack)
                    && e.outcome == Outcome::Ok
                    // An ACK no replica confirmed can be undone only by a failover.
                    && (e.replicated == Some(true) || !input.failover)
            })
            .map(|e| e.answered_ns)
            .min()
        else {
            continue;
        };
        for e in events {
            if e.kind == Kind::Claim
                && e.outcome == Outcome::Ok
                && e.sent_ns > acked
                && rerun.insert((queue.clone(), id.clone()))
            {
                r.violations.push(format!(
                    "{queue}/{id}: claimed again by {} (token {}) after an acknowledged ACK",
                    e.worker, e.token
                ));
            }
            if e.kind == Kind::HandlerStart && e.sent_ns > acked {
                r.violations.push(format!(
                    "{queue}/{id}: handler started by {} (token {}) after an acknowledged ACK",
                    e.worker, e.token
                ));
            }
        }
        let state = input
            .finals
            .get(queue)
            .and_then(|f| f.rows.get(id))
            .map(|row| row.state.as_str());
        if state != Some("done") {
            r.violations.push(format!(
                "{queue}/{id}: acknowledged ACK but the job is {state:?}"
            ));
        }
    }
    r.rerun_after_ack = rerun.len();
}

/// No reading of a limit above it.
fn limits(input: &Input, r: &mut Report) {
    r.limit_samples = input.limits.len();
    for s in input.limits {
        if r.limit_peak.is_none_or(|(seen, _)| s.observed > seen) {
            r.limit_peak = Some((s.observed, s.limit));
        }
        if s.observed > s.limit {
            r.violations.push(format!(
                "{}: {} counted against a limit of {} (at {} ns)",
                s.scope, s.observed, s.limit, s.at_ns
            ));
        }
    }
}

#[cfg(test)]
mod tests;
