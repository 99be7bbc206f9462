//! The real workers of a phase: for each queue a shipped Python `Worker`
//! (`chaos/workers/python_worker.py`, on the project's venv interpreter), a shipped Rust
//! `Worker` (`emq-chaos worker`, [`crate::worker`]) and a shipped Node `Worker`
//! (`chaos/workers/node_worker.js`), each a child process connected to the
//! cluster as the queue's worker ACL user. Each writes its `on_event` calls as JSON lines on its
//! stdout, which a thread of the harness reads into the history as they come. Now and then a
//! whole worker process with a handler running is frozen (`SIGSTOP`) past its lease, then
//! resumed (`SIGCONT`): its jobs' leases ran out meanwhile, so what it then settles must be
//! refused (the zombies).

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::docker::{Node, PORT, WORKER};
use crate::history::{record, Action, Event, History, Kind, Outcome};
use crate::workload::Queues;

/// The workers' lease, in ms.
pub const LEASE_MS: u64 = 2_000;
/// How long a frozen worker stays frozen: its lease and 2 s more, past the checker's grace.
const FREEZE: Duration = Duration::from_millis(LEASE_MS + 2_000);
/// The least time between the end of one freeze and the next.
const FREEZE_EVERY: Duration = Duration::from_secs(3);
/// How long a worker has to stop after `SIGTERM` (its shutdown timeout is 5 s) before `SIGKILL`.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// The lines of a worker's stderr kept, to say why it ended.
const STDERR_LINES: usize = 80;

/// The Python interpreter: `EMQ_CHAOS_PYTHON`, else the project's venv (`make python`).
fn python() -> PathBuf {
    std::env::var_os("EMQ_CHAOS_PYTHON").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/py/bin/python"),
        PathBuf::from,
    )
}

/// Node: `EMQ_CHAOS_NODE`, else `node` on the PATH; node-redis from Debian's folder
/// (`NODE_PATH`, as `make node-deps` sets up).
fn node() -> PathBuf {
    std::env::var_os("EMQ_CHAOS_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
}

/// A worker script of `chaos/workers/`.
fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("workers")
        .join(name)
}

/// Where node-redis's own packages are: `NODE_PATH`, else Debian's folder.
fn node_path() -> String {
    std::env::var("NODE_PATH").unwrap_or_else(|_| "/usr/share/nodejs".to_string())
}

/// What a worker process is doing now: its handlers running (started, not ended).
#[derive(Default)]
struct Busy(HashMap<String, usize>);

/// One worker process.
struct Proc {
    name: String,
    child: Child,
    readers: Vec<JoinHandle<()>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// The running fleet: stop it to end its processes.
pub struct Fleet {
    procs: Arc<Mutex<Vec<Proc>>>,
    running: Arc<AtomicBool>,
    freezer: Option<JoinHandle<usize>>,
    /// Lines of the workers that were not events.
    problems: Arc<Mutex<Vec<String>>>,
}

/// What a fleet did, and what went wrong with it.
pub struct Done {
    pub freezes: usize,
    pub problems: Vec<String>,
}

/// The kinds of the workers' flow deliveries (their outbox sweeps: each hand-over, each removal
/// from the outbox, each page read that failed; the same in both clients), which the history
/// passes over: the flows' rules judge a parent by its own claims, runs and row, and its
/// children's settles and rows.
const FLOW_KINDS: [&str; 3] = ["outbox", "handover", "delivered"];

/// Whether a worker's line is one of its flow deliveries' events.
fn flow_delivery(line: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| {
        v.get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| FLOW_KINDS.contains(&k))
    })
}

/// A JSON line of a worker as a history event.
fn event(line: &str) -> Result<Event, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    let missing = |k: &str| format!("no {k} in {line}");
    let kind = match s("kind").as_deref() {
        Some("claim") => Kind::Claim,
        Some("renew") => Kind::Renew,
        Some("settle") => Kind::Settle,
        Some("handler_start") => Kind::HandlerStart,
        Some("handler_end") => Kind::HandlerEnd,
        _ => return Err(missing("kind")),
    };
    let error = s("error").unwrap_or_default();
    let outcome = match s("outcome").as_deref() {
        Some("ok") => Outcome::Ok,
        Some("refused") => Outcome::Refused(error),
        Some("unknown") => Outcome::Unknown(error),
        _ => return Err(missing("outcome")),
    };
    let action = match s("action").as_deref() {
        Some("ack") => Some(Action::Ack),
        Some("fail") => Some(Action::Fail),
        _ => None,
    };
    Ok(Event {
        kind,
        worker: s("worker").ok_or_else(|| missing("worker"))?,
        queue: s("queue").ok_or_else(|| missing("queue"))?,
        id: s("id").ok_or_else(|| missing("id"))?,
        token: v
            .get("token")
            .and_then(Value::as_i64)
            .ok_or_else(|| missing("token"))?,
        sent_ns: n("sent_ns").ok_or_else(|| missing("sent_ns"))?,
        answered_ns: n("answered_ns").ok_or_else(|| missing("answered_ns"))?,
        outcome,
        action,
        replicated: v.get("replicated").and_then(Value::as_bool),
    })
}

fn signal(pid: u32, sig: &str) -> Result<(), String> {
    crate::docker::run("kill", &[&format!("-{sig}"), &pid.to_string()]).map(|_| ())
}

impl Fleet {
    /// Starts a Python, a Rust and a Node worker on each of `queues`, and the freezer, seeded
    /// by `seed`.
    pub fn start(
        nodes: &[Node],
        queues: &Queues,
        history: &History,
        seed: u64,
    ) -> Result<Fleet, String> {
        let addrs: Vec<String> = nodes.iter().map(|n| format!("{}:{PORT}", n.ip)).collect();
        let addrs = addrs.join(",");
        let busy = Arc::new(Mutex::new(Busy::default()));
        let problems = Arc::new(Mutex::new(Vec::new()));
        let exe = std::env::current_exe().map_err(|e| format!("emq-chaos itself: {e}"))?;
        let mut fleet = Fleet {
            procs: Arc::new(Mutex::new(Vec::new())),
            running: Arc::new(AtomicBool::new(true)),
            freezer: None,
            problems: problems.clone(),
        };
        for (q, (queue, _)) in queues.0.iter().enumerate() {
            let user = WORKER.user(queue);
            for (lang, mut cmd) in [
                ("python", Command::new(python())),
                ("rust", Command::new(&exe)),
                ("node", Command::new(node())),
            ] {
                let name = format!("{lang}-{q}");
                match lang {
                    "python" => cmd.arg(script("python_worker.py")),
                    "node" => cmd
                        .arg(script("node_worker.js"))
                        .env("NODE_PATH", node_path()),
                    _ => cmd.arg("worker"),
                };
                cmd.args(["--queue", queue, "--user", &user.name])
                    .args(["--password", user.password, "--nodes", &addrs])
                    .args(["--seed", &(seed ^ (0x200 + 2 * q as u64)).to_string()])
                    .args(["--name", &name, "--lease", &LEASE_MS.to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let proc = fleet.spawn(cmd, name, history, &busy, &problems)?;
                if let Ok(mut procs) = fleet.procs.lock() {
                    procs.push(proc);
                }
            }
        }
        let (procs, running) = (fleet.procs.clone(), fleet.running.clone());
        fleet.freezer = Some(std::thread::spawn(move || {
            freeze(&procs, &busy, &running, seed)
        }));
        Ok(fleet)
    }

    fn spawn(
        &self,
        mut cmd: Command,
        name: String,
        history: &History,
        busy: &Arc<Mutex<Busy>>,
        problems: &Arc<Mutex<Vec<String>>>,
    ) -> Result<Proc, String> {
        let mut child = cmd.spawn().map_err(|e| format!("{name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let (history, busy, problems) = (history.clone(), busy.clone(), problems.clone());
        let who = name.clone();
        let out = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if flow_delivery(&line) {
                    continue;
                }
                match event(&line) {
                    Ok(e) => {
                        if let Ok(mut b) = busy.lock() {
                            let n = b.0.entry(who.clone()).or_default();
                            match e.kind {
                                Kind::HandlerStart => *n += 1,
                                Kind::HandlerEnd => *n = n.saturating_sub(1),
                                _ => {}
                            }
                        }
                        record(&history, e);
                    }
                    Err(e) => {
                        if let Ok(mut p) = problems.lock() {
                            p.push(format!("{who}: a line not an event: {e}"));
                        }
                    }
                }
            }
        });
        let kept = tail.clone();
        let err = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut t) = kept.lock() {
                    t.push_back(line);
                    if t.len() > STDERR_LINES {
                        t.pop_front();
                    }
                }
            }
        });
        Ok(Proc {
            name,
            child,
            readers: vec![out, err],
            stderr: tail,
        })
    }

    /// Ends the freezer (a frozen worker resumed), then each worker (`SIGTERM`, then `SIGKILL`
    /// after [`STOP_WAIT`]); a worker that had ended before is a problem, with its stderr.
    pub fn stop(mut self) -> Done {
        self.running.store(false, Ordering::SeqCst);
        let freezes = self
            .freezer
            .take()
            .map_or(0, |f| f.join().unwrap_or_default());
        let mut problems = self
            .problems
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let procs = self
            .procs
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        for mut p in procs {
            if let Ok(Some(status)) = p.child.try_wait() {
                let tail = p.stderr.lock().map(|t| t.clone()).unwrap_or_default();
                problems.push(format!(
                    "worker {} ended during the phase ({status}): {}",
                    p.name,
                    Vec::from(tail).join(" | ")
                ));
                continue;
            }
            let _ = signal(p.child.id(), "TERM");
            let started = Instant::now();
            while started.elapsed() < STOP_WAIT && matches!(p.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(p.child.try_wait(), Ok(None)) {
                let _ = p.child.kill();
                problems.push(format!("worker {} did not stop on SIGTERM", p.name));
            }
            let _ = p.child.wait();
            for r in p.readers {
                let _ = r.join();
            }
        }
        Done { freezes, problems }
    }
}

/// A fleet dropped without [`Fleet::stop`] (the harness returning early): no worker outlives it.
impl Drop for Fleet {
    fn drop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(f) = self.freezer.take() {
            let _ = f.join();
        }
        if let Ok(mut procs) = self.procs.lock() {
            for p in procs.iter_mut() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }
}

/// Freezes a worker with a handler running, one at a time, until `running` ends; returns how
/// many it froze.
fn freeze(procs: &Mutex<Vec<Proc>>, busy: &Mutex<Busy>, running: &AtomicBool, seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xf7ee);
    let mut freezes = 0;
    let mut last = Instant::now();
    while running.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
        if last.elapsed() < FREEZE_EVERY {
            continue;
        }
        let candidates: Vec<String> = busy.lock().map_or(Vec::new(), |b| {
            b.0.iter()
                .filter(|(_, n)| **n > 0)
                .map(|(w, _)| w.clone())
                .collect()
        });
        if candidates.is_empty() {
            continue;
        }
        let name = &candidates[rng.random_range(0..candidates.len())];
        let pid = procs
            .lock()
            .ok()
            .and_then(|p| p.iter().find(|p| &p.name == name).map(|p| p.child.id()));
        let Some(pid) = pid else { continue };
        if signal(pid, "STOP").is_err() {
            continue;
        }
        freezes += 1;
        std::thread::sleep(FREEZE);
        let _ = signal(pid, "CONT");
        last = Instant::now();
    }
    freezes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settle_line_is_its_event() {
        let e = event(r#"{"kind":"settle","worker":"rust-0","queue":"q","id":"j1","token":3,"sent_ns":5,"answered_ns":7,"outcome":"refused","error":"EMQLEASE lost","action":"ack","replicated":null}"#)
            .expect("an event");
        assert_eq!(e.kind, Kind::Settle);
        assert!(flow_delivery(
            r#"{"kind":"outbox","worker":"python-2","outcome":"refused"}"#
        ));
        assert!(!flow_delivery(r#"{"kind":"settle"}"#));
        assert_eq!(e.token, 3);
        assert_eq!((e.sent_ns, e.answered_ns), (5, 7));
        assert_eq!(e.outcome, Outcome::Refused("EMQLEASE lost".into()));
        assert_eq!(e.action, Some(Action::Ack));
        assert_eq!(e.replicated, None);
    }

    #[test]
    fn a_line_without_its_times_is_refused() {
        assert!(event(
            r#"{"kind":"claim","worker":"w","queue":"q","id":"j","token":1,"outcome":"ok"}"#
        )
        .is_err());
        assert!(event("not json").is_err());
    }
}
