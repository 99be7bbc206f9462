//! The flows of a phase's load: a producer that builds flows of one parent and 1–10 children
//! as a client does on a cluster (docs/flows.md): the parent first (`CHILDREN n`), then for
//! each child `EMQ.ADOPT` on the parent's node and the child's `EMQ.ENQUEUE ... PARENT`, each
//! write followed by `WAIT 1` and retried with the same ids until a replica confirmed it (a
//! build is safe to retry). The parent and its children are in queues of different primaries;
//! a third of the flows are batches (every child `ON-FAIL IGNORE`). Each flow goes into the
//! history with every try of every write, as the flows user of the phase.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::docker::{Node, FLOWS};
use crate::history::{now_ns, record_flow, Flow, FlowWrite, History, Outcome, Step};
use crate::workload::{int, outcome_of, Queues, Router};

/// The most children of a flow.
pub const MAX_CHILDREN: usize = 10;
/// How long one write is retried before the flow is given up (its parent then waits for
/// ever, and the flow is not acknowledged): past a fault, its failover and its healing.
const WRITE_PATIENCE: Duration = Duration::from_secs(30);
/// The pause between two tries of a write.
const RETRY_PAUSE: Duration = Duration::from_millis(150);

/// What a flows producer builds: on `queues` (each owned by a primary of its own), up to
/// `max` flows, one every `pause_ms` or so, drawn from `seed`, as the user of `scope`.
pub struct Plan {
    pub queues: Queues,
    pub scope: String,
    pub seed: u64,
    pub max: usize,
    pub pause_ms: u64,
}

/// Builds the plan's flows until `producing` ends or all are built.
pub fn produce(nodes: &[Node], plan: &Plan, history: &History, producing: &AtomicBool) {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let mut router = Router::new(nodes, &FLOWS, Some(plan.scope.clone()));
    let queues = &plan.queues.0;
    let mut built = 0;
    while producing.load(Ordering::SeqCst) && built < plan.max && queues.len() > 1 {
        let p = rng.random_range(0..queues.len());
        let n = rng.random_range(1..=MAX_CHILDREN);
        let batch = rng.random_ratio(1, 3);
        let mut flow = Flow {
            parent: (queues[p].0.clone(), echomq_client::ids::mint()),
            children: Vec::with_capacity(n),
            batch,
            writes: Vec::new(),
        };
        let mut slots = vec![queues[p].1];
        for _ in 0..n {
            // A queue of another primary than the parent's.
            let mut c = rng.random_range(0..queues.len() - 1);
            if c >= p {
                c += 1;
            }
            flow.children
                .push((queues[c].0.clone(), echomq_client::ids::mint()));
            slots.push(queues[c].1);
        }
        let tag = format!("fl{:x}-{built}", plan.seed);
        build(&mut router, &mut flow, &slots, &tag);
        record_flow(history, flow);
        built += 1;
        std::thread::sleep(Duration::from_millis(
            rng.random_range(1..=(2 * plan.pause_ms).max(5)),
        ));
    }
}

/// Writes `flow` step by step (`slots`: the parent's, then each child's), each write retried
/// until a replica confirmed it; stops at a write that could not be confirmed in time, or that
/// the parent refused (`EMQPARENT`: it is gone, say, lost with an unconfirmed write).
fn build(router: &mut Router, flow: &mut Flow, slots: &[u16], tag: &str) {
    let (pq, pid) = flow.parent.clone();
    let mut parent = redis::cmd("EMQ.ENQUEUE");
    parent
        .arg(&pq)
        .arg(&pid)
        .arg(format!("{tag}-p"))
        .arg("CHILDREN")
        .arg(flow.children.len());
    if !write(router, flow, Step::Parent, &pq, slots[0], parent) {
        return;
    }
    for (i, (cq, cid)) in flow.children.clone().into_iter().enumerate() {
        let mut adopt = redis::cmd("EMQ.ADOPT");
        adopt.arg(&pq).arg(&pid).arg(&cq).arg(&cid);
        if !write(router, flow, Step::Adopt(i), &pq, slots[0], adopt) {
            return;
        }
        let mut child = redis::cmd("EMQ.ENQUEUE");
        child
            .arg(&cq)
            .arg(&cid)
            .arg(format!("{tag}-{i}"))
            .arg("PARENT")
            .arg(&pq)
            .arg(&pid);
        if flow.batch {
            child.arg("ON-FAIL").arg("IGNORE");
        }
        if !write(router, flow, Step::Child(i), &cq, slots[i + 1], child) {
            return;
        }
    }
}

/// One write of a flow, then `WAIT 1 300`, tried until a replica confirmed it; each try
/// recorded. Whether it was confirmed.
fn write(
    router: &mut Router,
    flow: &mut Flow,
    step: Step,
    queue: &str,
    slot: u16,
    cmd: redis::Cmd,
) -> bool {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd).cmd("WAIT").arg(1).arg(300);
    let started = Instant::now();
    loop {
        let sent_ns = now_ns();
        let result = router.send(queue, slot, &pipe);
        let mut w = FlowWrite {
            step,
            outcome: Outcome::Ok,
            replicated: false,
            sent_ns,
            answered_ns: now_ns(),
        };
        match result {
            Ok(replies) => w.replicated = int(replies.get(1)).is_some_and(|n| n >= 1),
            Err(e) => w.outcome = outcome_of(&e),
        }
        let confirmed = w.outcome == Outcome::Ok && w.replicated;
        let refused = matches!(&w.outcome, Outcome::Refused(why) if why.contains("EMQPARENT"));
        flow.writes.push(w);
        if confirmed {
            return true;
        }
        if refused || started.elapsed() > WRITE_PATIENCE {
            return false;
        }
        std::thread::sleep(RETRY_PAUSE);
    }
}
