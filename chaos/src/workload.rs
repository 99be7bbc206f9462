//! The harness's own load: producers that enqueue and wait for a replica (`WAIT 1`), recording
//! each enqueue in the history. The workers are the shipped clients ([`crate::fleet`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, ErrorKind, Value};

use crate::cluster::{connect_as, owner, slot_map, SlotMap};
use crate::docker::{Node, Role, PRODUCER};
use crate::history::{now_ns, record_enqueue, Enqueue, History, Outcome};
use crate::spanned::Spanned;

/// Connections to the primaries by the slot map (read as the harness), refreshed after a
/// redirection or a failure; each connection as the client's own ACL user.
pub struct Router {
    nodes: Vec<Node>,
    map: SlotMap,
    /// By node and queue: each connection is the role's user for that queue (or its scope).
    cons: HashMap<(String, String), Connection>,
    role: &'static Role,
    /// The queue whose user the role's connections are, whatever queue they touch: a flows
    /// user has one for the phase's flow queues.
    scope: Option<String>,
}

impl Router {
    pub fn new(nodes: &[Node], role: &'static Role, scope: Option<String>) -> Router {
        Router {
            nodes: nodes.to_vec(),
            map: slot_map(nodes).unwrap_or_default(),
            cons: HashMap::new(),
            role,
            scope,
        }
    }

    /// Sends `pipe`, which touches `queue` only, to the owner of `slot` (the queue's), as the
    /// role's user for that queue.
    pub fn send(
        &mut self,
        queue: &str,
        slot: u16,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<Vec<Value>> {
        let Some(ip) = owner(&self.map, slot).map(str::to_string) else {
            self.refresh();
            return Err((ErrorKind::Io, "no owner known for the slot").into());
        };
        let at = (ip, queue.to_string());
        if !self.cons.contains_key(&at) {
            let user = self.role.user(self.scope.as_deref().unwrap_or(queue));
            let con = connect_as(&at.0, &user, Duration::from_millis(800))?;
            self.cons.insert(at.clone(), con);
        }
        let Some(con) = self.cons.get_mut(&at) else {
            return Err((ErrorKind::Io, "no connection").into());
        };
        let result = pipe.query::<Vec<Value>>(con);
        if let Err(e) = &result {
            if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                self.cons.remove(&at);
            }
            self.refresh();
        }
        result
    }

    fn refresh(&mut self) {
        if let Some(map) = slot_map(&self.nodes) {
            self.map = map;
        }
    }
}

pub fn outcome_of(e: &redis::RedisError) -> Outcome {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        Outcome::Unknown(e.to_string())
    } else {
        Outcome::Refused(e.to_string())
    }
}

pub fn int(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The queues of a fault's phase and the slot of each.
#[derive(Clone)]
pub struct Queues(pub Vec<(String, u16)>);

/// The running load: stop it, then join it.
pub struct Load {
    producing: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `producers` threads on `queues` and `spanned`, each with a seed drawn from `seed`.
    pub fn start(
        nodes: &[Node],
        queues: &Queues,
        spanned: &Spanned,
        history: &History,
        seed: u64,
        producers: usize,
        max_jobs: usize,
    ) -> Load {
        let producing = Arc::new(AtomicBool::new(true));
        let mut threads = Vec::new();
        for p in 0..producers {
            let (nodes, queues, history) = (nodes.to_vec(), queues.clone(), history.clone());
            let spanned = spanned.clone();
            let producing = producing.clone();
            let per = max_jobs / producers.max(1);
            // Each producer's jobs spread over at least SPREAD, so a fault always meets
            // enqueues however few jobs a run tries.
            let pause_ms = (SPREAD.as_millis() as u64 / per.max(1) as u64).max(1);
            threads.push(std::thread::spawn(move || {
                produce(
                    &nodes,
                    &queues,
                    &spanned,
                    &history,
                    seed ^ (p as u64 + 1),
                    &producing,
                    per,
                    pause_ms,
                )
            }));
        }
        Load { producing, threads }
    }

    /// Starts a flows producer beside the others, stopped with them.
    pub fn flows(&mut self, nodes: &[Node], plan: crate::flows::Plan, history: &History) {
        let (nodes, history) = (nodes.to_vec(), history.clone());
        let producing = self.producing.clone();
        self.threads.push(std::thread::spawn(move || {
            crate::flows::produce(&nodes, &plan, &history, &producing)
        }));
    }

    /// Stops enqueueing.
    pub fn stop_producing(&self) {
        self.producing.store(false, Ordering::SeqCst);
    }

    /// Stops everything and waits for it.
    pub fn stop(self) {
        self.producing.store(false, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The least time a phase's enqueues take: past the warm-up, the fault and its healing.
pub const SPREAD: Duration = Duration::from_secs(14);

/// Enqueues on a queue drawn for each job: one of `queues` (`*` ids), or `spanned`, whose
/// job gets an id minted here and goes to the partition it routes to, recorded as the queue's.
#[allow(clippy::too_many_arguments)]
fn produce(
    nodes: &[Node],
    queues: &Queues,
    spanned: &Spanned,
    history: &History,
    seed: u64,
    producing: &AtomicBool,
    max_jobs: usize,
    pause_ms: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut router = Router::new(nodes, &PRODUCER, None);
    let mut sent = 0;
    while producing.load(Ordering::SeqCst) && sent < max_jobs {
        let at = rng.random_range(0..=queues.0.len());
        let payload = format!("{seed:x}-{sent}");
        sent += 1;
        let mut pipe = redis::pipe();
        let (queue, slot) = match queues.0.get(at) {
            Some((queue, slot)) => {
                pipe.cmd("EMQ.ENQUEUE").arg(queue).arg("*").arg(&payload);
                (queue, *slot)
            }
            None => {
                let id = echomq_client::ids::mint();
                let (partition, slot) = spanned.partition_of(&id);
                pipe.cmd("EMQ.ENQUEUE")
                    .arg(partition)
                    .arg(&id)
                    .arg(&payload);
                (&spanned.queue, *slot)
            }
        };
        if at == crate::queues::LIMITED {
            // The limited queue's jobs are in groups, each with its own limit.
            let group = rng.random_range(0..crate::queues::GROUPS);
            pipe.arg("GROUP").arg(format!("g{group}"));
        }
        pipe.cmd("WAIT").arg(1).arg(300);
        let sent_ns = now_ns();
        let result = router.send(queue, slot, &pipe);
        let mut op = Enqueue {
            queue: queue.clone(),
            payload,
            id: None,
            replicated: false,
            outcome: Outcome::Ok,
            sent_ns,
            answered_ns: now_ns(),
        };
        match result {
            Ok(replies) => {
                op.id = replies.first().and_then(text);
                op.replicated = int(replies.get(1)).is_some_and(|n| n >= 1);
            }
            Err(e) => op.outcome = outcome_of(&e),
        }
        record_enqueue(history, op);
        std::thread::sleep(Duration::from_millis(
            rng.random_range(1..=(2 * pause_ms).max(5)),
        ));
    }
}
