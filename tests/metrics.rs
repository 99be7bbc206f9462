//! The queues' metrics (docs/observability.md): `EMQ.METRICS` counts each event of a queue's jobs,
//! and its wait, run and end-to-end histograms count each claim, each attempt by how it ended
//! and each ack; a run that lasted at least a known time lands past the buckets below it; a
//! promoted job's wait, and the oldest pending wait, count from its promotion (`ready`);
//! `emq.metrics no` counts nothing and says so; the caller must be able to read the queue.

use emq_harness as support;

use std::thread::sleep;
use std::time::Duration;

use redis::{cmd, Value};
use support::flow::{ack, fail};
use support::*;

/// `EMQ.METRICS <q>` over RESP3, as (name, value) pairs.
fn metrics(con: &mut Connection, q: &str) -> Vec<(String, Value)> {
    let reply: Value = cmd("EMQ.METRICS").arg(q).query(con).expect("EMQ.METRICS");
    map_pairs(&reply)
}

fn field<'a>(pairs: &'a [(String, Value)], name: &str) -> &'a Value {
    &pairs
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
        .1
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("an integer, got {other:?}"),
    }
}

/// A histogram's `count`, and its cumulative count at `le` ms.
fn histogram(v: &Value, le: i64) -> (i64, i64) {
    let pairs = map_pairs(v);
    let Value::Array(buckets) = field(&pairs, "buckets") else {
        panic!("buckets: {pairs:?}")
    };
    let at = buckets
        .iter()
        .find_map(|b| match b {
            Value::Array(pair) if pair[0] == Value::Int(le) => Some(int(&pair[1])),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no bucket {le}"));
    (int(field(&pairs, "count")), at)
}

fn event(m: &[(String, Value)], name: &str) -> i64 {
    int(field(&map_pairs(field(m, "events")), name))
}

fn run<'a>(m: &'a [(String, Value)], ended: &str) -> &'a Value {
    let Value::Map(runs) = field(m, "run") else {
        panic!("run: {m:?}")
    };
    &runs
        .iter()
        .find(|(k, _)| text(k) == ended)
        .unwrap_or_else(|| panic!("no run {ended}"))
        .1
}

fn enqueue_minted(con: &mut Connection, q: &str, payload: &str, opts: &[&str]) -> String {
    cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg("*")
        .arg(payload)
        .arg(opts)
        .query(con)
        .expect("enqueue")
}

/// One job in each of the queues `q0`, `q1`, ... up to `count`.
fn enqueue_in_queues(con: &mut Connection, count: usize) {
    let mut pipe = redis::pipe();
    for n in 0..count {
        pipe.cmd("EMQ.ENQUEUE")
            .arg(format!("q{n}"))
            .arg("*")
            .arg("x")
            .ignore();
    }
    let _: () = pipe.query(con).expect("enqueues");
}

#[test]
fn each_event_and_each_attempt_is_counted_by_how_it_ended() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "2"));
    let mut con = server.conn3();
    for p in ["a", "b", "c"] {
        enqueue_minted(&mut con, "m", p, &[]);
    }
    let jobs = claim(&mut con, "m", &["COUNT", "3"]).expect("jobs");
    assert_eq!(jobs.len(), 3);
    // One acked at once, one acked after at least 1,100 ms, one failed twice: dead.
    let by = |p: &str| {
        jobs.iter()
            .find(|j| j.1 == p.as_bytes())
            .expect("job")
            .clone()
    };
    let (a, b, c) = (by("a"), by("b"), by("c"));
    let _: Value = cmd("EMQ.ACK")
        .arg("m")
        .arg(&a.0)
        .arg(a.2)
        .query(&mut con)
        .expect("ack");
    fail(&mut con, "m", &c.0, c.2, "first");
    sleep(Duration::from_millis(1100));
    let _: Value = cmd("EMQ.ACK")
        .arg("m")
        .arg(&b.0)
        .arg(b.2)
        .query(&mut con)
        .expect("ack");

    let m = metrics(&mut con, "m");
    assert_eq!(event(&m, "enqueued"), 3);
    assert_eq!(event(&m, "claimed"), 3);
    assert_eq!(event(&m, "acked"), 2);
    assert_eq!(event(&m, "retrying"), 1);
    assert_eq!(histogram(field(&m, "wait"), 1).0, 3);
    let (acked, within_a_second) = histogram(run(&m, "acked"), 1000);
    assert_eq!(acked, 2);
    assert_eq!(
        within_a_second, 1,
        "the ack after 1,100 ms ran past the 1,000 ms bucket"
    );
    assert_eq!(histogram(run(&m, "failed"), 1).0, 1);
    assert_eq!(histogram(run(&m, "dead"), 1).0, 0);
    let (e2e, _) = histogram(field(&m, "end-to-end"), 1000);
    assert_eq!(e2e, 2);

    // The failed job's second attempt, once due, fails on its last: dead.
    let second = wait_until(Duration::from_secs(20), || {
        claim(&mut con, "m", &[]).is_some_and(|j| {
            !j.is_empty() && {
                fail(&mut con, "m", &j[0].0, j[0].2, "second");
                true
            }
        })
    });
    assert!(second, "the retry came due");
    let m = metrics(&mut con, "m");
    assert_eq!(event(&m, "dead"), 1);
    assert_eq!(event(&m, "promoted"), 1);
    assert_eq!(histogram(run(&m, "dead"), 1).0, 1);
    assert_eq!(histogram(field(&m, "wait"), 1).0, 4);
    assert_eq!(field(&m, "oldest-pending-ms"), &Value::Nil);
    // One queue counted, and no attempt left in flight to time.
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_queues"), 1);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_running"), 0);
}

/// `EMQ.MACK`'s arguments for `jobs`: each id and its token.
fn settles<'a>(jobs: impl IntoIterator<Item = &'a support::Job>) -> Vec<String> {
    jobs.into_iter()
        .flat_map(|j| [j.0.clone(), j.2.to_string()])
        .collect()
}

#[test]
fn each_attempt_of_claims_of_many_is_timed_once_however_its_ends_come() {
    // The failed jobs' retries are not due before the test ends.
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "600000"),
    );
    let mut con = server.conn3();
    for n in 0..40 {
        enqueue_minted(&mut con, "b", &n.to_string(), &[]);
    }
    // Four claims of ten, each kept as one batch; the last one's leases run out.
    let mut claims = (0..3).map(|_| claim(&mut con, "b", &["COUNT", "10"]).expect("claim"));
    let (a, b, c) = (
        claims.next().expect("a"),
        claims.next().expect("b"),
        claims.next().expect("c"),
    );
    let d = claim(&mut con, "b", &["COUNT", "10", "LEASE", "200"]).expect("d");
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_running"), 40);
    // c: half renewed first; then a acked one at a time, last first, each before one of c's
    // failures; b: two EMQ.MACKs, out of order, one naming a job twice.
    for j in &c[..5] {
        let _: i64 = cmd("EMQ.RENEW")
            .arg("b")
            .arg(&j.0)
            .arg(j.2)
            .arg(60_000)
            .query(&mut con)
            .expect("renew");
    }
    for (j, k) in a.iter().rev().zip(&c) {
        ack(&mut con, "b", &j.0, j.2, "ok");
        fail(&mut con, "b", &k.0, k.2, "no");
    }
    let odd: Vec<&support::Job> = [7, 2, 9, 2, 0, 5].map(|i| &b[i]).to_vec();
    let rest: Vec<&support::Job> = [1, 3, 4, 6, 8].map(|i| &b[i]).to_vec();
    mack(&mut con, "b", &settles(odd)).expect("mack");
    mack(&mut con, "b", &settles(rest)).expect("mack");
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_running"), 10);
    // d's leases run out: the server fails each attempt and the jobs are claimed again.
    let mut again = Vec::new();
    assert!(wait_until(Duration::from_secs(20), || {
        again.extend(claim(&mut con, "b", &["COUNT", "10"]).unwrap_or_default());
        again.len() == 10
    }));
    let ids = |jobs: &[support::Job]| {
        let mut ids: Vec<String> = jobs.iter().map(|j| j.0.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&again), ids(&d), "d's jobs came back");
    mack(&mut con, "b", &settles(&again)).expect("mack");

    let m = metrics(&mut con, "b");
    assert_eq!(histogram(run(&m, "acked"), 1).0, 30);
    assert_eq!(histogram(run(&m, "failed"), 1).0, 20);
    assert_eq!(event(&m, "acked"), 30);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_running"), 0);
}

#[test]
fn one_call_s_counts_are_all_there_when_it_answers_in_its_queue_and_in_a_parent_s() {
    // A command counts its jobs once its writes are done: a claim of three and one EMQ.MACK of
    // three, whose one child hands over to its parent, in another queue, in the same call.
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    let parent = enqueue_minted(&mut con, "p", "parent", &["CHILDREN", "1"]);
    enqueue_minted(&mut con, "c", "kid", &["PARENT", "p", &parent]);
    enqueue_minted(&mut con, "c", "a", &[]);
    enqueue_minted(&mut con, "c", "b", &[]);
    let jobs = claim(&mut con, "c", &["COUNT", "3"]).expect("jobs");
    assert_eq!(jobs.len(), 3);
    let m = metrics(&mut con, "c");
    assert_eq!(event(&m, "claimed"), 3);
    assert_eq!(int(field(&map_pairs(field(&m, "wait")), "count")), 3);
    let Value::Array(slots) = mack(&mut con, "c", &settles(&jobs)).expect("EMQ.MACK") else {
        panic!("EMQ.MACK's reply")
    };
    assert_eq!(slots.len(), 3);
    let m = metrics(&mut con, "c");
    assert_eq!(event(&m, "acked"), 3);
    assert_eq!(histogram(run(&m, "acked"), 3_600_000).0, 3);
    assert_eq!(histogram(field(&m, "end-to-end"), 3_600_000).0, 3);
    let p = metrics(&mut con, "p");
    assert_eq!(event(&p, "waiting"), 1);
    assert_eq!(event(&p, "released"), 1);
    assert_eq!(event(&p, "acked"), 0);
}

#[test]
fn a_promoted_job_waits_from_its_promotion_and_so_does_the_oldest_pending_wait() {
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    let before = now_ms();
    let id = enqueue_minted(&mut con, "m", "later", &["DELAY", "1500"]);
    assert!(
        wait_until(Duration::from_secs(20), || row_field(
            &mut con, "m", &id, "state"
        )
        .as_deref()
            == Some("pending")),
        "promoted"
    );
    let ready: i64 = row_field(&mut con, "m", &id, "ready")
        .expect("the promotion's time")
        .parse()
        .expect("ms");
    assert!(
        ready >= before + 1500,
        "promoted at {ready}, due after {}",
        before + 1500
    );
    // The oldest wait counts from its promotion too, not from its id (1,500 ms before it).
    let before_read = now_ms();
    let m = metrics(&mut con, "m");
    let after_read = now_ms();
    let oldest = int(field(&m, "oldest-pending-ms"));
    assert!(
        (before_read - ready..=after_read - ready).contains(&oldest),
        "waited {oldest} ms, read {} to {} ms after its promotion",
        before_read - ready,
        after_read - ready
    );
    assert_eq!(int(field(&m, "enabled")), 1);
    let before_claim = now_ms();
    let jobs = claim(&mut con, "m", &[]).expect("the job");
    let after_claim = now_ms();
    assert_eq!(jobs[0].0, id);
    let m = metrics(&mut con, "m");
    let wait = map_pairs(field(&m, "wait"));
    assert_eq!(int(field(&wait, "count")), 1);
    // Counted from its promotion, not from its id: the delay is not in it.
    let waited = int(field(&wait, "sum-ms"));
    assert!(
        (before_claim - ready..=after_claim - ready).contains(&waited),
        "waited {waited} ms, claimed {} to {} ms after its promotion",
        before_claim - ready,
        after_claim - ready
    );
}

#[test]
fn with_metrics_off_nothing_is_counted() {
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    config_set(&mut con, "emq.metrics", "no");
    let id = enqueue_minted(&mut con, "m", "x", &[]);
    let jobs = claim(&mut con, "m", &[]).expect("the job");
    let _: Value = cmd("EMQ.ACK")
        .arg("m")
        .arg(&id)
        .arg(jobs[0].2)
        .query(&mut con)
        .expect("ack");
    let m = metrics(&mut con, "m");
    assert_eq!(int(field(&m, "enabled")), 0);
    assert_eq!(event(&m, "enqueued"), 0);
    assert_eq!(event(&m, "acked"), 0);
    assert_eq!(histogram(run(&m, "acked"), 1).0, 0);
    // On again: counted from then on.
    config_set(&mut con, "emq.metrics", "yes");
    enqueue_minted(&mut con, "m", "y", &[]);
    assert_eq!(event(&metrics(&mut con, "m"), "enqueued"), 1);
}

#[test]
fn reading_a_queue_s_metrics_needs_the_right_to_read_the_queue() {
    let server = Server::start(Options::default());
    let mut admin = server.conn3();
    enqueue_minted(&mut admin, "orders", "x", &[]);
    let mut other = user_with(&server, "other", &["~emq:{mail}:*", "+@all"]);
    let err = expect_err(&mut other, cmd("EMQ.METRICS").arg("orders"));
    assert!(err.starts_with("NOPERM"), "{err}");
    let mut reader = user_with(&server, "reader", &["%R~emq:{orders}:*", "+@all"]);
    let counted: Value = cmd("EMQ.METRICS")
        .arg("orders")
        .query(&mut reader)
        .expect("metrics");
    assert!(
        matches!(counted, Value::Array(_) | Value::Map(_)),
        "{counted:?}"
    );
}

#[test]
fn an_attempt_the_server_ends_at_its_deadline_is_timed_as_timed_out() {
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    enqueue_minted(&mut con, "m", "slow", &["TIMEOUT", "200"]);
    let jobs = claim(&mut con, "m", &[]).expect("the job");
    assert_eq!(jobs.len(), 1);
    // No renewal, no settle: the timer ends the attempt once its deadline passes.
    let ended = wait_until(Duration::from_secs(20), || {
        histogram(run(&metrics(&mut con, "m"), "timed-out"), 1).0 == 1
    });
    assert!(ended, "the attempt was timed out");
    let m = metrics(&mut con, "m");
    let (timed_out, within_100_ms) = histogram(run(&m, "timed-out"), 100);
    assert_eq!(
        (timed_out, within_100_ms),
        (1, 0),
        "it ran its 200 ms at least"
    );
    assert_eq!(
        histogram(run(&m, "failed"), 1).0,
        0,
        "counted once, as timed out"
    );
    assert_eq!(event(&m, "retrying"), 1);
}

#[test]
fn attempts_in_flight_are_forgotten_on_a_flush_and_the_queue_used_longest_ago_makes_room() {
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    for p in ["a", "b", "c"] {
        enqueue_minted(&mut con, "gone", p, &[]);
    }
    claim(&mut con, "gone", &["COUNT", "3"]).expect("jobs");
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_running"), 3);
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    assert_eq!(
        info_int(&mut con, "emq", "emq_metrics_running"),
        0,
        "flushed"
    );

    // A batch that empties `active` (and so the queue's sets) is timed whole.
    for p in ["a", "b", "c"] {
        enqueue_minted(&mut con, "batch", p, &[]);
    }
    let jobs = claim(&mut con, "batch", &["COUNT", "3"]).expect("jobs");
    let mut mack = cmd("EMQ.MACK");
    mack.arg("batch");
    for (id, _, token) in &jobs {
        mack.arg(id).arg(*token);
    }
    let _: Value = mack.query(&mut con).expect("mack");
    assert_eq!(histogram(run(&metrics(&mut con, "batch"), "acked"), 1).0, 3);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_running"), 0);

    // 10,000 queues counted; the next one takes the place of the one used longest ago.
    enqueue_in_queues(&mut con, 10_000);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_queues"), 10_000);
    enqueue_minted(&mut con, "newest", "x", &[]);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_queues"), 10_000);
    assert_eq!(event(&metrics(&mut con, "newest"), "enqueued"), 1);
}

#[test]
fn a_child_s_ack_that_makes_its_parent_s_queue_counted_keeps_its_own_queue_s_counts() {
    // The parent's queue lost its place in a full table; the child's queue is the one used
    // longest ago when its ack hands over: the parent's new entry takes another queue's place.
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    let parent = enqueue_minted(&mut con, "p", "parent", &["CHILDREN", "1"]);
    enqueue_minted(&mut con, "c", "kid", &["PARENT", "p", &parent]);
    let jobs = claim(&mut con, "c", &[]).expect("the kid");
    enqueue_in_queues(&mut con, 9_999);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_queues"), 10_000);
    assert_eq!(
        event(&metrics(&mut con, "p"), "waiting"),
        0,
        "p's place taken"
    );
    assert_eq!(event(&metrics(&mut con, "c"), "claimed"), 1);
    let _: Value = cmd("EMQ.ACK")
        .arg("c")
        .arg(&jobs[0].0)
        .arg(jobs[0].2)
        .query(&mut con)
        .expect("ack");
    let c = metrics(&mut con, "c");
    assert_eq!(event(&c, "claimed"), 1, "c kept its place");
    assert_eq!(event(&c, "acked"), 1);
    assert_eq!(
        histogram(run(&c, "acked"), 3_600_000).0,
        1,
        "its claim time kept"
    );
    assert_eq!(event(&metrics(&mut con, "p"), "released"), 1);
    assert_eq!(
        event(&metrics(&mut con, "q0"), "enqueued"),
        0,
        "q0 made room"
    );
}

#[test]
fn a_server_that_becomes_a_replica_drops_its_metrics() {
    let primary = Server::start(Options::default());
    let server = Server::start(Options::default());
    let mut con = server.conn3();
    enqueue_minted(&mut con, "m", "x", &[]);
    assert_eq!(info_int(&mut con, "emq", "emq_metrics_queues"), 1);
    let _: () = cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port)
        .query(&mut con)
        .expect("replicaof");
    let dropped = wait_until(Duration::from_secs(20), || {
        info_int(&mut con, "emq", "emq_metrics_queues") == 0
    });
    assert!(dropped, "a replica keeps no metrics");
    let m = metrics(&mut con, "m");
    assert_eq!(event(&m, "enqueued"), 0);
}
