//! A queue's keys, jobs and commands as the suites use them: enqueue, claim, a row's fields,
//! a set's members, dead jobs, and refusals checked case by case.

use std::time::Duration;

use redis::Value;

use crate::*;

/// `EMQ.ENQUEUE <q> <id> <payload>`: `1` enqueued, `0` a duplicate.
pub fn enqueue(con: &mut impl redis::ConnectionLike, q: &str, id: &str, payload: &str) -> i64 {
    redis::cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg(payload)
        .query(con)
        .expect("enqueue")
}

/// Enqueues jobs 1 to `n` (as [`job_id`] names them) on `q`, each with `payload`.
pub fn enqueue_numbered(con: &mut impl redis::ConnectionLike, q: &str, n: u64, payload: &str) {
    for i in 1..=n {
        enqueue(con, q, &job_id(i), payload);
    }
}

/// `EMQ.ENQUEUE <q> <id> <payload> DELAY <ms>`: a job due `delay_ms` from now.
pub fn enqueue_delayed(
    con: &mut impl redis::ConnectionLike,
    q: &str,
    id: &str,
    payload: &str,
    delay_ms: u64,
) -> i64 {
    redis::cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg(payload)
        .arg("DELAY")
        .arg(delay_ms)
        .query(con)
        .expect("delayed enqueue")
}

/// Every command the module registers (`COMMAND LIST FILTERBY MODULE emq`), lower-case.
pub fn emq_commands(con: &mut Connection) -> Vec<String> {
    redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("emq")
        .query(con)
        .expect("COMMAND LIST")
}

/// A fresh queue name, so tests sharing a server never see each other's keys.
pub fn unique_queue(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The node id a minted id carries (`emq.node-id` when it was minted).
pub fn node_of(id: &str) -> u16 {
    echomq::protocol::BrandedId::parse(id.as_bytes())
        .expect("a well-formed id")
        .node_id()
}

/// A valid `JOB` id for the number `n` (the same encoding the module uses).
pub fn job_id(n: u64) -> String {
    echomq::protocol::BrandedId::new(*b"JOB", n)
        .map(|id| String::from_utf8_lossy(&id.encode()).into_owned())
        .expect("a valid id")
}

/// `emq:{<queue>}:job:<id>`, spelled out as protocol.md §1 has it (the tests do not borrow the
/// module's own key builder).
pub fn row_key(queue: &str, id: &str) -> String {
    format!("emq:{{{queue}}}:job:{id}")
}

/// `emq:{<queue>}:<ty>` for a per-queue key (`pending`, `active`, `schedule`, ...).
pub fn set_key(queue: &str, ty: &str) -> String {
    format!("emq:{{{queue}}}:{ty}")
}

/// One field of a job's row (`state`, `attempts`, `payload`, `error`), as stored.
pub fn row_field(con: &mut Connection, queue: &str, id: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(row_key(queue, id))
        .arg(field)
        .query(con)
        .expect("HGET")
}

/// A job's `state` field (`pending`, `active`, `scheduled`, `done`, `dead`); `None` without a row.
pub fn job_state(con: &mut Connection, queue: &str, id: &str) -> Option<String> {
    row_field(con, queue, id, "state")
}

/// A job's `attempts` field, as stored.
pub fn job_attempts(con: &mut Connection, queue: &str, id: &str) -> Option<String> {
    row_field(con, queue, id, "attempts")
}

/// The score of `id` in the queue's `ty` set: a due time, a lease deadline, an id's order.
pub fn set_score(con: &mut Connection, queue: &str, ty: &str, id: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(set_key(queue, ty))
        .arg(id)
        .query(con)
        .expect("ZSCORE")
}

/// One claimed job: (id, payload, attempts).
pub type Job = (String, Vec<u8>, i64);

/// `EMQ.MACK <q> ...` with `args` after the queue: its reply as it came, a refusal in one place
/// of it included (`query` would turn one into an error for the whole reply).
pub fn mack(con: &mut Connection, q: &str, args: &[String]) -> redis::RedisResult<Value> {
    match redis::ConnectionLike::req_command(con, redis::cmd("EMQ.MACK").arg(q).arg(args))? {
        Value::ServerError(e) => Err(e.into()),
        reply => Ok(reply),
    }
}

/// Whether a reply (a place of `EMQ.MACK`'s, say) is the refusal `code` (`EMQLEASE`, ...).
pub fn refused_with(v: &Value, code: &str) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == code)
}

/// `EMQ.LIMIT <queue> [opts...]`: the limits and their use, as pairs (null: not set).
pub fn limit(con: &mut Connection, q: &str, opts: &[&str]) -> Vec<(String, Option<i64>)> {
    redis::cmd("EMQ.LIMIT")
        .arg(q)
        .arg(opts)
        .query(con)
        .expect("EMQ.LIMIT")
}

/// `EMQ.CLAIM <queue> [opts...]`: the jobs claimed, `None` when a blocking claim timed out.
pub fn claim(con: &mut impl redis::ConnectionLike, queue: &str, opts: &[&str]) -> Option<Vec<Job>> {
    let mut c = redis::cmd("EMQ.CLAIM");
    c.arg(queue);
    for o in opts {
        c.arg(*o);
    }
    c.query(con).expect("claim")
}

/// `EMQ.STATS`: the queue's count per set, and its limits and their use (a limit not set is
/// left out).
pub fn stats(
    con: &mut impl redis::ConnectionLike,
    queue: &str,
) -> std::collections::HashMap<String, i64> {
    let counts: Vec<(String, Option<i64>)> = redis::cmd("EMQ.STATS")
        .arg(queue)
        .query(con)
        .expect("EMQ.STATS");
    counts
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

/// How many members the queue's `ty` set (`pending`, `active`, ...) holds.
pub fn set_len(con: &mut Connection, queue: &str, ty: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(set_key(queue, ty))
        .query(con)
        .expect("ZCARD")
}

/// `EMQ.CLAIM <queue> BLOCK <block_ms>` sent on `worker` from a thread of its own; returns
/// once the server (asked on `admin`) counts one more blocked client. Joining the thread gives
/// the claim's reply, or its error text.
pub fn blocked_claim(
    admin: &mut Connection,
    mut worker: Connection,
    queue: &str,
    block_ms: u64,
) -> std::thread::JoinHandle<Result<Value, String>> {
    let before = blocked_clients(admin);
    let queue = queue.to_string();
    let claim = std::thread::spawn(move || {
        redis::cmd("EMQ.CLAIM")
            .arg(&queue)
            .arg("BLOCK")
            .arg(block_ms)
            .query::<Value>(&mut worker)
            .map_err(|e| error_text(&e))
    });
    let waiting = wait_until(Duration::from_secs(5), || {
        blocked_clients(admin) == before + 1
    });
    assert!(waiting, "the claim is blocked");
    claim
}

/// The members of the queue's `ty` set, lowest score first.
pub fn set_members(con: &mut Connection, queue: &str, ty: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(set_key(queue, ty))
        .arg(0)
        .arg(-1)
        .query(con)
        .expect("ZRANGE")
}

/// Work that keeps a primary's timer busy for about a second: jobs 1–20 ready (10 of them
/// claimed on 300 ms leases) and jobs 21–220 due one every 5 ms. Returns all 220 ids, in order:
/// once the second is over, every one of them is pending again.
pub fn jobs_coming_due(con: &mut Connection, queue: &str) -> Vec<String> {
    for i in 1..=20u64 {
        enqueue(con, queue, &job_id(i), "ready");
    }
    for i in 21..=220u64 {
        enqueue_delayed(con, queue, &job_id(i), "later", 5 * (i - 20));
    }
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg(queue)
        .arg("COUNT")
        .arg(10)
        .arg("LEASE")
        .arg(300)
        .query(con)
        .expect("claim");
    assert_eq!(claimed.len(), 10);
    (1..=220u64).map(job_id).collect()
}

/// Every key of a queue, sorted.
pub fn keys_of(con: &mut Connection, queue: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{queue}}}:*"))
        .query(con)
        .expect("KEYS");
    keys.sort();
    keys
}

/// Puts `n` dead jobs in `queue` as a plain writer would (HSET + ZADD), died a millisecond
/// apart up to now.
pub fn dead_jobs(con: &mut Connection, queue: &str, n: u64) {
    let start = now_ms() - n as i64;
    let mut pipe = redis::pipe();
    for i in 1..=n {
        let id = job_id(i);
        pipe.cmd("HSET")
            .arg(row_key(queue, &id))
            .arg(&["state", "dead", "attempts", "25", "payload", "p"])
            .ignore();
        pipe.cmd("ZADD")
            .arg(set_key(queue, "dead"))
            .arg(start + i as i64)
            .arg(&id)
            .ignore();
        if i % 5_000 == 0 || i == n {
            let () = pipe.query(con).expect("dead jobs");
            pipe = redis::pipe();
        }
    }
}

/// Overwrites `key` with a string, as an operator's mistake would (commands on it then refuse
/// with `WRONGTYPE`).
pub fn make_string(con: &mut Connection, key: &str) {
    let _: () = redis::cmd("SET").arg(key).arg("x").query(con).expect("SET");
}

/// Waits (up to 5 s) until the queue's `ty` set holds more than `n` members.
pub fn until_more_than(con: &mut Connection, queue: &str, ty: &str, n: i64) -> bool {
    wait_until(Duration::from_secs(5), || set_len(con, queue, ty) > n)
}

/// Each of `cases` (the arguments after `base`, and the start of the refusal expected) is
/// refused so.
pub fn assert_refused(con: &mut Connection, base: &redis::Cmd, cases: &[(&[&str], &str)]) {
    for (args, want) in cases {
        let mut c = base.clone();
        c.arg(*args);
        let err = expect_err(con, &c);
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
}
