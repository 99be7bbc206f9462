//! `make bench`: EMQ.ENQUEUE and EMQ.MENQUEUE against the reference Lua `@enqueue` (EVALSHA)
//! and native HSET+ZADD, on one server, interleaved over several rounds, with identical ids
//! and payloads; in the same rounds, a job's whole life (enqueue, claim, ack) with the queue's
//! event stream off and on; then blocked-claim wake-up latency and delayed-job lateness.
//! Prints Markdown and writes it to docs/bench.md. Figures are measurements, never assertions.

#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::cmd;
use support::{job_id, row_key, set_key, Options, Rng, Server};

const ENQUEUE_LUA: &str = include_str!("../lua/enqueue.lua");
const CONNECTIONS: usize = 50;
const PAYLOAD: &[u8; 48] = b"{\"sku\":4242,\"qty\":1,\"note\":\"forty-eight bytes!\"}";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Lua,
    Module,
    Native,
    Batch(usize),
}

impl Variant {
    fn name(self) -> String {
        match self {
            Variant::Lua => "Lua `@enqueue` (EVALSHA)".into(),
            Variant::Module => "`EMQ.ENQUEUE`".into(),
            Variant::Native => "native `HSET`+`ZADD`".into(),
            Variant::Batch(n) => format!("`EMQ.MENQUEUE` ×{n}"),
        }
    }

    /// The commandstats entries whose time is this variant's server time.
    fn stats(self) -> &'static [&'static str] {
        match self {
            Variant::Lua => &["evalsha"],
            Variant::Module => &["emq.enqueue"],
            Variant::Native => &["hset", "zadd"],
            Variant::Batch(_) => &["emq.menqueue"],
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ids {
    Monotonic,
    Random,
}

struct Sample {
    server_us_per_job: f64,
    cpu_us_per_job: f64,
    jobs_per_sec: f64,
}

/// CPU seconds the server's main thread has used (`INFO cpu`): parsing, dispatch, the
/// commands, replies and the network, all of it.
fn main_thread_cpu(con: &mut redis::Connection) -> f64 {
    let info: String = cmd("INFO").arg("cpu").query(con).expect("INFO cpu");
    ["used_cpu_user_main_thread", "used_cpu_sys_main_thread"]
        .iter()
        .filter_map(|f| {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("{f}:")))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

fn ids_for(ids: Ids, jobs: usize, round: u64) -> Vec<String> {
    match ids {
        Ids::Monotonic => (0..jobs as u64)
            .map(|i| job_id((round << 40) + i + 1))
            .collect(),
        Ids::Random => {
            let mut rng = Rng::new(0x5EED + round);
            (0..jobs).map(|_| job_id(rng.next_u64() >> 2)).collect()
        }
    }
}

/// The sum of one `INFO commandstats` field (`usec`, `calls`) over the commands `names`.
fn command_stat(con: &mut redis::Connection, names: &[&str], field: &str) -> f64 {
    let info: String = cmd("INFO").arg("commandstats").query(con).expect("INFO");
    let key = format!("{field}=");
    let mut total = 0.0;
    for line in info.lines() {
        for name in names {
            if let Some(rest) = line.strip_prefix(&format!("cmdstat_{name}:")) {
                if let Some(value) = rest.split(',').find_map(|kv| kv.strip_prefix(key.as_str())) {
                    total += value.parse::<f64>().unwrap_or(0.0);
                }
            }
        }
    }
    total
}

fn server_usec(con: &mut redis::Connection, names: &[&str]) -> f64 {
    command_stat(con, names, "usec")
}

/// Appends one RESP command.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The end of one complete reply at `pos`, and whether it is an error; `None` if incomplete.
fn reply_end(buf: &[u8], pos: usize) -> Option<(usize, bool)> {
    let line_end = pos + buf.get(pos..)?.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[pos + 1..line_end]).ok()?;
    let next = line_end + 2;
    match buf[pos] {
        b'+' | b':' => Some((next, false)),
        b'-' => Some((next, true)),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some((next, false));
            }
            let end = next + n as usize + 2;
            (end <= buf.len()).then_some((end, false))
        }
        b'*' => {
            let n: i64 = line.parse().ok()?;
            let mut at = next;
            let mut error = false;
            for _ in 0..n.max(0) {
                let (e, err) = reply_end(buf, at)?;
                at = e;
                error |= err;
            }
            Some((at, error))
        }
        _ => None,
    }
}

/// Reads exactly `replies` replies, appending each one's bytes to `keep` when given; panics
/// on an error reply.
fn read_replies(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    replies: usize,
    mut keep: Option<&mut Vec<Vec<u8>>>,
) {
    let mut seen = 0;
    let mut pos = 0;
    let mut chunk = [0u8; 65536];
    while seen < replies {
        while seen < replies {
            match reply_end(buf, pos) {
                Some((end, error)) => {
                    assert!(
                        !error,
                        "error reply: {}",
                        String::from_utf8_lossy(&buf[pos..end])
                    );
                    if let Some(kept) = keep.as_deref_mut() {
                        kept.push(buf[pos..end].to_vec());
                    }
                    pos = end;
                    seen += 1;
                }
                None => break,
            }
        }
        if seen < replies {
            let n = stream.read(&mut chunk).expect("read");
            assert!(n > 0, "server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    buf.drain(..pos);
}

/// An empty server with its statistics reset (`FLUSHALL`, `CONFIG RESETSTAT`).
fn fresh(con: &mut support::Connection) {
    let _: () = cmd("FLUSHALL").query(con).expect("flushall");
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("resetstat");
}

/// The native enqueue of job `id`: `HSET` of its row as the reference script writes it, then
/// `ZADD` to `pending`.
fn encode_native_enqueue(out: &mut Vec<u8>, queue: &str, pending: &str, id: &str) {
    let row = row_key(queue, id);
    encode(
        out,
        &[
            b"HSET",
            row.as_bytes(),
            b"state",
            b"pending",
            b"attempts",
            b"0",
            b"payload",
            PAYLOAD,
        ],
    );
    encode(out, &[b"ZADD", pending.as_bytes(), b"0", id.as_bytes()]);
}

/// The reference `@enqueue` of job `id`, by `EVALSHA` of the loaded script `sha`.
fn encode_lua_enqueue(out: &mut Vec<u8>, sha: &str, queue: &str, pending: &str, id: &str) {
    let row = row_key(queue, id);
    encode(
        out,
        &[
            b"EVALSHA",
            sha.as_bytes(),
            b"2",
            row.as_bytes(),
            pending.as_bytes(),
            id.as_bytes(),
            PAYLOAD,
        ],
    );
}

/// One pipeline window: pre-encoded commands and how many replies they ask for.
type Window = (Vec<u8>, usize);

/// Sends each connection's windows in turn, waiting for each window's replies before the next;
/// keeps the replies when `keep`.
fn exchange(
    stream: &mut TcpStream,
    inbox: &mut Vec<u8>,
    windows: &[Window],
    keep: bool,
) -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    for (buf, replies) in windows {
        stream.write_all(buf).expect("write");
        read_replies(stream, inbox, *replies, keep.then_some(&mut kept));
    }
    kept
}

/// Runs each of `work` on a connection of its own, all released at once: the wall time (s),
/// the server main thread's CPU over it (s), and what each returned. Whatever `work` encodes
/// before it is handed over is outside the clock.
fn timed<R, F>(server: &Server, admin: &mut redis::Connection, work: Vec<F>) -> (f64, f64, Vec<R>)
where
    F: FnOnce(&mut TcpStream, &mut Vec<u8>) -> R + Send + 'static,
    R: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(work.len() + 1));
    let handles: Vec<_> = work
        .into_iter()
        .map(|w| {
            let mut stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut inbox = Vec::with_capacity(1 << 16);
                barrier.wait();
                w(&mut stream, &mut inbox)
            })
        })
        .collect();
    let cpu_before = main_thread_cpu(admin);
    barrier.wait();
    let start = Instant::now();
    let out: Vec<R> = handles
        .into_iter()
        .map(|h| h.join().expect("client"))
        .collect();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = main_thread_cpu(admin) - cpu_before;
    (elapsed, cpu, out)
}

/// One timed run: `ids` enqueued by `CONNECTIONS` clients, `depth` commands in flight each.
/// Commands are encoded to RESP before the clock starts, so the client spends its time on
/// the wire, not on building commands: the server is what is measured.
fn run(server: &Server, variant: Variant, ids: &[String], depth: usize) -> Sample {
    let mut admin = server.conn();
    fresh(&mut admin);
    let sha: String = cmd("SCRIPT")
        .arg("LOAD")
        .arg(ENQUEUE_LUA)
        .query(&mut admin)
        .expect("load");
    let queue = "bench";
    let pending = set_key(queue, "pending");
    let per_call = match variant {
        Variant::Batch(n) => n,
        _ => 1,
    };
    let work: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let share: Vec<&String> = ids.iter().skip(c).step_by(CONNECTIONS).collect();
            let mut windows: Vec<Window> = Vec::new();
            for window in share.chunks(per_call * depth) {
                let mut buf = Vec::new();
                let mut replies = 0;
                for call in window.chunks(per_call) {
                    match variant {
                        Variant::Lua => {
                            encode_lua_enqueue(&mut buf, &sha, queue, &pending, call[0]);
                            replies += 1;
                        }
                        Variant::Module => {
                            encode(
                                &mut buf,
                                &[
                                    b"EMQ.ENQUEUE",
                                    queue.as_bytes(),
                                    call[0].as_bytes(),
                                    PAYLOAD,
                                ],
                            );
                            replies += 1;
                        }
                        Variant::Native => {
                            encode_native_enqueue(&mut buf, queue, &pending, call[0]);
                            replies += 2;
                        }
                        Variant::Batch(_) => {
                            let mut args: Vec<&[u8]> = vec![b"EMQ.MENQUEUE", queue.as_bytes()];
                            for id in call {
                                args.push(id.as_bytes());
                                args.push(PAYLOAD);
                            }
                            encode(&mut buf, &args);
                            replies += 1;
                        }
                    }
                }
                windows.push((buf, replies));
            }
            move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
                exchange(stream, inbox, &windows, false);
            }
        })
        .collect();
    let (elapsed, cpu, _) = timed(server, &mut admin, work);
    let card: usize = cmd("ZCARD").arg(&pending).query(&mut admin).expect("zcard");
    assert_eq!(card, ids.len(), "{variant:?} enqueued every job");
    let usec = server_usec(&mut admin, variant.stats());
    Sample {
        server_us_per_job: usec / ids.len() as f64,
        cpu_us_per_job: cpu * 1e6 / ids.len() as f64,
        jobs_per_sec: ids.len() as f64 / elapsed,
    }
}

/// Jobs per `EMQ.MENQUEUE` and per claim in the batched whole-life run.
const LIFE_BATCH: usize = 100;
/// A claimed job's lease: far longer than any run, so none expires and goes back.
const LIFE_LEASE_MS: &[u8] = b"60000";
/// The event stream's cap when it is on.
const EVENTS_MAXLEN: &str = "10000";

/// The header of the RESP element at `pos` (its type byte and number), moving past it.
fn header(buf: &[u8], pos: &mut usize) -> (u8, i64) {
    let end = *pos
        + buf[*pos..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a complete reply");
    let kind = buf[*pos];
    let n = std::str::from_utf8(&buf[*pos + 1..end])
        .ok()
        .and_then(|t| t.parse().ok())
        .expect("a number");
    *pos = end + 2;
    (kind, n)
}

fn bulk<'a>(buf: &'a [u8], pos: &mut usize) -> &'a [u8] {
    let (kind, n) = header(buf, pos);
    assert_eq!(kind, b'$', "a bulk string");
    let text = &buf[*pos..*pos + n as usize];
    *pos += n as usize + 2;
    text
}

/// Each job of an `EMQ.CLAIM` reply (RESP2: an array of `[id, payload, attempts]`) as the
/// `id` and `token` of its `EMQ.ACK`: the token is the reply's third element.
fn claimed(reply: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pos = 0;
    let (kind, jobs) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "a claim replies an array");
    (0..jobs)
        .map(|_| {
            assert_eq!(
                header(reply, &mut pos),
                (b'*', 3),
                "[id, payload, attempts]"
            );
            let id = bulk(reply, &mut pos).to_vec();
            assert_eq!(bulk(reply, &mut pos), PAYLOAD, "the job's payload");
            let (kind, token) = header(reply, &mut pos);
            assert_eq!(kind, b':', "attempts is an integer");
            (id, token.to_string().into_bytes())
        })
        .collect()
}

fn encode_ack(out: &mut Vec<u8>, queue: &str, id: &[u8], token: &[u8]) {
    encode(out, &[b"EMQ.ACK", queue.as_bytes(), id, token]);
}

/// What a whole-life run turns on for its queue.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    /// Nothing: the queue as a Lua speaker's.
    Plain,
    /// The event stream (`EMQ.EVENTS ... ON`).
    Events,
    /// Claim limits that never bind (`EMQ.LIMIT ... CONCURRENCY 1000000 RATE 10000 PER 1`):
    /// every claim reads them, counts its room and writes the rate window.
    Limits,
    /// Every enqueue with a unique key of its own (`EMQ.ENQUEUE ... UNIQUE <id>`): a lookup and
    /// a table write per job. Batches take no unique keys.
    Unique,
}

/// An empty server, the queue's `policy` set, and the statistics reset.
fn fresh_queue(con: &mut support::Connection, queue: &str, policy: Policy) {
    fresh(con);
    let setup = match policy {
        Policy::Plain | Policy::Unique => return,
        Policy::Events => cmd("EMQ.EVENTS")
            .arg(queue)
            .arg("ON")
            .arg("MAXLEN")
            .arg(EVENTS_MAXLEN)
            .clone(),
        Policy::Limits => cmd("EMQ.LIMIT")
            .arg(queue)
            .arg("CONCURRENCY")
            .arg(1_000_000)
            .arg("RATE")
            .arg(10_000)
            .arg("PER")
            .arg(1)
            .clone(),
    };
    let _: redis::Value = setup.query(con).expect("the queue's policy");
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("resetstat");
}

/// Every job acknowledged: nothing left pending or active, one acknowledgement per job in the
/// commands `how` settles with, and with the stream on one `XADD` (run inside the module's
/// call) per transition.
fn check_done(con: &mut support::Connection, queue: &str, jobs: usize, policy: Policy, how: Life) {
    for set in ["pending", "active"] {
        let card: usize = cmd("ZCARD")
            .arg(set_key(queue, set))
            .query(con)
            .expect("zcard");
        assert_eq!(card, 0, "no job left {set}");
    }
    let (settles, per_job) = match how {
        Life::Acks => ("emq.ack", 1),
        Life::Mack | Life::ClaimNext => ("emq.mack", LIFE_BATCH),
        Life::Lua => ("evalsha", 0),
        Life::Native => ("pexpire", 1),
    };
    if per_job > 0 {
        let calls = command_stat(con, &[settles], "calls") as usize;
        assert_eq!(
            calls * per_job,
            jobs,
            "{how:?}: one acknowledgement per job"
        );
    }
    let appended = command_stat(con, &["xadd"], "calls") as usize;
    let expected = if policy == Policy::Events {
        3 * jobs
    } else {
        0
    };
    assert_eq!(appended, expected, "enqueued, claimed and acked appended");
}

fn sample(jobs: usize, usec: f64, cpu: f64, elapsed: f64) -> Sample {
    Sample {
        server_us_per_job: usec / jobs as f64,
        cpu_us_per_job: cpu * 1e6 / jobs as f64,
        jobs_per_sec: jobs as f64 / elapsed,
    }
}

/// How a batched whole-life run claims and settles (the lifecycle table's variants).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Life {
    /// `EMQ.MENQUEUE` ×100 with `EMQ.CLAIM COUNT 100`, then one `EMQ.ACK` per job, pipelined.
    Acks,
    /// The same, settled by one `EMQ.MACK` of the 100.
    Mack,
    /// `EMQ.MENQUEUE` of the next 100 with `EMQ.MACK` of the last 100 `CLAIM 100`: one round
    /// trip a batch.
    ClaimNext,
    /// The reference `@enqueue` script per job, the bench's claim script (`COUNT 100`), then
    /// its ack script per job, all by `EVALSHA`.
    Lua,
    /// The floor, neither atomic nor fenced: `HSET`+`ZADD` per job with `ZPOPMIN pending 100`,
    /// then `ZADD active` of the 100 with `HSET`/`HINCRBY`/`HGET` per job, then
    /// `ZREM`/`HSET`/`PEXPIRE` per job.
    Native,
}

impl Life {
    const ALL: [Life; 5] = [
        Life::Acks,
        Life::Mack,
        Life::ClaimNext,
        Life::Lua,
        Life::Native,
    ];

    fn name(self) -> &'static str {
        match self {
            Life::Acks => "EchoMQ: `EMQ.MENQUEUE` ×100, `EMQ.CLAIM COUNT 100`, `EMQ.ACK` ×100",
            Life::Mack => "EchoMQ: `EMQ.MENQUEUE` ×100, `EMQ.CLAIM COUNT 100`, `EMQ.MACK` ×100",
            Life::ClaimNext => "EchoMQ: `EMQ.MENQUEUE` ×100, `EMQ.MACK` ×100 `CLAIM 100`",
            Life::Lua => "Lua: `@enqueue` ×100, claim script `COUNT 100`, ack script ×100",
            Life::Native => "native floor (not atomic, no token check)",
        }
    }

    /// The commandstats entries whose time is this variant's server time.
    fn stats(self) -> &'static [&'static str] {
        match self {
            Life::Acks => &["emq.menqueue", "emq.claim", "emq.ack"],
            Life::Mack | Life::ClaimNext => &["emq.menqueue", "emq.claim", "emq.mack"],
            Life::Lua => &["evalsha"],
            Life::Native => &[
                "hset", "zadd", "zpopmin", "hincrby", "hget", "zrem", "pexpire",
            ],
        }
    }

    /// Round trips a batch of 100 takes, once under way.
    fn round_trips(self) -> usize {
        match self {
            Life::ClaimNext => 1,
            Life::Native => 3,
            _ => 2,
        }
    }
}

const CLAIM_LUA: &str = include_str!("lua/claim.lua");
const ACK_LUA: &str = include_str!("lua/ack.lua");

/// `EMQ.CLAIM <queue> COUNT <n> LEASE`, the lease outliving the run.
fn encode_claim(out: &mut Vec<u8>, queue: &str, n: usize) {
    let count = n.to_string();
    encode(
        out,
        &[
            b"EMQ.CLAIM",
            queue.as_bytes(),
            b"COUNT",
            count.as_bytes(),
            b"LEASE",
            LIFE_LEASE_MS,
        ],
    );
}

/// `EMQ.MACK` of `jobs` (id and token each), with `CLAIM <n> LEASE` when `claim` is `Some(n)`.
fn encode_mack(out: &mut Vec<u8>, queue: &str, jobs: &[(Vec<u8>, Vec<u8>)], claim: Option<usize>) {
    let mut args: Vec<&[u8]> = vec![b"EMQ.MACK", queue.as_bytes()];
    for (id, token) in jobs {
        args.push(id);
        args.push(token);
    }
    let count = claim.map(|n| n.to_string());
    if let Some(count) = &count {
        args.extend([
            b"CLAIM".as_slice(),
            count.as_bytes(),
            b"LEASE",
            LIFE_LEASE_MS,
        ]);
    }
    encode(out, &args);
}

/// The ids of a `ZPOPMIN` reply (RESP2: member, score, member, score, ...).
fn popped(reply: &[u8]) -> Vec<Vec<u8>> {
    let mut pos = 0;
    let (kind, n) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "ZPOPMIN replies an array");
    (0..n / 2)
        .map(|_| {
            let id = bulk(reply, &mut pos).to_vec();
            bulk(reply, &mut pos);
            id
        })
        .collect()
}

/// The jobs of an `EMQ.MACK ... CLAIM` reply (`[places, jobs]`), every place `1`.
fn claimed_next(reply: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut pos = 0;
    assert_eq!(header(reply, &mut pos), (b'*', 2), "[places, jobs]");
    let (kind, places) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "the places");
    for _ in 0..places {
        assert_eq!(header(reply, &mut pos), (b':', 1), "each job acknowledged");
    }
    claimed(&reply[pos..])
}

/// The whole life of `ids`, batched, as `how` runs it: each client enqueues 100 jobs and claims
/// 100 together, then settles them, until its share is done. A claim takes the queue's oldest
/// pending jobs, often another client's; it always finds as many as its own batch put in,
/// since no client claims more than it enqueued.
fn whole_life(server: &Server, ids: &[String], policy: Policy, how: Life) -> Sample {
    let mut admin = server.conn();
    let queue = "life";
    fresh_queue(&mut admin, queue, policy);
    let mut load = |script: &str| -> String {
        cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query(&mut admin)
            .expect("load")
    };
    let shas = [load(ENQUEUE_LUA), load(CLAIM_LUA), load(ACK_LUA)];
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .expect("resetstat");
    let (pending, active) = (set_key(queue, "pending"), set_key(queue, "active"));
    let prefix = row_key(queue, "");
    let ttl = b"86400000";
    let batches: Vec<&[String]> = ids.chunks(LIFE_BATCH).collect();
    let work: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            // Per batch: its enqueues (with the claim, but for claim-next), and how many.
            let cycles: Vec<Window> = batches
                .iter()
                .skip(c)
                .step_by(CONNECTIONS)
                .map(|batch| {
                    let mut buf = Vec::new();
                    let count = batch.len().to_string();
                    match how {
                        Life::Acks | Life::Mack | Life::ClaimNext => {
                            let mut args: Vec<&[u8]> = vec![b"EMQ.MENQUEUE", queue.as_bytes()];
                            for id in batch.iter() {
                                args.push(id.as_bytes());
                                args.push(PAYLOAD);
                            }
                            encode(&mut buf, &args);
                            if how != Life::ClaimNext {
                                encode_claim(&mut buf, queue, batch.len());
                            }
                        }
                        Life::Lua => {
                            for id in batch.iter() {
                                encode_lua_enqueue(&mut buf, &shas[0], queue, &pending, id);
                            }
                            encode(
                                &mut buf,
                                &[
                                    b"EVALSHA",
                                    shas[1].as_bytes(),
                                    b"2",
                                    pending.as_bytes(),
                                    active.as_bytes(),
                                    count.as_bytes(),
                                    LIFE_LEASE_MS,
                                    prefix.as_bytes(),
                                ],
                            );
                        }
                        Life::Native => {
                            for id in batch.iter() {
                                encode_native_enqueue(&mut buf, queue, &pending, id);
                            }
                            encode(
                                &mut buf,
                                &[b"ZPOPMIN", pending.as_bytes(), count.as_bytes()],
                            );
                        }
                    }
                    (buf, batch.len())
                })
                .collect();
            let (queue, active, prefix, shas) =
                (queue, active.clone(), prefix.clone(), shas.clone());
            move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
                let mut out = Vec::new();
                let mut replies = Vec::new();
                // The jobs claimed and not yet settled (claim-next's carry from batch to batch).
                let mut held: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                for (buf, jobs) in &cycles {
                    out.clear();
                    out.extend_from_slice(buf);
                    replies.clear();
                    let enqueues = match how {
                        Life::Acks | Life::Mack | Life::ClaimNext => 1,
                        Life::Lua | Life::Native => *jobs * if how == Life::Native { 2 } else { 1 },
                    };
                    if how == Life::ClaimNext {
                        if held.is_empty() {
                            encode_claim(&mut out, queue, *jobs);
                        } else {
                            encode_mack(&mut out, queue, &held, Some(*jobs));
                        }
                    }
                    stream.write_all(&out).expect("write");
                    read_replies(stream, inbox, enqueues + 1, Some(&mut replies));
                    let last = &replies[enqueues];
                    let got = match how {
                        Life::ClaimNext if held.is_empty() => claimed(last),
                        Life::ClaimNext => claimed_next(last),
                        Life::Native => popped(last)
                            .into_iter()
                            .map(|id| (id, Vec::new()))
                            .collect(),
                        _ => claimed(last),
                    };
                    assert_eq!(got.len(), *jobs, "the claim found the batch's jobs");
                    out.clear();
                    let settles = match how {
                        Life::ClaimNext => {
                            held = got;
                            continue;
                        }
                        Life::Acks => {
                            for (id, token) in &got {
                                encode_ack(&mut out, queue, id, token);
                            }
                            got.len()
                        }
                        Life::Mack => {
                            encode_mack(&mut out, queue, &got, None);
                            1
                        }
                        Life::Lua => {
                            for (id, token) in &got {
                                let row = [prefix.as_bytes(), id].concat();
                                encode(
                                    &mut out,
                                    &[
                                        b"EVALSHA",
                                        shas[2].as_bytes(),
                                        b"2",
                                        &row,
                                        active.as_bytes(),
                                        id,
                                        token,
                                        ttl,
                                    ],
                                );
                            }
                            got.len()
                        }
                        Life::Native => {
                            // The claim's second step, then the acks' round trip.
                            let deadline = (now_unix_ms() as i64 + 60_000).to_string();
                            let mut args: Vec<&[u8]> = vec![b"ZADD", active.as_bytes()];
                            for (id, _) in &got {
                                args.push(deadline.as_bytes());
                                args.push(id);
                            }
                            encode(&mut out, &args);
                            for (id, _) in &got {
                                let row = [prefix.as_bytes(), id].concat();
                                encode(&mut out, &[b"HSET", &row, b"state", b"active"]);
                                encode(&mut out, &[b"HINCRBY", &row, b"attempts", b"1"]);
                                encode(&mut out, &[b"HGET", &row, b"payload"]);
                            }
                            stream.write_all(&out).expect("write");
                            read_replies(stream, inbox, 1 + 3 * got.len(), None);
                            out.clear();
                            for (id, _) in &got {
                                let row = [prefix.as_bytes(), id].concat();
                                encode(&mut out, &[b"ZREM", active.as_bytes(), id]);
                                encode(&mut out, &[b"HSET", &row, b"state", b"done"]);
                                encode(&mut out, &[b"PEXPIRE", &row, ttl]);
                            }
                            3 * got.len()
                        }
                    };
                    stream.write_all(&out).expect("write");
                    read_replies(stream, inbox, settles, None);
                }
                if !held.is_empty() {
                    out.clear();
                    encode_mack(&mut out, queue, &held, None);
                    stream.write_all(&out).expect("write");
                    read_replies(stream, inbox, 1, None);
                }
            }
        })
        .collect();
    let (elapsed, cpu, _) = timed(server, &mut admin, work);
    check_done(&mut admin, queue, ids.len(), policy, how);
    let usec = server_usec(&mut admin, how.stats());
    sample(ids.len(), usec, cpu, elapsed)
}

/// The life of `ids` one job at a time, each transition timed on its own: every job enqueued
/// with `EMQ.ENQUEUE`, then claimed with `EMQ.CLAIM COUNT 1`, then acknowledged, `depth`
/// commands in flight per client. The acks are encoded from the claims' replies before their
/// clock starts. Samples for the enqueues, the claims, the acks and the three together.
fn one_at_a_time(server: &Server, ids: &[String], policy: Policy, depth: usize) -> [Sample; 4] {
    let mut admin = server.conn();
    let queue = "life";
    fresh_queue(&mut admin, queue, policy);
    let shares: Vec<Vec<&String>> = (0..CONNECTIONS)
        .map(|c| ids.iter().skip(c).step_by(CONNECTIONS).collect())
        .collect();
    let windows = |commands: Vec<Vec<u8>>| -> Vec<Window> {
        commands
            .chunks(depth)
            .map(|w| (w.concat(), w.len()))
            .collect()
    };
    let send = |windows: Vec<Window>, keep: bool| {
        move |stream: &mut TcpStream, inbox: &mut Vec<u8>| exchange(stream, inbox, &windows, keep)
    };

    let enqueues: Vec<_> = shares
        .iter()
        .map(|share| {
            let commands = share
                .iter()
                .map(|id| {
                    let mut buf = Vec::new();
                    let mut args: Vec<&[u8]> =
                        vec![b"EMQ.ENQUEUE", queue.as_bytes(), id.as_bytes(), PAYLOAD];
                    if policy == Policy::Unique {
                        args.extend([&b"UNIQUE"[..], id.as_bytes()]);
                    }
                    encode(&mut buf, &args);
                    buf
                })
                .collect();
            send(windows(commands), false)
        })
        .collect();
    let (enqueue_s, enqueue_cpu, _) = timed(server, &mut admin, enqueues);
    let card: usize = cmd("ZCARD")
        .arg(set_key(queue, "pending"))
        .query(&mut admin)
        .expect("zcard");
    assert_eq!(card, ids.len(), "every job pending");

    let mut claim = Vec::new();
    encode(
        &mut claim,
        &[
            b"EMQ.CLAIM",
            queue.as_bytes(),
            b"COUNT",
            b"1",
            b"LEASE",
            LIFE_LEASE_MS,
        ],
    );
    let claims: Vec<_> = shares
        .iter()
        .map(|share| send(windows(vec![claim.clone(); share.len()]), true))
        .collect();
    let (claim_s, claim_cpu, replies) = timed(server, &mut admin, claims);

    let acks: Vec<_> = replies
        .iter()
        .map(|replies| {
            let commands = replies
                .iter()
                .map(|reply| {
                    let jobs = claimed(reply);
                    assert_eq!(jobs.len(), 1, "each claim took a job");
                    let mut buf = Vec::new();
                    encode_ack(&mut buf, queue, &jobs[0].0, &jobs[0].1);
                    buf
                })
                .collect();
            send(windows(commands), false)
        })
        .collect();
    let (ack_s, ack_cpu, _) = timed(server, &mut admin, acks);
    check_done(&mut admin, queue, ids.len(), policy, Life::Acks);

    let usec = |admin: &mut support::Connection, name: &str| server_usec(admin, &[name]);
    let (enqueue_us, claim_us, ack_us) = (
        usec(&mut admin, "emq.enqueue"),
        usec(&mut admin, "emq.claim"),
        usec(&mut admin, "emq.ack"),
    );
    let n = ids.len();
    [
        sample(n, enqueue_us, enqueue_cpu, enqueue_s),
        sample(n, claim_us, claim_cpu, claim_s),
        sample(n, ack_us, ack_cpu, ack_s),
        sample(
            n,
            enqueue_us + claim_us + ack_us,
            enqueue_cpu + claim_cpu + ack_cpu,
            enqueue_s + claim_s + ack_s,
        ),
    ]
}

/// The rows of the whole-life table, each measured with the event stream off and on.
const LIFE_ROWS: [&str; 5] = [
    "whole life, batched: `EMQ.MENQUEUE` ×100, `EMQ.CLAIM` `COUNT 100`, `EMQ.ACK` ×100",
    "one at a time: `EMQ.ENQUEUE`",
    "one at a time: `EMQ.CLAIM` `COUNT 1`",
    "one at a time: `EMQ.ACK`",
    "one at a time: the three together",
];

/// Each row's samples by policy, `[plain, events, limits, unique]`, one per round (none for a
/// batch with unique keys, which batches do not take).
type LifeSamples = [[Vec<Sample>; 4]; 5];

/// The lifecycle table's samples, one list per [`Life`] variant.
type LifecycleSamples = [Vec<Sample>; 5];

const POLICIES: [Policy; 4] = [
    Policy::Plain,
    Policy::Events,
    Policy::Limits,
    Policy::Unique,
];

/// One round of the whole-life workloads on `ids`: batched, then one at a time, under each
/// policy in turn.
fn life_round(
    server: &Server,
    ids: &[String],
    depth: usize,
    life: &mut LifeSamples,
    lifecycle: &mut LifecycleSamples,
) {
    for (v, how) in Life::ALL.into_iter().enumerate() {
        let s = whole_life(server, ids, Policy::Plain, how);
        eprintln!(
            "         lifecycle, {:<10}           commandstats {:.3} cpu {:.3} jobs/s {:.0}",
            format!("{how:?}"),
            s.server_us_per_job,
            s.cpu_us_per_job,
            s.jobs_per_sec
        );
        lifecycle[v].push(s);
    }
    for (p, policy) in POLICIES.into_iter().enumerate() {
        if policy == Policy::Unique {
            continue;
        }
        let s = whole_life(server, ids, policy, Life::Acks);
        eprintln!(
            "         whole life, {:<8}             commandstats {:.3} cpu {:.3} jobs/s {:.0}",
            format!("{policy:?}"),
            s.server_us_per_job,
            s.cpu_us_per_job,
            s.jobs_per_sec
        );
        life[0][p].push(s);
    }
    for (p, policy) in POLICIES.into_iter().enumerate() {
        for (row, s) in one_at_a_time(server, ids, policy, depth)
            .into_iter()
            .enumerate()
        {
            eprintln!(
                "         {:<22} {:<8} commandstats {:.3} cpu {:.3} jobs/s {:.0}",
                [
                    "one by one: enqueue",
                    "one by one: claim",
                    "one by one: ack",
                    "one by one: all"
                ][row],
                format!("{policy:?}"),
                s.server_us_per_job,
                s.cpu_us_per_job,
                s.jobs_per_sec
            );
            life[row + 1][p].push(s);
        }
    }
}

/// A median with its min and max.
type Spread = (f64, f64, f64);

fn median(mut v: Vec<f64>) -> Spread {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// One row of the latency table: the samples (sorted, in ms), their median, p99 and maximum,
/// with `decimals` places.
fn latency_row(md: &mut String, measure: &str, sorted: &[f64], decimals: usize) {
    let _ = writeln!(
        md,
        "| {measure} | {} | {:.decimals$} | {:.decimals$} | {:.decimals$} |",
        sorted.len(),
        percentile(sorted, 0.5),
        percentile(sorted, 0.99),
        sorted.last().copied().unwrap_or(0.0)
    );
}

fn now_unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// Blocked-claim wake-up latency: enqueue -> the blocked claimer has the job, in ms.
fn wake_up_latency(server: &Server, samples: usize) -> Vec<f64> {
    let mut producer = server.conn();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut waiter = server.conn();
        let q = format!("wake{i}");
        let h = thread::spawn(move || {
            let jobs: Option<Vec<(String, Vec<u8>, i64)>> = cmd("EMQ.CLAIM")
                .arg(&q)
                .arg("BLOCK")
                .arg(5000)
                .query(&mut waiter)
                .expect("claim");
            (Instant::now(), jobs.map(|j| j.len()))
        });
        // Let the claimer block first.
        thread::sleep(Duration::from_millis(3));
        let sent = Instant::now();
        let _: i64 = cmd("EMQ.ENQUEUE")
            .arg(format!("wake{i}"))
            .arg(job_id(i as u64 + 1))
            .arg("x")
            .query(&mut producer)
            .expect("enqueue");
        let (got, n) = h.join().expect("waiter");
        assert_eq!(n, Some(1));
        out.push(got.duration_since(sent).as_secs_f64() * 1000.0);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// Delayed-job lateness: how long after its due time a blocked claimer receives a job, in ms.
fn delayed_lateness(server: &Server, samples: usize) -> Vec<f64> {
    let mut producer = server.conn();
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut waiter = server.conn();
        let q = format!("late{i}");
        let due = now_unix_ms().round() as i64 + 30;
        let _: i64 = cmd("EMQ.ENQUEUE")
            .arg(&q)
            .arg(job_id(i as u64 + 1))
            .arg("x")
            .arg("AT")
            .arg(due)
            .query(&mut producer)
            .expect("enqueue");
        let jobs: Option<Vec<(String, Vec<u8>, i64)>> = cmd("EMQ.CLAIM")
            .arg(&q)
            .arg("BLOCK")
            .arg(5000)
            .query(&mut waiter)
            .expect("claim");
        assert!(jobs.is_some());
        out.push(now_unix_ms() - due as f64);
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// Main-thread CPU per round of `ZADD`, `SET ... EX` and `DEL` on keys outside EchoMQ's
/// grammar, `rounds` of them pipelined in windows of 100 rounds on one connection (µs a round).
fn unrelated_round_cpu(server: &Server, rounds: usize, pass: usize) -> f64 {
    let mut admin = server.conn();
    fresh(&mut admin);
    let windows: Vec<Window> = (0..rounds)
        .collect::<Vec<_>>()
        .chunks(100)
        .map(|chunk| {
            let mut out = Vec::new();
            for &i in chunk {
                let (z, k) = (format!("cache:{pass}:z{i}"), format!("cache:{pass}:k{i}"));
                encode(&mut out, &[b"ZADD", z.as_bytes(), b"1", b"member"]);
                encode(&mut out, &[b"SET", k.as_bytes(), PAYLOAD, b"EX", b"3600"]);
                encode(&mut out, &[b"DEL", k.as_bytes()]);
            }
            (out, chunk.len() * 3)
        })
        .collect();
    let (_, cpu, _) = timed(
        server,
        &mut admin,
        vec![move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
            exchange(stream, inbox, &windows, false);
        }],
    );
    cpu * 1e6 / rounds as f64
}

/// What loading EchoMQ costs commands on other keys, by main-thread CPU: the same rounds on a
/// server without the module, with it, and with it set not to learn foreign writes,
/// interleaved over `passes`. The medians (µs a round) and the ratios to the bare server.
fn unrelated_key_tax(md: &mut String, rounds: usize, passes: usize) {
    let servers = [
        (
            "without the module",
            Server::start(Options::without_module()),
        ),
        ("with EchoMQ", Server::start(Options::default())),
        (
            "with EchoMQ, `emq.learn-foreign-writes no`",
            Server::start(Options::default().arg("emq.learn-foreign-writes", "no")),
        ),
    ];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
    for pass in 0..passes {
        for (i, (_, server)) in servers.iter().enumerate() {
            cpu[i].push(unrelated_round_cpu(server, rounds, pass));
        }
    }
    let _ = writeln!(
        md,
        "## What EchoMQ costs commands on other keys\n\nMain-thread CPU (`INFO cpu`) per round of `ZADD`, `SET ... EX 3600` and `DEL` on keys outside the grammar, {rounds} rounds pipelined 100 at a time on one connection, on three servers side by side, interleaved over {passes} passes; ratios are medians of the per-pass ratios to the server without the module. `make profile` counts the same round in instructions.\n\n| server | µs/round (median, min–max) | × without the module |\n|---|---|---|"
    );
    for (i, (name, _)) in servers.iter().enumerate() {
        let (m, lo, hi) = median(cpu[i].clone());
        let ratio = median(cpu[i].iter().zip(&cpu[0]).map(|(a, b)| a / b).collect());
        let _ = writeln!(
            md,
            "| {name} | {m:.2} ({lo:.2}–{hi:.2}) | {:.3}× ({:.3}–{:.3}) |",
            ratio.0, ratio.1, ratio.2
        );
    }
    let _ = writeln!(md);
}

/// An idle server's counters at one moment: its main thread's CPU (`INFO cpu`, seconds) and its
/// wake-ups (the main thread's voluntary context switches, each a return from waiting on its
/// event loop; `/proc`, `None` where it cannot say).
fn idle_mark(server: &Server, con: &mut redis::Connection) -> (f64, Option<f64>) {
    let switches = || -> Option<f64> {
        let pid = server.pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
    };
    (main_thread_cpu(con), switches())
}

/// What idle servers cost over the same `secs`, side by side: each one's main-thread CPU (ms a
/// second) and wake-ups a second ([`idle_mark`]).
type Idle = (f64, Option<f64>);
fn idle_costs(servers: &mut [(&Server, redis::Connection)], secs: u64) -> Vec<Idle> {
    let before: Vec<Idle> = servers.iter_mut().map(|(s, c)| idle_mark(s, c)).collect();
    thread::sleep(Duration::from_secs(secs));
    servers
        .iter_mut()
        .zip(before)
        .map(|((s, c), (cpu, woke))| {
            let (cpu_after, woke_after) = idle_mark(s, c);
            let per_sec = |v: f64| v / secs as f64;
            (
                per_sec((cpu_after - cpu) * 1000.0),
                woke.zip(woke_after).map(|(a, b)| per_sec(b - a)),
            )
        })
        .collect()
}

/// Fills an empty server with `queues` queues, each holding a job due in an hour, and waits for
/// the timer's first visit to each (after which it sleeps until the earliest is due).
fn watch_delayed_queues(con: &mut redis::Connection, queues: usize) {
    let _: () = cmd("FLUSHALL").query(con).expect("flushall");
    for chunk in (0..queues).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.cmd("EMQ.ENQUEUE")
                .arg(format!("idle{i}"))
                .arg(job_id(i as u64 + 1))
                .arg("x")
                .arg("DELAY")
                .arg(3_600_000)
                .ignore();
        }
        let _: () = p.query(con).expect("enqueue delayed");
    }
    let watched = support::info_int(con, "emq", "emq_watched_queues");
    assert_eq!(watched, queues as i64, "every queue watched");
    let visited = support::wait_until(Duration::from_secs(120), || {
        support::info_int(con, "emq", "emq_timer_due_queues") == 0
    });
    assert!(visited, "the timer visited every queue");
    thread::sleep(Duration::from_millis(200));
}

/// The lateness of delayed jobs (`samples`) on a server whose timer watches `queues` other
/// queues, each a job due in an hour; the server is flushed after.
fn timer_load(server: &Server, queues: usize, samples: usize) -> Vec<f64> {
    let mut con = server.conn();
    watch_delayed_queues(&mut con, queues);
    let late = delayed_lateness(server, samples);
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    let watched = support::info_int(&mut con, "emq", "emq_watched_queues");
    assert_eq!(watched, 0, "flushed queues forgotten");
    late
}

/// Writes natively the keys `queues` queues of one job due in an hour would have (the rows and
/// `schedule` sets EchoMQ writes), on a server without the module.
fn write_native_queues(con: &mut redis::Connection, queues: usize) {
    let due = now_unix_ms() as i64 + 3_600_000;
    for chunk in (0..queues).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for &i in chunk {
            let (q, id) = (format!("idle{i}"), job_id(i as u64 + 1));
            p.cmd("HSET")
                .arg(row_key(&q, &id))
                .arg(&["state", "scheduled", "attempts", "0", "payload", "x"])
                .ignore()
                .cmd("ZADD")
                .arg(set_key(&q, "schedule"))
                .arg(due)
                .arg(&id)
                .ignore();
        }
        let _: () = p.query(con).expect("the same keys, natively");
    }
    thread::sleep(Duration::from_millis(200));
}

/// How long both servers of the idle table rest after they are filled, before they are measured.
const IDLE_SETTLE_SECS: u64 = 3;

/// The idle table: `rounds` rounds, each on two fresh servers, one without the module and one
/// with it, measured side by side over the same seconds ([`idle_costs`]): empty, then holding
/// `queues` queues; medians (min–max).
fn idle_table(md: &mut String, queues: usize, secs: u64, rounds: usize) {
    let mut rows: [Vec<Idle>; 4] = Default::default();
    for round in 0..rounds {
        let plain = Server::start(Options::without_module());
        let module = Server::start(Options::default());
        let mut servers = [(&plain, plain.conn()), (&module, module.conn())];
        thread::sleep(Duration::from_millis(200));
        let empty = idle_costs(&mut servers, secs);
        write_native_queues(&mut servers[0].1, queues);
        watch_delayed_queues(&mut servers[1].1, queues);
        // Both settle alike after their writes (the plain server's came first): the seconds
        // after a burst of writes are not idle on either.
        thread::sleep(Duration::from_secs(IDLE_SETTLE_SECS));
        let full = idle_costs(&mut servers, secs);
        for (row, idle) in rows.iter_mut().zip([empty[0], empty[1], full[0], full[1]]) {
            row.push(idle);
        }
        eprintln!("done: idle round {}", round + 1);
    }
    let cell = |v: &[Idle]| {
        let (m, lo, hi) = median(v.iter().map(|i| i.0).collect());
        let woke: Vec<f64> = v.iter().filter_map(|i| i.1).collect();
        let woke = if woke.len() == v.len() {
            let (m, lo, hi) = median(woke);
            format!("{m:.1} ({lo:.1}–{hi:.1})")
        } else {
            "-".to_string()
        };
        format!("{m:.2} ({lo:.2}–{hi:.2}) | {woke}")
    };
    let ratio = |with: &[Idle], without: &[Idle]| {
        let (m, lo, hi) = median(with.iter().zip(without).map(|(a, b)| a.0 / b.0).collect());
        format!("{m:.2}× ({lo:.2}–{hi:.2})")
    };
    let _ = writeln!(
        md,
        "## What an idle server costs\n\nThe main thread over {secs} s with nothing due: its CPU (ms a second, `INFO cpu`) and its wake-ups (its voluntary context switches a second, `/proc/<pid>/task/<pid>/status`: each a return from waiting on its event loop), on a fresh `valkey-server` without the module and a fresh one with it, measured side by side over the same seconds, {rounds} rounds: empty, and holding {queues} queues of one job due in an hour each (with the module, enqueued and watched, once the timer's first visit to each is done; without it, the same rows and `schedule` sets written with `HSET` and `ZADD`; both measured after {IDLE_SETTLE_SECS} s more at rest). Medians (min–max) over the rounds; the CPU ratio is the median of the per-round ratios of the two servers measured together.\n\n| server | main-thread CPU ms/s | wake-ups/s | CPU with / without the module |\n|---|---|---|---|\n| without the module, empty | {} | |\n| with EchoMQ, empty | {} | {} |\n| without the module, the keys of {queues} queues | {} | |\n| with EchoMQ, {queues} queues watched | {} | {} |\n",
        cell(&rows[0]),
        cell(&rows[1]),
        ratio(&rows[1], &rows[0]),
        cell(&rows[2]),
        cell(&rows[3]),
        ratio(&rows[3], &rows[2]),
    );
}

/// A backlog: `queues` queues of `per_queue` jobs each, all due at the same moment, which the
/// timer then promotes while a client sends `PING` every millisecond. Returns the `PING`
/// round trips (sorted, ms) from the due time until every job was pending, and how long after
/// the due time that was (ms).
fn backlog(server: &Server, queues: usize, per_queue: usize) -> (Vec<f64>, f64) {
    let mut con = server.conn();
    fresh(&mut con);
    let jobs = queues * per_queue;
    // Enqueueing takes a while: due once the last job is in.
    let due = now_unix_ms() as i64 + 2_000 + (jobs / 50) as i64;
    for q in 0..queues {
        let mut p = redis::pipe();
        for j in 0..per_queue {
            p.cmd("EMQ.ENQUEUE")
                .arg(format!("backlog{q}"))
                .arg(job_id((q * per_queue + j) as u64 + 1))
                .arg(PAYLOAD)
                .arg("AT")
                .arg(due)
                .ignore();
        }
        let _: () = p.query(&mut con).expect("enqueue due jobs");
    }
    assert!(
        now_unix_ms() < due as f64,
        "every job enqueued before its due time"
    );
    while now_unix_ms() < due as f64 {
        thread::sleep(Duration::from_millis(1));
    }
    let mut pings = Vec::new();
    let mut promoted = 0;
    while promoted < jobs as i64 {
        let sent = Instant::now();
        let _: String = cmd("PING").query(&mut con).expect("ping");
        pings.push(sent.elapsed().as_secs_f64() * 1000.0);
        if pings.len() % 50 == 0 {
            promoted = support::info_int(&mut con, "emq", "emq_promoted");
        }
        thread::sleep(Duration::from_millis(1));
    }
    let took = now_unix_ms() - due as f64;
    pings.sort_by(|a, b| a.total_cmp(b));
    (pings, took)
}

/// `rounds` rounds of every variant, interleaved, on the same ids per round; `after_each`
/// runs at the end of each round, on that round's ids.
fn measure(
    server: &Server,
    variants: &[Variant],
    ids: Ids,
    depth: usize,
    rounds: usize,
    jobs: usize,
    mut after_each: impl FnMut(&[String]),
) -> Vec<Vec<Sample>> {
    let mut samples: Vec<Vec<Sample>> = variants.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let id_list = ids_for(ids, jobs, round as u64 + 1);
        for (v, variant) in variants.iter().enumerate() {
            let sample = run(server, *variant, &id_list, depth);
            eprintln!(
                "round {round} {:<28} commandstats {:.3} cpu {:.3} jobs/s {:.0}",
                variant.name(),
                sample.server_us_per_job,
                sample.cpu_us_per_job,
                sample.jobs_per_sec
            );
            samples[v].push(sample);
        }
        after_each(&id_list);
    }
    samples
}

/// One Markdown table: each figure's median (min–max) over the rounds, and its ratios against
/// Lua (variant 0) and native (variant 2) as the median of the per-round ratios. The variants
/// of a round run back to back, so a ratio within a round compares runs that met the same
/// machine (this VM's speed drifts between rounds), and the median of those ratios keeps the
/// pairing.
fn table(md: &mut String, title: &str, variants: &[Variant], samples: &[Vec<Sample>]) {
    type Figure = fn(&Sample) -> f64;
    let figures: [Figure; 3] = [
        |x| x.server_us_per_job,
        |x| x.cpu_us_per_job,
        |x| x.jobs_per_sec,
    ];
    let spread = |v: usize, f: Figure| median(samples[v].iter().map(f).collect());
    let ratio = |v: usize, base: usize, f: Figure| {
        let paired = samples[v].iter().zip(&samples[base]);
        median(paired.map(|(x, b)| f(x) / f(b)).collect()).0
    };
    let _ = writeln!(md, "## {title}\n");
    let _ = writeln!(md, "| variant | commandstats µs/job | vs Lua | vs native | main-thread CPU µs/job | vs Lua | vs native | jobs/s | vs Lua | vs native |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (v, variant) in variants.iter().enumerate() {
        let mut row = format!("| {} |", variant.name());
        for (i, f) in figures.into_iter().enumerate() {
            let (mid, lo, hi) = spread(v, f);
            let cell = if i == 2 {
                format!(" {mid:.0} ({lo:.0}–{hi:.0}) |")
            } else {
                format!(" {mid:.2} ({lo:.2}–{hi:.2}) |")
            };
            row.push_str(&cell);
            let _ = write!(row, " {:.2}× | {:.2}× |", ratio(v, 0, f), ratio(v, 2, f));
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}

/// The whole-life table: each figure's median (min–max) over the rounds with the stream off
/// and on, and the median of the per-round ratios on / off.
fn life_table(md: &mut String, life: &LifeSamples) {
    type Figure = fn(&Sample) -> f64;
    let figures: [Figure; 3] = [
        |x| x.cpu_us_per_job,
        |x| x.server_us_per_job,
        |x| x.jobs_per_sec,
    ];
    let _ = writeln!(md, "| workload | main-thread CPU µs/job, events off | events on | on / off | commandstats µs/job, events off | events on | on / off | jobs/s, events off | events on | on / off |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (name, by_policy) in LIFE_ROWS.iter().zip(life) {
        let (off, on) = (&by_policy[0], &by_policy[1]);
        let mut row = format!("| {name} |");
        for (i, f) in figures.into_iter().enumerate() {
            for samples in [off, on] {
                let (mid, lo, hi) = median(samples.iter().map(f).collect());
                let cell = if i == 2 {
                    format!(" {mid:.0} ({lo:.0}–{hi:.0}) |")
                } else {
                    format!(" {mid:.2} ({lo:.2}–{hi:.2}) |")
                };
                row.push_str(&cell);
            }
            let ratio = median(on.iter().zip(off).map(|(x, b)| f(x) / f(b)).collect()).0;
            let _ = write!(row, " {ratio:.2}× |");
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}

/// The lifecycle table: each variant's main-thread CPU per job with its ratios to the native
/// floor and to Lua, its commandstats time per job, jobs/s and round trips a batch.
fn lifecycle_table(md: &mut String, lifecycle: &LifecycleSamples) {
    let [.., lua, native] = lifecycle;
    let cpu = |x: &Sample| x.cpu_us_per_job;
    // The median of the rounds' ratios, with their least and greatest.
    let ratio = |of: &[Sample], to: &[Sample]| {
        let (mid, lo, hi) = median(of.iter().zip(to).map(|(a, b)| cpu(a) / cpu(b)).collect());
        format!("{mid:.2}× ({lo:.2}–{hi:.2})")
    };
    let _ = writeln!(md, "| variant | main-thread CPU µs/job | vs native floor | vs Lua | commandstats µs/job | jobs/s | round trips a batch |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (how, samples) in Life::ALL.iter().zip(lifecycle) {
        let (c, clo, chi) = median(samples.iter().map(cpu).collect());
        let (u, ulo, uhi) = median(samples.iter().map(|x| x.server_us_per_job).collect());
        let (j, jlo, jhi) = median(samples.iter().map(|x| x.jobs_per_sec).collect());
        let _ = writeln!(
            md,
            "| {} | {c:.2} ({clo:.2}–{chi:.2}) | {} | {} | {u:.2} ({ulo:.2}–{uhi:.2}) | {j:.0} ({jlo:.0}–{jhi:.0}) | {} |",
            how.name(),
            ratio(samples, native),
            ratio(samples, lua),
            how.round_trips()
        );
    }
    let _ = writeln!(md);
}

/// The scheduling-policy table: each workload's main-thread CPU per job with no policy, with
/// claim limits and with unique keys, and the median of the per-round ratios to no policy.
fn policy_table(md: &mut String, life: &LifeSamples) {
    let cpu = |x: &Sample| x.cpu_us_per_job;
    let _ = writeln!(md, "| workload | main-thread CPU µs/job, none | with limits | limits / none | with unique keys | unique / none |");
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for (name, by_policy) in LIFE_ROWS.iter().zip(life) {
        let plain = &by_policy[0];
        let (mid, lo, hi) = median(plain.iter().map(cpu).collect());
        let mut row = format!("| {name} | {mid:.2} ({lo:.2}–{hi:.2}) |");
        for samples in [&by_policy[2], &by_policy[3]] {
            if samples.is_empty() {
                row.push_str(" — | — |");
                continue;
            }
            let (mid, lo, hi) = median(samples.iter().map(cpu).collect());
            let ratio = median(
                samples
                    .iter()
                    .zip(plain)
                    .map(|(x, b)| cpu(x) / cpu(b))
                    .collect(),
            )
            .0;
            let _ = write!(row, " {mid:.2} ({lo:.2}–{hi:.2}) | {ratio:.2}× |");
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Where docs/bench.md's generated tables end; what follows is kept as it is.
const KEPT: &str = "<!-- kept by make bench -->";

/// The commit the figures come from (`git rev-parse --short HEAD`), with `+changes` when the
/// tree differs from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(support::repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{head}+changes"),
        _ => head,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it,
    // and then gets a smoke run (one small round, nothing written) instead of the benchmark.
    let benchmark = std::env::args().any(|a| a == "--bench");
    let setting = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (rounds, jobs) = if benchmark {
        (setting("BENCH_ROUNDS", 7), setting("BENCH_JOBS", 100_000))
    } else {
        (1, 2_000)
    };
    // BENCH_ONLY=tax: only the table of what EchoMQ costs commands on other keys, printed.
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "tax") {
        let mut md = String::new();
        unrelated_key_tax(&mut md, jobs, rounds);
        print!("{md}");
        return;
    }
    // BENCH_ONLY=idle: only the table of what an idle server costs, printed.
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "idle") {
        let mut md = String::new();
        idle_table(&mut md, 100_000, 5, rounds);
        print!("{md}");
        return;
    }
    // BENCH_ONLY=lifecycle: only the table of the whole life by settle, printed.
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "lifecycle") {
        let server = Server::start(Options::default().arg("maxclients", "1000"));
        let mut lifecycle: LifecycleSamples = Default::default();
        for round in 0..rounds {
            let ids = ids_for(Ids::Monotonic, jobs, round as u64 + 1);
            for (v, how) in Life::ALL.into_iter().enumerate() {
                lifecycle[v].push(whole_life(&server, &ids, Policy::Plain, how));
            }
            eprintln!("done: lifecycle round {}", round + 1);
        }
        let mut md = String::new();
        lifecycle_table(&mut md, &lifecycle);
        print!("{md}");
        return;
    }
    let server = Server::start(Options::default().arg("maxclients", "1000"));
    let version: String = {
        let mut c = server.conn();
        support::info_field(&mut c, "server", "valkey_version").unwrap_or_else(|| "?".into())
    };
    let variants = [
        Variant::Lua,
        Variant::Module,
        Variant::Native,
        Variant::Batch(10),
        Variant::Batch(100),
    ];
    let mut md = String::new();
    let _ = writeln!(md, "# EchoMQ benchmarks\n");
    let _ = writeln!(
        md,
        "Produced by `make bench` (`BENCH_ROUNDS={rounds} BENCH_JOBS={jobs} cargo bench --bench enqueue`) at commit {} on {} ({} cores), valkey-server {version}, the module built with `cargo build --release`. One server, no replica and no AOF (as the server itself, EchoMQ then propagates nothing; the last enqueue table adds a replica); {CONNECTIONS} client connections; the same valid 14-byte `JOB` ids and the same 48-byte payload for every variant; variants interleaved (A B C D E, A B C D E, ...) over {rounds} rounds of {jobs} jobs, with `FLUSHALL` and `CONFIG RESETSTAT` before each run. Clients send pre-encoded RESP (the time measured is the server's, not the client's command building). Two server figures per job: the `INFO commandstats` time of the variant's commands (the command bodies only: a native command's window leaves out its request's parsing, argument objects and dispatch, while the module's covers composing its keys from the queue name, the ACL check of those derived keys and the key-name strings), and the main thread's CPU time from `INFO cpu` (everything the server did: reading, parsing, dispatch, the commands, replies). Jobs/s is measured by the client. Figures are medians over the rounds with the min–max spread; a ratio is the median of the per-round ratios (the variants of a round run back to back, so each ratio pairs runs that met the same machine).\n",
        commit(),
        cpu_model(),
        thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    );
    // The whole-life workloads run in the rounds of the first table, after its variants.
    let mut life: LifeSamples = Default::default();
    let mut lifecycle: LifecycleSamples = Default::default();
    for (ids, ids_name) in [
        (Ids::Monotonic, "monotonic ids (as minted)"),
        (Ids::Random, "random ids"),
    ] {
        for depth in [16usize, 1] {
            let with_life = ids == Ids::Monotonic && depth == 16;
            let samples = measure(&server, &variants, ids, depth, rounds, jobs, |round_ids| {
                if with_life {
                    life_round(&server, round_ids, depth, &mut life, &mut lifecycle);
                }
            });
            table(
                &mut md,
                &format!("{ids_name}, pipeline depth {depth}"),
                &variants,
                &samples,
            );
            eprintln!("done: {ids_name}, depth {depth}");
        }
    }
    // The same work while a replica (without the module) receives it: every variant now
    // propagates, the module through RM_Replicate.
    {
        let replica = Server::start(
            Options::without_module().arg("replicaof", &format!("127.0.0.1 {}", server.port)),
        );
        let mut r = replica.conn();
        let linked = support::wait_until(Duration::from_secs(30), || {
            support::info_field(&mut r, "replication", "master_link_status").as_deref()
                == Some("up")
        });
        if linked {
            let samples = measure(&server, &variants, Ids::Monotonic, 16, rounds, jobs, |_| {});
            let _ = writeln!(
                md,
                "With a replica attached (a second `valkey-server` on loopback, without the module), every variant propagates its writes; `EMQ.ENQUEUE` and `EMQ.MENQUEUE` hand theirs to `RM_Replicate`.\n"
            );
            table(
                &mut md,
                "monotonic ids, pipeline depth 16, a replica attached",
                &variants,
                &samples,
            );
            eprintln!("done: with a replica");
        } else {
            eprintln!("the replica never linked; no replica figures");
        }
    }
    let _ = writeln!(
        md,
        "## A job's whole life, the event stream off and on\n\nIn each of the first table's rounds, after its five variants, the round's {jobs} monotonic ids, with the same payload, go from enqueue to acknowledgement on one queue, by the same {CONNECTIONS} clients, on an empty server each run. Batched: each client sends `EMQ.MENQUEUE` ×100 with `EMQ.CLAIM <q> COUNT 100 LEASE 60000`, then one `EMQ.ACK` per claimed job with the token the claim replied, pipelined, until its share is done (jobs/s, not the server figures, includes the clients' reading of the claims and encoding of the acks). One at a time: every job enqueued with `EMQ.ENQUEUE`, then claimed with `COUNT 1`, then acknowledged, at pipeline depth 16, each phase timed apart (its acks encoded from the claims' replies before it starts). Events on is the queue after `EMQ.EVENTS <q> ON MAXLEN {EVENTS_MAXLEN}`: each transition also appends a stream entry, an `XADD` run inside the module's call, so the `commandstats` figure sums the `EMQ.*` commands and nothing else. Figures are per job (for a phase, per transition); on / off is the median of the per-round ratios. Each run checks that no job is left pending or active and, with the stream on, that one `XADD` ran per transition.\n"
    );
    life_table(&mut md, &life);
    let _ = writeln!(
        md,
        "## The whole life by settle: batched settle, claim-next, Lua and the native floor\n\nIn the same rounds, right after the round's enqueue variants, the round's {jobs} monotonic ids go from enqueue to acknowledgement on one plain queue (events off), by the same {CONNECTIONS} clients, 100 jobs a batch, on an empty server each run, five ways back to back. EchoMQ with one `EMQ.ACK` per job (pipelined), with one `EMQ.MACK` of the batch, and with claim-next (each batch's `EMQ.MENQUEUE` sent with `EMQ.MACK` of the last batch `CLAIM 100`, one round trip a batch); a Lua implementation of the same transitions (benches/lua: the reference `@enqueue` per job, a claim script of `COUNT 100` and an ack script per job that checks the token, all `EVALSHA`, every key declared but the claim's rows, which no claim knows before it reads the ids); and the floor, a hand-written pipeline of native commands, neither atomic nor fenced (`HSET`+`ZADD` per job with `ZPOPMIN pending 100`, then `ZADD active` of the 100 with `HSET`/`HINCRBY`/`HGET` per job, then `ZREM`/`HSET`/`PEXPIRE` per job). Figures per job, medians (min–max) over the rounds; a ratio is the median of the per-round ratios. Round trips are a batch's once under way. Each run checks that nothing is left pending or active and that every job was acknowledged once.\n"
    );
    lifecycle_table(&mut md, &lifecycle);
    let _ = writeln!(
        md,
        "## What the scheduling policies cost a job\n\nThe same rounds, the same workloads, on a queue with claim limits that never bind (`EMQ.LIMIT <q> CONCURRENCY 1000000 RATE 10000 PER 1`: every claim reads the limits, counts its room and adds each job it takes to the rate window, which claims and the timer trim) and on one whose every `EMQ.ENQUEUE` carries a unique key of its own (`UNIQUE <id>`: a lookup, then the table's entry and the row's `unique` field; batches take no unique keys, hence no batched figure). None is the plain queue of the table above (events off). What a queue that uses none of them pays is the plain figure itself; `make profile` counts it by instructions against an earlier build (docs/bench.md).\n"
    );
    policy_table(&mut md, &life);
    let (wake_samples, late_samples) = if benchmark { (300, 200) } else { (20, 10) };
    let wake = wake_up_latency(&server, wake_samples);
    let late = delayed_lateness(&server, late_samples);
    let _ = writeln!(md, "## Lifecycle latency\n");
    let _ = writeln!(md, "| measure | samples | p50 ms | p99 ms | max ms |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    latency_row(
        &mut md,
        "blocked `EMQ.CLAIM` wake-up after `EMQ.ENQUEUE`",
        &wake,
        3,
    );
    latency_row(
        &mut md,
        "delayed job (`AT`) lateness at a blocked claimer",
        &late,
        1,
    );
    let (queues, secs, samples) = if benchmark {
        (100_000, 5, 100)
    } else {
        (2_000, 1, 5)
    };
    let late = timer_load(&server, queues, samples);
    latency_row(
        &mut md,
        &format!("delayed job lateness, {queues} other queues watched (each a job due in an hour)"),
        &late,
        1,
    );
    let (queues_due, per_queue) = if benchmark { (200, 1_000) } else { (10, 100) };
    let (pings, took) = backlog(&server, queues_due, per_queue);
    latency_row(
        &mut md,
        &format!(
            "`PING` while the timer promotes {} jobs due at once ({queues_due} queues), all pending {:.0} ms after",
            queues_due * per_queue,
            took
        ),
        &pings,
        2,
    );
    let _ = writeln!(md);
    if benchmark {
        unrelated_key_tax(&mut md, 100_000, rounds);
    } else {
        unrelated_key_tax(&mut md, 2_000, 1);
    }
    idle_table(&mut md, queues, secs, if benchmark { 3 } else { 1 });
    print!("{md}");
    if !benchmark {
        return;
    }
    let path = support::repo_root().join("docs/bench.md");
    let previous = std::fs::read_to_string(&path).unwrap_or_default();
    // Keep what follows the generated tables (the clients' table, the link to the log).
    let kept = previous
        .split_once(KEPT)
        .map(|(_, l)| l.to_string())
        .unwrap_or_default();
    let _ = std::fs::write(&path, format!("{md}{KEPT}{kept}"));
}
