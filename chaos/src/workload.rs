//! The harness's own load: producers that enqueue and wait for a replica (`WAIT 1`), and
//! workers that claim, run a handler a while and settle (or die without a word, or freeze past
//! their lease and then try to settle: the zombies), recording each step in the history.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, ErrorKind, Value};

use crate::cluster::{connect_as, owner, slot_map, SlotMap};
use crate::docker::{Node, Role, PRODUCER, WORKER};
use crate::history::{
    now_ns, record, record_enqueue, Action, Enqueue, Event, History, Kind, Outcome,
};

/// Connections to the primaries by the slot map (read as the harness), refreshed after a
/// redirection or a failure; each connection as the client's own ACL user.
struct Router {
    nodes: Vec<Node>,
    map: SlotMap,
    /// By node and queue: each connection is the role's user for that queue.
    cons: HashMap<(String, String), Connection>,
    role: &'static Role,
}

impl Router {
    fn new(nodes: &[Node], role: &'static Role) -> Router {
        Router {
            nodes: nodes.to_vec(),
            map: slot_map(nodes).unwrap_or_default(),
            cons: HashMap::new(),
            role,
        }
    }

    /// Sends `pipe`, which touches `queue` only, to the owner of `slot` (the queue's), as the
    /// role's user for that queue.
    fn send(
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
            let user = self.role.user(queue);
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

fn outcome_of(e: &redis::RedisError) -> Outcome {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        Outcome::Unknown(e.to_string())
    } else {
        Outcome::Refused(e.to_string())
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
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
    running: Arc<AtomicBool>,
    producing: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts `producers` and `workers` threads on `queues`, each with a seed drawn from `seed`.
    pub fn start(
        nodes: &[Node],
        queues: &Queues,
        history: &History,
        seed: u64,
        producers: usize,
        workers: usize,
        max_jobs: usize,
    ) -> Load {
        let running = Arc::new(AtomicBool::new(true));
        let producing = Arc::new(AtomicBool::new(true));
        let mut threads = Vec::new();
        for p in 0..producers {
            let (nodes, queues, history) = (nodes.to_vec(), queues.clone(), history.clone());
            let producing = producing.clone();
            let per = max_jobs / producers.max(1);
            // Each producer's jobs spread over at least SPREAD, so a fault always meets
            // enqueues however few jobs a run tries.
            let pause_ms = (SPREAD.as_millis() as u64 / per.max(1) as u64).max(1);
            threads.push(std::thread::spawn(move || {
                produce(
                    &nodes,
                    &queues,
                    &history,
                    seed ^ (p as u64 + 1),
                    &producing,
                    per,
                    pause_ms,
                )
            }));
        }
        for w in 0..workers {
            let (nodes, queues, history) = (nodes.to_vec(), queues.clone(), history.clone());
            let running = running.clone();
            threads.push(std::thread::spawn(move || {
                work(
                    &nodes,
                    &queues,
                    &history,
                    &format!("harness-{w}"),
                    seed ^ (0x100 + w as u64),
                    &running,
                )
            }));
        }
        Load {
            running,
            producing,
            threads,
        }
    }

    /// Stops enqueueing; workers go on.
    pub fn stop_producing(&self) {
        self.producing.store(false, Ordering::SeqCst);
    }

    /// Stops everything and waits for it.
    pub fn stop(self) {
        self.producing.store(false, Ordering::SeqCst);
        self.running.store(false, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The least time a phase's enqueues take: past the warm-up, the fault and its healing.
const SPREAD: Duration = Duration::from_secs(14);

/// The workers' lease (`EMQ.CLAIM ... LEASE`), in ms.
pub const LEASE_MS: u64 = 2_000;
/// How long past its lease a zombie stays frozen before it tries to settle.
const ZOMBIE_PAST_LEASE: Duration = Duration::from_millis(2_000);
/// The least time between two freezes of one worker.
const ZOMBIE_EVERY: Duration = Duration::from_secs(5);

fn produce(
    nodes: &[Node],
    queues: &Queues,
    history: &History,
    seed: u64,
    producing: &AtomicBool,
    max_jobs: usize,
    pause_ms: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut router = Router::new(nodes, &PRODUCER);
    let mut sent = 0;
    while producing.load(Ordering::SeqCst) && sent < max_jobs {
        let (queue, slot) = &queues.0[rng.random_range(0..queues.0.len())];
        let payload = format!("{seed:x}-{sent}");
        sent += 1;
        let mut pipe = redis::pipe();
        pipe.cmd("EMQ.ENQUEUE")
            .arg(queue)
            .arg("*")
            .arg(&payload)
            .cmd("WAIT")
            .arg(1)
            .arg(300);
        let sent_ns = now_ns();
        let result = router.send(queue, *slot, &pipe);
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

/// What one worker knows of the job it holds.
struct Held<'a> {
    worker: &'a str,
    queue: &'a str,
    slot: u16,
    id: &'a str,
    token: i64,
}

impl Held<'_> {
    fn event(&self, kind: Kind, sent_ns: u64) -> Event {
        Event {
            kind,
            worker: self.worker.to_string(),
            queue: self.queue.to_string(),
            id: self.id.to_string(),
            token: self.token,
            sent_ns,
            answered_ns: sent_ns,
            outcome: Outcome::Ok,
            action: None,
            replicated: None,
        }
    }

    /// Sends `pipe` (a command on the job, then `WAIT 1 300`) and records it as `kind`.
    fn send(
        &self,
        router: &mut Router,
        history: &History,
        kind: Kind,
        action: Option<Action>,
        pipe: &redis::Pipeline,
    ) {
        let sent_ns = now_ns();
        let result = router.send(self.queue, self.slot, pipe);
        let mut e = self.event(kind, sent_ns);
        e.answered_ns = now_ns();
        e.action = action;
        match result {
            Ok(replies) => e.replicated = Some(int(replies.get(1)).is_some_and(|n| n >= 1)),
            Err(err) => e.outcome = outcome_of(&err),
        }
        record(history, e);
    }
}

fn work(
    nodes: &[Node],
    queues: &Queues,
    history: &History,
    worker: &str,
    seed: u64,
    running: &AtomicBool,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut router = Router::new(nodes, &WORKER);
    let mut last_freeze = Instant::now();
    while running.load(Ordering::SeqCst) {
        let (queue, slot) = &queues.0[rng.random_range(0..queues.0.len())];
        let mut pipe = redis::pipe();
        pipe.cmd("EMQ.CLAIM")
            .arg(queue)
            .arg("COUNT")
            .arg(5)
            .arg("LEASE")
            .arg(LEASE_MS)
            .cmd("WAIT")
            .arg(1)
            .arg(300);
        let sent_ns = now_ns();
        let result = router.send(queue, *slot, &pipe);
        let answered_ns = now_ns();
        let (jobs, replicated): (Vec<(String, i64)>, bool) = match result {
            Ok(replies) => {
                let jobs = match replies.first() {
                    Some(Value::Array(jobs)) => jobs
                        .iter()
                        .filter_map(|j| match j {
                            Value::Array(f) => Some((text(f.first()?)?, int(f.get(2))?)),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                (jobs, int(replies.get(1)).is_some_and(|n| n >= 1))
            }
            Err(e) => {
                // A claim whose answer never came may have taken jobs no one will hear of.
                if let Outcome::Unknown(why) = outcome_of(&e) {
                    let held = Held {
                        worker,
                        queue,
                        slot: *slot,
                        id: "",
                        token: 0,
                    };
                    let mut e = held.event(Kind::Claim, sent_ns);
                    e.answered_ns = answered_ns;
                    e.outcome = Outcome::Unknown(why);
                    record(history, e);
                }
                (Vec::new(), false)
            }
        };
        if jobs.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        for (id, token) in &jobs {
            let held = Held {
                worker,
                queue,
                slot: *slot,
                id,
                token: *token,
            };
            let mut e = held.event(Kind::Claim, sent_ns);
            e.answered_ns = answered_ns;
            e.replicated = Some(replicated);
            record(history, e);
        }
        // Now and then the first job's handler freezes past the lease, then settles anyway.
        let freeze = last_freeze.elapsed() >= ZOMBIE_EVERY && rng.random_ratio(1, 4);
        if freeze {
            last_freeze = Instant::now();
        }
        for (i, (id, token)) in jobs.iter().enumerate() {
            let held = Held {
                worker,
                queue,
                slot: *slot,
                id,
                token: *token,
            };
            // A worker starts no handler on a lease about to run out (a zombie's batch): it
            // lets the job go back.
            if now_ns() + 500_000_000 > answered_ns + LEASE_MS * 1_000_000 {
                continue;
            }
            let roll = rng.random_range(0..100);
            if roll >= 95 {
                continue; // dies without a word: the lease runs out
            }
            record(history, held.event(Kind::HandlerStart, now_ns()));
            std::thread::sleep(Duration::from_millis(rng.random_range(0..60)));
            if freeze && i == 0 {
                std::thread::sleep(Duration::from_millis(LEASE_MS) + ZOMBIE_PAST_LEASE);
            } else if roll < 5 {
                // A heartbeat: the lease renewed before the settle.
                let mut pipe = redis::pipe();
                pipe.cmd("EMQ.RENEW")
                    .arg(queue)
                    .arg(id)
                    .arg(token)
                    .arg(LEASE_MS)
                    .cmd("WAIT")
                    .arg(1)
                    .arg(300);
                held.send(&mut router, history, Kind::Renew, None, &pipe);
            }
            record(history, held.event(Kind::HandlerEnd, now_ns()));
            let fail = roll >= 85;
            let mut pipe = redis::pipe();
            if fail {
                pipe.cmd("EMQ.FAIL")
                    .arg(queue)
                    .arg(id)
                    .arg(token)
                    .arg("RETRY-IN")
                    .arg(100);
            } else {
                pipe.cmd("EMQ.ACK").arg(queue).arg(id).arg(token);
            }
            pipe.cmd("WAIT").arg(1).arg(300);
            let action = if fail { Action::Fail } else { Action::Ack };
            held.send(&mut router, history, Kind::Settle, Some(action), &pipe);
        }
    }
}
