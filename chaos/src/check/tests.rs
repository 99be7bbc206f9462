//! The checker on histories made by hand: a clean one passes (with flows too), and each
//! violation it claims to catch, put into an otherwise clean history, is caught.

use std::collections::BTreeMap;

use super::{check, Input, QueueState, Report, Row};
use crate::history::{Action, Enqueue, Event, Flow, FlowWrite, Kind, LimitSample, Outcome, Step};

const MS: u64 = 1_000_000;
const LEASE_MS: u64 = 2_000;

struct Case {
    enqueues: Vec<Enqueue>,
    flows: Vec<Flow>,
    events: Vec<Event>,
    limits: Vec<LimitSample>,
    finals: BTreeMap<String, QueueState>,
    failover: bool,
    clock_steps: Vec<(u64, i64)>,
}

fn event(kind: Kind, worker: &str, id: &str, token: i64, sent_ms: u64, answered_ms: u64) -> Event {
    Event {
        kind,
        worker: worker.into(),
        queue: "q".into(),
        id: id.into(),
        token,
        sent_ns: sent_ms * MS,
        answered_ns: answered_ms * MS,
        outcome: Outcome::Ok,
        action: None,
        replicated: Some(true),
    }
}

fn claim(worker: &str, id: &str, token: i64, sent_ms: u64, answered_ms: u64) -> Event {
    event(Kind::Claim, worker, id, token, sent_ms, answered_ms)
}

fn ack(worker: &str, id: &str, token: i64, sent_ms: u64, answered_ms: u64) -> Event {
    Event {
        action: Some(Action::Ack),
        ..event(Kind::Settle, worker, id, token, sent_ms, answered_ms)
    }
}

fn refused(mut e: Event) -> Event {
    e.outcome = Outcome::Refused("EMQLEASE".into());
    e
}

fn handler(worker: &str, id: &str, token: i64, at_ms: u64) -> [Event; 2] {
    [
        event(Kind::HandlerStart, worker, id, token, at_ms, at_ms),
        event(Kind::HandlerEnd, worker, id, token, at_ms + 1, at_ms + 1),
    ]
}

fn enqueue(payload: &str, id: &str) -> Enqueue {
    Enqueue {
        queue: "q".into(),
        payload: payload.into(),
        id: Some(id.into()),
        replicated: true,
        outcome: Outcome::Ok,
        sent_ns: 0,
        answered_ns: MS,
    }
}

impl Case {
    /// Two jobs, each enqueued, claimed once by its worker, run and acknowledged; a limit read
    /// under its bound.
    fn clean() -> Case {
        let mut events = Vec::new();
        for (w, id, at) in [("w1", "J1", 10), ("w2", "J2", 20)] {
            events.push(claim(w, id, 1, at, at + 1));
            events.extend(handler(w, id, 1, at + 2));
            events.push(ack(w, id, 1, at + 4, at + 5));
        }
        let mut case = Case {
            enqueues: vec![enqueue("p1", "J1"), enqueue("p2", "J2")],
            flows: Vec::new(),
            events,
            limits: vec![LimitSample {
                scope: "queue q concurrency".into(),
                limit: 3,
                observed: 2,
                at_ns: 15 * MS,
            }],
            finals: BTreeMap::new(),
            failover: false,
            clock_steps: Vec::new(),
        };
        case.row("J1", "done", "p1", 1);
        case.row("J2", "done", "p2", 1);
        case
    }

    fn row(&mut self, id: &str, state: &str, payload: &str, attempts: i64) {
        self.row_in("q", id, state, payload, attempts);
    }

    fn row_in(&mut self, queue: &str, id: &str, state: &str, payload: &str, attempts: i64) {
        let q = self.finals.entry(queue.into()).or_default();
        q.rows.insert(
            id.into(),
            Row {
                state: state.into(),
                payload: payload.into(),
                attempts,
            },
        );
        q.members.remove(id);
        let set = match state {
            "pending" => "pending",
            "active" => "active",
            "scheduled" => "schedule",
            "dead" => "dead",
            "waiting" => "waiting",
            _ => return,
        };
        q.members.insert(id.into(), vec![set.into()]);
    }

    fn check(&self) -> Report {
        check(&Input {
            enqueues: &self.enqueues,
            flows: &self.flows,
            events: &self.events,
            limits: &self.limits,
            finals: &self.finals,
            lease_ms: LEASE_MS,
            max_attempts: 25,
            failover: self.failover,
            clock_steps: &self.clock_steps,
        })
    }
}

/// The report's violations, which must hold one naming `needle`.
fn caught(case: &Case, needle: &str) -> Report {
    let r = case.check();
    assert!(
        r.violations.iter().any(|v| v.contains(needle)),
        "expected a violation naming {needle:?}, got {:?}",
        r.violations
    );
    r
}

#[test]
fn a_clean_history_passes() {
    let r = Case::clean().check();
    assert_eq!(r.violations, Vec::<String>::new());
    assert_eq!((r.tried, r.acknowledged, r.found, r.lost), (2, 2, 2, 0));
    assert_eq!(r.settles_accepted, 2);
    assert_eq!(r.limit_peak, Some((2, 3)));
}

#[test]
fn an_acknowledged_enqueue_lost_is_caught() {
    let mut case = Case::clean();
    case.finals.get_mut("q").unwrap().rows.remove("J2");
    let r = caught(&case, "acknowledged enqueue lost");
    assert_eq!(r.lost, 1);
}

#[test]
fn an_undrained_queue_is_caught() {
    let mut case = Case::clean();
    case.events.pop(); // J2's ACK never sent
    case.row("J2", "pending", "p2", 1);
    let r = caught(&case, "the queue did not drain");
    assert_eq!(r.unfinished, 1);
}

#[test]
fn a_done_job_no_ack_of_its_attempt_explains_is_caught() {
    let mut case = Case::clean();
    case.row("J2", "done", "p2", 2);
    caught(&case, "no worker sent an ACK with that token");
    // Nor may a row count more attempts than claims could have made.
    caught(&case, "claims could have taken it at most 1 times");
}

#[test]
fn attempts_below_a_returned_token_are_caught() {
    let mut case = Case::clean();
    case.events.push(claim("w3", "J2", 2, 30, 31));
    caught(&case, "attempts 1 but a claim returned token 2");
}

#[test]
fn a_dead_job_with_attempts_left_is_caught() {
    let mut case = Case::clean();
    case.row("J2", "dead", "p2", 1);
    caught(&case, "dead after 1 attempts of 25");
}

#[test]
fn a_handler_run_after_a_confirmed_ack_is_caught() {
    let mut case = Case::clean();
    // w3 still held J1 from before and ran it after w1's ACK was confirmed (at 15 ms).
    case.events.extend(handler("w3", "J1", 1, 16));
    caught(
        &case,
        "handler started by w3 (token 1) after an acknowledged ACK",
    );
}

#[test]
fn a_claim_after_a_confirmed_ack_is_caught() {
    let mut case = Case::clean();
    case.events.push(claim("w3", "J1", 2, 16, 17));
    let r = caught(&case, "claimed again by w3");
    assert_eq!(r.rerun_after_ack, 1);
}

#[test]
fn a_claim_after_an_unconfirmed_ack_is_caught_unless_a_failover_could_undo_it() {
    let mut case = Case::clean();
    // J1's ACK (at 15 ms) had no replica's confirmation: with no failover nothing undoes it.
    for e in case
        .events
        .iter_mut()
        .filter(|e| e.id == "J1" && e.kind == Kind::Settle)
    {
        e.replicated = Some(false);
    }
    case.events.push(claim("w3", "J1", 2, 16, 17));
    caught(&case, "claimed again by w3");
    // With a failover in the phase, the ACK may have been undone: the claim is no violation.
    case.failover = true;
    let r = case.check();
    assert!(
        !r.violations.iter().any(|v| v.contains("claimed again")),
        "{:?}",
        r.violations
    );
}

#[test]
fn a_stale_settle_accepted_after_a_newer_claim_is_caught() {
    let mut case = Case::clean();
    // J2: w2 claims token 1; its lease runs out, w3 claims token 2, then w2's ACK with token 1
    // is taken. w3's ACK with token 2 finishes the job.
    case.events.retain(|e| e.id != "J2");
    case.events.push(claim("w2", "J2", 1, 20, 21));
    case.events.push(claim("w3", "J2", 2, 2_100, 2_101));
    case.events.push(ack("w2", "J2", 1, 2_200, 2_201));
    case.events.push(refused(ack("w3", "J2", 2, 2_300, 2_301)));
    case.row("J2", "done", "p2", 2);
    let r = caught(
        &case,
        "Some(Ack) by w2 with token 1 accepted after a claim by w3 had returned token 2",
    );
    // The same with the newer claim unconfirmed and no failover: still caught.
    let newer = case.events.len() - 3;
    case.events[newer].replicated = Some(false);
    caught(&case, "accepted after a claim by w3");
    // With a failover, an unconfirmed claim may have been undone: counted apart.
    case.failover = true;
    let excused = case.check();
    assert!(r.fencing_unconfirmed == 0 && excused.fencing_unconfirmed == 1);
}

#[test]
fn a_token_handed_out_again_after_a_failover_is_excused_only_for_unconfirmed_claims() {
    let mut case = Case::clean();
    // J1's first claim (by w1) had no replica's confirmation (the workers wait on settles only):
    // a failover may undo it and the new primary hand out token 1 again.
    for e in case
        .events
        .iter_mut()
        .filter(|e| e.id == "J1" && e.kind == Kind::Claim)
    {
        e.replicated = None;
    }
    case.events.push(claim("w3", "J1", 1, 12, 13));
    caught(
        &case,
        "claim by w3 returned token 1 after a claim by w1 had returned 1",
    );
    case.failover = true;
    let r = case.check();
    assert!(
        !r.violations
            .iter()
            .any(|v| v.contains("returned token 1 after")),
        "{:?}",
        r.violations
    );
    // A claim a replica confirmed survives the failover: its token handed out again is caught.
    for e in case
        .events
        .iter_mut()
        .filter(|e| e.worker == "w1" && e.kind == Kind::Claim)
    {
        e.replicated = Some(true);
    }
    caught(
        &case,
        "claim by w3 returned token 1 after a claim by w1 had returned 1",
    );
}

#[test]
fn a_token_that_does_not_grow_is_caught() {
    let mut case = Case::clean();
    case.events.push(claim("w3", "J1", 1, 12, 13));
    caught(
        &case,
        "claim by w3 returned token 1 after a claim by w1 had returned 1",
    );
}

#[test]
fn one_token_settled_twice_is_caught() {
    let mut case = Case::clean();
    case.events.push(ack("w3", "J2", 1, 26, 27));
    caught(&case, "2 settles accepted for token 1");
    // After a failover, with one of them unconfirmed: counted apart, not passed silently.
    case.failover = true;
    case.events.last_mut().unwrap().replicated = Some(false);
    let r = case.check();
    assert_eq!(r.settles_superseded, 1);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn a_zombie_ack_accepted_is_caught_and_refused_ones_counted() {
    let mut case = Case::clean();
    // w2 froze past its lease: its ACK of J2, sent 4 s after its claim came back.
    case.events.retain(|e| e.id != "J2");
    case.events.push(claim("w2", "J2", 1, 20, 21));
    case.events.extend(handler("w2", "J2", 1, 22));
    case.events.push(ack("w2", "J2", 1, 4_021, 4_022));
    let r = caught(&case, "zombie Some(Ack) by w2 with token 1 accepted");
    assert_eq!((r.zombies_tried, r.zombies_refused), (1, 0));
    // Refused, and the job finished by w3's claim and ACK: a pass, counted.
    let last = case.events.len() - 1;
    case.events[last] = refused(case.events[last].clone());
    case.events.push(claim("w3", "J2", 2, 3_100, 3_101));
    case.events.push(ack("w3", "J2", 2, 3_102, 3_103));
    case.row("J2", "done", "p2", 2);
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.zombies_tried, r.zombies_refused), (1, 1));
    // A renewal answered in time makes a late ACK no zombie's.
    case.events
        .push(event(Kind::Renew, "w2", "J2", 1, 2_500, 2_501));
    assert_eq!(case.check().zombies_tried, 0);
}

/// J2's history replaced by w2's claim of it with token 1, which no replica confirmed, and its
/// handler's run.
fn claimed_unconfirmed(case: &mut Case) {
    case.events.retain(|e| e.id != "J2");
    let mut first = claim("w2", "J2", 1, 20, 21);
    first.replicated = None;
    case.events.push(first);
    case.events.extend(handler("w2", "J2", 1, 22));
}

#[test]
fn a_zombie_ack_taken_on_a_token_handed_out_again_is_excused_only_after_a_failover() {
    let mut case = Case::clean();
    // w2's claim of J2 (no replica confirmed it: the workers wait on settles only) was undone
    // by a failover; the new primary handed token 1 out again to w3, and took w2's late ACK
    // on it.
    claimed_unconfirmed(&mut case);
    let mut again = claim("w3", "J2", 1, 3_000, 3_001);
    again.replicated = None;
    case.events.push(again);
    case.events.push(ack("w2", "J2", 1, 4_021, 4_022));
    // With no failover nothing undoes a claim: caught.
    caught(&case, "zombie Some(Ack) by w2 with token 1 accepted");
    case.failover = true;
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.zombies_tried, r.zombies_refused), (1, 0));
    // The token handed out again (by the fencing rules) and the ACK taken on it.
    assert_eq!(r.fencing_unconfirmed, 2);
    let zombie = "zombie Some(Ack) by w2 with token 1 accepted";
    let w3 = |case: &mut Case, token: i64, sent_ms: u64| {
        case.events.retain(|e| e.worker != "w3");
        case.events
            .push(claim("w3", "J2", token, sent_ms, sent_ms + 1));
    };
    // The token not handed out again (w3's claim took token 2): nothing explains it, caught.
    w3(&mut case, 2, 3_000);
    caught(&case, zombie);
    // Handed out again only after the ACK was answered: caught.
    w3(&mut case, 1, 5_000);
    caught(&case, zombie);
    // Handed out again, but w3's lease was over when the ACK came (3.1 s after it began, past
    // the lease and the grace): nothing held the token, caught.
    w3(&mut case, 1, 900);
    caught(&case, zombie);
    // Handed out before w2's claim was sent (that claim undone, w2 given token 1 after it):
    // it explains nothing of w2's late ACK, caught.
    w3(&mut case, 1, 10);
    caught(&case, zombie);
    // No other worker: w2's own renewal of the lease is no token handed out again, caught.
    case.events.retain(|e| e.worker != "w3");
    let mut renewal = event(Kind::Renew, "w2", "J2", 1, 600, 601);
    renewal.replicated = None;
    case.events.push(renewal);
    caught(&case, zombie);
    // A claim a replica confirmed survives the failover: caught.
    case.events.retain(|e| e.kind != Kind::Renew);
    w3(&mut case, 1, 3_000);
    for e in case
        .events
        .iter_mut()
        .filter(|e| e.worker == "w2" && e.kind == Kind::Claim)
    {
        e.replicated = Some(true);
    }
    caught(&case, zombie);
    // The violation names the job's steps, the evidence to read.
    caught(&case, "the job's steps: Claim w2 t1 0-1 ms");
}

#[test]
fn a_zombie_settle_taken_on_its_own_token_handed_back_to_it_is_excused_only_within_that_lease() {
    // `make chaos` seed 3, partition-primary: w2's claim of J2 with token 1 was undone by the
    // failover; w2, frozen, sent its late ACK, which the new primary took once it had handed
    // token 1 out again, to w2 itself, whose lease then held.
    let mut case = Case::clean();
    claimed_unconfirmed(&mut case);
    case.events.push(ack("w2", "J2", 1, 4_021, 8_819));
    let mut again = claim("w2", "J2", 1, 6_752, 6_758);
    again.replicated = None;
    case.events.push(again);
    case.failover = true;
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.zombies_tried, r.zombies_refused), (1, 0));
    let zombie = "zombie Some(Ack) by w2 with token 1 accepted";
    // Answered before the token was handed out again: the new primary took a token it had not
    // handed out, caught.
    case.events.retain(|e| e.kind != Kind::Settle);
    case.events.push(ack("w2", "J2", 1, 4_021, 4_300));
    caught(&case, zombie);
    // Handed back long before the ACK, its lease over when the ACK was sent: caught.
    case.events
        .retain(|e| !(e.kind == Kind::Claim && e.sent_ns > 21 * MS));
    case.events.push(claim("w2", "J2", 1, 600, 601));
    case.events.retain(|e| e.kind != Kind::Settle);
    case.events.push(ack("w2", "J2", 1, 4_021, 8_819));
    caught(&case, zombie);
}

#[test]
fn a_late_settle_across_a_clock_step_back_is_no_zombie_but_one_past_the_step_is() {
    // J2's lease began at 21 ms; its primary's clock stepped back 30 s at 1 s, so the server
    // holds the lease until about 32 s: an ACK at 4 s is taken, and no violation.
    let mut case = Case::clean();
    case.events.retain(|e| e.id != "J2");
    case.events.push(claim("w2", "J2", 1, 20, 21));
    case.events.extend(handler("w2", "J2", 1, 22));
    case.events.push(ack("w2", "J2", 1, 4_021, 4_022));
    case.clock_steps.push((1_000 * MS, -30_000));
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.zombies_tried, 0);
    // A step back after the ACK was sent lengthens nothing it held: the zombie is caught.
    case.clock_steps = vec![(5_000 * MS, -30_000)];
    caught(&case, "zombie Some(Ack) by w2 with token 1 accepted");
    // An ACK past even the lengthened lease is a zombie's too.
    case.clock_steps = vec![(1_000 * MS, -500)];
    caught(&case, "zombie Some(Ack) by w2 with token 1 accepted");
    // A step ahead and back within the lease lengthens nothing: the zombie is caught.
    case.clock_steps = vec![(500 * MS, 30_000), (1_000 * MS, -30_000)];
    caught(&case, "zombie Some(Ack) by w2 with token 1 accepted");
}

#[test]
fn a_limit_exceeded_is_caught() {
    let mut case = Case::clean();
    case.limits.push(LimitSample {
        scope: "queue q concurrency".into(),
        limit: 3,
        observed: 4,
        at_ns: 16 * MS,
    });
    let r = caught(&case, "queue q concurrency: 4 counted against a limit of 3");
    assert_eq!(r.limit_peak, Some((4, 3)));
}

#[test]
fn a_group_over_its_limit_is_caught_though_the_queue_is_under_its_own() {
    let mut case = Case::clean();
    case.limits.push(LimitSample {
        scope: "queue q concurrency".into(),
        limit: 3,
        observed: 2,
        at_ns: 16 * MS,
    });
    case.limits.push(LimitSample {
        scope: "queue q group g0 concurrency".into(),
        limit: 1,
        observed: 2,
        at_ns: 16 * MS,
    });
    caught(
        &case,
        "queue q group g0 concurrency: 2 counted against a limit of 1",
    );
}

#[test]
fn a_refused_enqueue_written_is_caught() {
    let mut case = Case::clean();
    case.enqueues[1].outcome = Outcome::Refused("OOM".into());
    caught(&case, "a refused enqueue (OOM) was written");
}

#[test]
fn a_payload_in_two_jobs_is_caught() {
    let mut case = Case::clean();
    case.events.push(claim("w3", "J3", 1, 30, 31));
    case.events.push(ack("w3", "J3", 1, 32, 33));
    case.row("J3", "done", "p2", 1);
    let r = caught(&case, "payload p2 (enqueued as Some(\"J2\")) in 2 jobs");
    assert_eq!(r.duplicated, 1);
}

#[test]
fn an_unconfirmed_enqueue_lost_is_excused_only_after_a_failover() {
    let mut case = Case::clean();
    case.enqueues.push(Enqueue {
        replicated: false,
        ..enqueue("p3", "J3")
    });
    caught(&case, "no primary lost its role");
    case.failover = true;
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.unconfirmed_lost, 1);
}

#[test]
fn a_broken_set_membership_is_caught() {
    let mut case = Case::clean();
    let q = case.finals.get_mut("q").unwrap();
    q.members.insert("J1".into(), vec!["pending".into()]);
    q.members
        .insert("J9".into(), vec!["active".into(), "dead".into()]);
    caught(&case, "q/J1: state done but in [\"pending\"]");
    caught(&case, "q/J9: a member of");
    caught(&case, "q/J9: in two sets at once");
}

#[test]
fn an_acknowledged_ack_of_a_job_not_done_is_caught() {
    let mut case = Case::clean();
    case.row("J1", "dead", "p1", 25);
    caught(
        &case,
        "q/J1: acknowledged ACK but the job is Some(\"dead\")",
    );
}

#[test]
fn a_history_whose_clock_runs_backwards_is_caught() {
    let mut case = Case::clean();
    case.enqueues[0].answered_ns = 0;
    case.enqueues[0].sent_ns = 5 * MS;
    caught(
        &case,
        "1 records of the history answered before they were sent",
    );
}

/// `e` in queue `queue`.
fn in_queue(queue: &str, mut e: Event) -> Event {
    e.queue = queue.into();
    e
}

/// A flow's writes, each confirmed at its first try.
fn confirmed(children: usize) -> Vec<FlowWrite> {
    let write = |step| FlowWrite {
        step,
        outcome: Outcome::Ok,
        replicated: true,
        sent_ns: 0,
        answered_ns: MS,
    };
    let mut writes = vec![write(Step::Parent)];
    for i in 0..children {
        writes.extend([write(Step::Adopt(i)), write(Step::Child(i))]);
    }
    writes
}

impl Case {
    /// The clean case and two flows with their parents in `q` and children in `r`: `P` waits
    /// for `C1` and `C2` (`ON-FAIL FAIL`), the batch `B` for `C3`; each child is claimed, run
    /// and acked by 110 ms, each parent after that.
    fn with_flows() -> Case {
        let mut case = Case::clean();
        for (flow, batch, children) in [("P", false, &["C1", "C2"][..]), ("B", true, &["C3"][..])] {
            case.flows.push(Flow {
                parent: ("q".into(), flow.into()),
                children: children
                    .iter()
                    .map(|c| ("r".into(), c.to_string()))
                    .collect(),
                batch,
                writes: confirmed(children.len()),
            });
            case.row(flow, "done", &format!("{flow}-p"), 1);
            for c in children {
                case.row_in("r", c, "done", &format!("{flow}-{c}"), 1);
            }
        }
        for (w, id, at) in [("w1", "C1", 100), ("w2", "C2", 103), ("w1", "C3", 106)] {
            case.events.push(in_queue("r", claim(w, id, 1, at, at + 1)));
            case.events
                .extend(handler(w, id, 1, at + 1).map(|e| in_queue("r", e)));
            case.events
                .push(in_queue("r", ack(w, id, 1, at + 2, at + 3)));
        }
        for (w, id, at) in [("w3", "P", 200), ("w3", "B", 210)] {
            case.events.push(claim(w, id, 1, at, at + 1));
            case.events.extend(handler(w, id, 1, at + 2));
            case.events.push(ack(w, id, 1, at + 4, at + 5));
        }
        case
    }

    /// Takes away every event of the job `id`.
    fn forget(&mut self, id: &str) {
        self.events.retain(|e| e.id != id);
    }
}

#[test]
fn a_clean_history_with_flows_passes() {
    let r = Case::with_flows().check();
    assert_eq!(r.violations, Vec::<String>::new());
    let f = &r.flows;
    assert_eq!((f.tried, f.acknowledged, f.children), (2, 2, 3));
    assert_eq!(
        (f.parents_once, f.batches, f.batches_once, f.failed),
        (2, 1, 1, 0)
    );
}

#[test]
fn a_parent_run_before_all_its_children_finished_is_caught() {
    let mut case = Case::with_flows();
    // P's claim answered at 104 ms, before C2's ACK was sent (105 ms).
    case.forget("P");
    case.events.push(claim("w3", "P", 1, 103, 104));
    case.events.extend(handler("w3", "P", 1, 150));
    case.events.push(ack("w3", "P", 1, 152, 153));
    caught(
        &case,
        "flow parent q/P: run (Claim by w3, token 1) before its child r/C2 finished",
    );
    // A claim answered after C2's ACK was sent passes (the ACK may have been taken first).
    case.forget("P");
    case.events.push(claim("w3", "P", 1, 104, 106));
    case.events.extend(handler("w3", "P", 1, 150));
    case.events.push(ack("w3", "P", 1, 152, 153));
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A child no settle ever finished: any run of its parent is early.
    case.forget("C2");
    caught(&case, "before its child r/C2 finished");
}

#[test]
fn a_parent_run_again_after_its_acknowledged_ack_is_caught() {
    let mut case = Case::with_flows();
    // P's ACK was confirmed at 209 ms; w4 still held it and ran it at 220 ms.
    case.events.extend(handler("w4", "P", 1, 220));
    let r = caught(
        &case,
        "flow parent q/P: run again (HandlerStart by w4, token 1) after its acknowledged ACK",
    );
    assert_eq!(r.flows.parents_once, 1);
    // A run before the ACK (a lease lost, the handler run again) is no violation.
    let mut case = Case::with_flows();
    case.events.extend(handler("w4", "P", 1, 202));
    assert!(case.check().violations.is_empty());
}

#[test]
fn an_acknowledged_flows_parent_that_never_ran_is_caught() {
    let mut case = Case::with_flows();
    case.forget("P");
    case.row("P", "waiting", "P-p", 0);
    caught(
        &case,
        "flow q/P: acknowledged, but its parent is Some(\"waiting\") at the end, not done",
    );
    // A flow a write of which no replica confirmed was given up: its parent may wait.
    case.flows[0].writes.retain(|w| w.step != Step::Child(1));
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.flows.tried, r.flows.acknowledged), (2, 1));
    // An acknowledged flow's child lost is caught.
    let mut case = Case::with_flows();
    case.finals.get_mut("r").unwrap().rows.remove("C2");
    caught(&case, "flow q/P: acknowledged, but its child r/C2 is gone");
}

#[test]
fn a_child_that_died_fails_its_parent_and_only_then() {
    // C1 died (its last FAIL taken): P, `ON-FAIL FAIL`, is dead without a run, and passes.
    let mut case = Case::with_flows();
    case.forget("C1");
    case.events
        .push(in_queue("r", claim("w1", "C1", 25, 100, 101)));
    case.events.push(in_queue(
        "r",
        Event {
            action: Some(Action::Fail),
            ..event(Kind::Settle, "w1", "C1", 25, 102, 103)
        },
    ));
    case.row_in("r", "C1", "dead", "P-C1", 25);
    case.forget("P");
    case.row("P", "dead", "P-p", 0);
    let r = case.check();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.flows.failed, r.flows.parents_once), (1, 1));
    // Done instead of dead is caught.
    case.row("P", "done", "P-p", 1);
    case.events.push(claim("w3", "P", 1, 200, 201));
    case.events.push(ack("w3", "P", 1, 204, 205));
    caught(
        &case,
        "flow q/P: acknowledged, but its parent is Some(\"done\") at the end, not dead",
    );
    // A batch's child that died does not fail the callback, which must still run.
    let mut case = Case::with_flows();
    case.row_in("r", "C3", "dead", "B-C3", 25);
    case.forget("B");
    case.row("B", "dead", "B-p", 0);
    caught(
        &case,
        "flow q/B: acknowledged, but its parent is Some(\"dead\")",
    );
}

#[test]
fn a_batch_callback_run_twice_or_never_is_caught() {
    // Twice: B's lease ran out under w3, w4 claimed it (token 2) and both ACKs were taken and
    // confirmed.
    let mut case = Case::with_flows();
    case.forget("B");
    case.events.push(claim("w3", "B", 1, 210, 211));
    case.events.push(claim("w4", "B", 2, 2_300, 2_301));
    case.events.push(ack("w4", "B", 2, 2_302, 2_303));
    case.events.push(ack("w3", "B", 1, 2_304, 2_305));
    case.row("B", "done", "B-p", 2);
    let r = caught(
        &case,
        "batch q/B: its callback ran twice (2 acknowledged ACKs)",
    );
    assert_eq!(r.flows.batches_once, 0);
    // After a failover, an ACK no replica confirmed may have been undone: not twice.
    case.failover = true;
    let last = case.events.len() - 1;
    case.events[last].replicated = Some(false);
    let r = case.check();
    assert!(
        !r.violations.iter().any(|v| v.contains("ran twice")),
        "{:?}",
        r.violations
    );
    // Never: an acknowledged batch whose callback no ACK finished.
    let mut case = Case::with_flows();
    case.forget("B");
    case.row("B", "pending", "B-p", 0);
    caught(
        &case,
        "batch q/B: acknowledged, but its callback never ran to an ACK",
    );
}
