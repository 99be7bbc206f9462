//! `emq-chaos worker`: the harness's Rust worker, run as a child process. The shipped
//! `echomq_client::Worker` with its defaults (blocking claims, renewals, `EMQ.MACK` settles)
//! and `wait_replicas(1)`, on a cluster connection as the queue's worker ACL user, writing each
//! `on_event` call to stdout as one JSON line for the harness's history. The handler holds a
//! job up to 60 ms and fails one in ten (`Failure::Retry`, 100 ms), drawn from `--seed`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq_client::{
    shutdown_on_signal, EventKind, EventOutcome, Failure, Job, SettleAction, Worker, WorkerEvent,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `--queue Q --user U --password P --nodes ip:port,... --seed S --name N --lease MS`
pub struct Args {
    queue: String,
    user: String,
    password: String,
    nodes: Vec<String>,
    seed: u64,
    name: String,
    lease_ms: u64,
}

impl Args {
    pub fn parse(argv: &[String]) -> Result<Args, String> {
        let mut a = Args {
            queue: String::new(),
            user: String::new(),
            password: String::new(),
            nodes: Vec::new(),
            seed: 0,
            name: String::new(),
            lease_ms: 0,
        };
        let mut it = argv.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or(format!("{flag} needs a value"))?.clone();
            let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
            match flag.as_str() {
                "--queue" => a.queue = value,
                "--user" => a.user = value,
                "--password" => a.password = value,
                "--nodes" => a.nodes = value.split(',').map(str::to_string).collect(),
                "--seed" => a.seed = num(&value)?,
                "--name" => a.name = value,
                "--lease" => a.lease_ms = num(&value)?,
                other => return Err(format!("unknown argument {other}")),
            }
        }
        if a.queue.is_empty() || a.user.is_empty() || a.nodes.is_empty() || a.lease_ms == 0 {
            return Err("--queue, --user, --password, --nodes and --lease are needed".into());
        }
        Ok(a)
    }
}

/// One event as the JSON line the harness reads (`crate::fleet`).
fn line(e: &WorkerEvent) -> String {
    let kind = match e.kind {
        EventKind::Claim => "claim",
        EventKind::Renew => "renew",
        EventKind::Settle => "settle",
        EventKind::HandlerStart => "handler_start",
        EventKind::HandlerEnd => "handler_end",
        EventKind::Cancelled => "cancelled",
        EventKind::TimedOut => "timed_out",
        EventKind::Handover => "handover",
        EventKind::Delivered => "delivered",
        EventKind::Outbox => "outbox",
    };
    let outcome = match e.outcome {
        EventOutcome::Ok => "ok",
        EventOutcome::Refused => "refused",
        EventOutcome::Unknown => "unknown",
    };
    let action = e.action.map(|a| match a {
        SettleAction::Ack => "ack",
        SettleAction::Fail => "fail",
    });
    serde_json::json!({
        "kind": kind,
        "worker": e.worker,
        "queue": e.queue,
        "id": e.id,
        "token": e.token,
        "sent_ns": e.sent_ns,
        "answered_ns": e.answered_ns,
        "outcome": outcome,
        "error": e.error,
        "action": action,
        "replicated": e.replicated,
    })
    .to_string()
}

/// Runs the worker until SIGTERM (a graceful stop).
pub fn run(a: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    runtime.block_on(serve(a))
}

async fn serve(a: Args) -> Result<(), String> {
    let urls: Vec<String> = a.nodes.iter().map(|n| format!("redis://{n}")).collect();
    let client = redis::cluster::ClusterClient::builder(urls)
        .username(a.user.clone())
        .password(a.password.clone())
        // Past the blocking claim's second; a request to a node cut off fails in 3 s.
        .response_timeout(Duration::from_secs(3))
        .connection_timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| format!("cluster client: {e}"))?;
    let claims = client
        .get_async_connection()
        .await
        .map_err(|e| format!("cluster connection: {e}"))?;
    let calls = client
        .get_async_connection()
        .await
        .map_err(|e| format!("cluster connection: {e}"))?;
    let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(a.seed)));
    let handler = move |_job: Job| {
        let (hold, fail) = rng
            .lock()
            .map(|mut r| (r.random_range(0..60u64), r.random_ratio(1, 10)))
            .unwrap_or((0, false));
        async move {
            tokio::time::sleep(Duration::from_millis(hold)).await;
            if fail {
                Err(Failure::Retry(
                    Duration::from_millis(100),
                    "one in ten fails".into(),
                ))
            } else {
                Ok(None)
            }
        }
    };
    let out = Mutex::new(std::io::stdout());
    let worker = Worker::new(claims, calls, a.queue, handler)
        .name(a.name)
        .lease(Duration::from_millis(a.lease_ms))
        .shutdown_timeout(Duration::from_secs(5))
        .wait_replicas(1, Duration::from_secs(1))
        .on_event(move |e| {
            if let Ok(mut out) = out.lock() {
                // The harness gone (its end of the pipe closed): so is the worker.
                if writeln!(out, "{}", line(e))
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    std::process::exit(0);
                }
            }
        });
    shutdown_on_signal(worker.shutdown_token());
    worker
        .run()
        .await
        .map(|_| ())
        .map_err(|e| format!("worker: {e}"))
}
