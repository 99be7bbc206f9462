//! Headers (docs/observability.md): `HEADERS <n> <key> <value> ...` gives a job a small map
//! that `EMQ.JOB` and every claim of it return (plain, blocked, `EMQ.MACK ... CLAIM`, grouped),
//! through retries, requeues and flows. A job without headers keeps the reference row, and its
//! claim reply stays `[id, payload, token]`; headers write nothing but the job's row.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Value};
use support::flow::{enqueue_with, fail, parent, requeue};
use support::*;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn with_headers(con: &mut Connection, q: &str, id: &str, extra: &[&str]) -> i64 {
    let mut options = vec![
        "HEADERS",
        "2",
        "traceparent",
        TRACEPARENT,
        "tenant",
        "a:b c",
    ];
    options.extend_from_slice(extra);
    enqueue_with(con, q, id, "work", &options)
}

/// A claim's jobs as raw values: each `[id, payload, token]` or `[id, payload, token, headers]`.
fn claim_raw(con: &mut Connection, q: &str, count: usize) -> Vec<Vec<Value>> {
    let jobs: Value = cmd("EMQ.CLAIM")
        .arg(q)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .expect("claim");
    let Value::Array(jobs) = jobs else {
        panic!("jobs, got {jobs:?}")
    };
    jobs.into_iter()
        .map(|j| match j {
            Value::Array(fields) => fields,
            other => panic!("a job, got {other:?}"),
        })
        .collect()
}

/// A headers reply (a RESP2 flat array or a RESP3 map) as pairs, in order.
fn pairs(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), text(v))).collect(),
        Value::Array(a) => a.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).collect(),
        other => panic!("headers, got {other:?}"),
    }
}

fn expected() -> Vec<(String, String)> {
    vec![
        ("traceparent".into(), TRACEPARENT.into()),
        ("tenant".into(), "a:b c".into()),
    ]
}

/// The claimed job `id`'s headers, where the claim replied some.
fn claimed_headers(jobs: &[Vec<Value>], id: &str) -> Option<Vec<(String, String)>> {
    let job = jobs.iter().find(|j| text(&j[0]) == id).expect("claimed");
    job.get(3).map(pairs)
}

fn job_headers(con: &mut Connection, q: &str, id: &str) -> Option<Vec<(String, String)>> {
    let job: Value = cmd("EMQ.JOB").arg(q).arg(id).query(con).expect("job");
    let fields = match &job {
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| (text(k), v.clone()))
            .collect::<Vec<_>>(),
        Value::Array(a) => a.chunks(2).map(|p| (text(&p[0]), p[1].clone())).collect(),
        other => panic!("a job, got {other:?}"),
    };
    fields
        .iter()
        .find(|(k, _)| k == "headers")
        .map(|(_, v)| pairs(v))
}

#[test]
fn a_claim_hands_out_the_headers_and_a_plain_job_stays_as_it_was() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("headers");
    let (a, b) = (job_id(1), job_id(2));
    assert_eq!(with_headers(&mut con, &q, &a, &[]), 1);
    assert_eq!(enqueue(&mut con, &q, &b, "plain"), 1);
    assert_eq!(
        row_field(&mut con, &q, &a, "headers").as_deref(),
        Some(format!("traceparent:{TRACEPARENT}\ntenant:a:b c").as_str())
    );
    // The plain job's row is the reference's three fields, though its queue now has headers.
    let fields: Vec<String> = cmd("HKEYS")
        .arg(row_key(&q, &b))
        .query(&mut con)
        .expect("HKEYS");
    assert_eq!(fields, ["state", "attempts", "payload"]);
    assert_eq!(job_headers(&mut con, &q, &a), Some(expected()));
    assert_eq!(job_headers(&mut con, &q, &b), None);

    let jobs = claim_raw(&mut con, &q, 2);
    assert_eq!(jobs.len(), 2);
    assert_eq!(claimed_headers(&jobs, &a), Some(expected()));
    let plain = jobs.iter().find(|j| text(&j[0]) == b).expect("claimed");
    assert_eq!(plain.len(), 3, "no fourth element without headers");
    let mut keys = keys_of(&mut con, &q);
    keys.sort();
    assert_eq!(
        keys,
        [set_key(&q, "active"), row_key(&q, &a), row_key(&q, &b)],
        "no key of the queue's beyond its sets and rows"
    );
}

#[test]
fn a_blocked_claim_a_batched_settle_s_claim_and_a_group_s_claim_hand_them_out() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("headers-ways");
    let (a, b, c) = (job_id(1), job_id(2), job_id(3));
    let waiting = blocked_claim(&mut con, server.conn(), &q, 10_000);
    with_headers(&mut con, &q, &a, &[]);
    let Ok(Value::Array(jobs)) = waiting.join().expect("the claim's thread") else {
        panic!("a blocked claim's jobs")
    };
    let Value::Array(job) = &jobs[0] else {
        panic!("a job")
    };
    assert_eq!(pairs(&job[3]), expected(), "the blocked claim's");
    let Value::Int(token) = job[2] else {
        panic!("a token")
    };
    with_headers(&mut con, &q, &b, &[]);
    let reply = mack(
        &mut con,
        &q,
        &[a.clone(), token.to_string(), "CLAIM".into(), "1".into()],
    )
    .expect("mack");
    let Value::Array(parts) = reply else {
        panic!("[places, jobs]")
    };
    let Value::Array(next) = &parts[1] else {
        panic!("jobs")
    };
    let Value::Array(job) = &next[0] else {
        panic!("a job")
    };
    assert_eq!((text(&job[0]), pairs(&job[3])), (b.clone(), expected()));
    with_headers(&mut con, &q, &c, &["GROUP", "acme"]);
    let jobs = claim_raw(&mut con, &q, 1);
    assert_eq!(claimed_headers(&jobs, &c), Some(expected()), "a group's");
}

#[test]
fn under_resp3_the_headers_are_a_map() {
    let server = Server::start_or_external();
    let mut con = server.conn3();
    let q = unique_queue("headers3");
    let a = job_id(1);
    with_headers(&mut con, &q, &a, &[]);
    let jobs = claim_raw(&mut con, &q, 1);
    assert!(matches!(jobs[0][3], Value::Map(_)), "{:?}", jobs[0][3]);
    assert_eq!(claimed_headers(&jobs, &a), Some(expected()));
    assert_eq!(job_headers(&mut con, &q, &a), Some(expected()));
}

#[test]
fn headers_survive_a_retry_and_a_requeue() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "2")
            .arg("emq.backoff-base-ms", "100"),
    );
    let mut con = server.conn();
    let q = unique_queue("headers-retry");
    let a = job_id(1);
    with_headers(&mut con, &q, &a, &[]);
    for attempt in 1..=2 {
        let mut jobs = Vec::new();
        let came = wait_until(Duration::from_secs(10), || {
            jobs = claim_raw(&mut con, &q, 1);
            !jobs.is_empty()
        });
        assert!(came, "attempt {attempt} was not claimed");
        assert_eq!(claimed_headers(&jobs, &a), Some(expected()), "{attempt}");
        let token = match jobs[0][2] {
            Value::Int(t) => t,
            ref other => panic!("a token, got {other:?}"),
        };
        fail(&mut con, &q, &a, token, "boom");
    }
    assert_eq!(job_state(&mut con, &q, &a).as_deref(), Some("dead"));
    assert_eq!(requeue(&mut con, &q, &a), 1);
    let jobs = claim_raw(&mut con, &q, 1);
    assert_eq!(claimed_headers(&jobs, &a), Some(expected()), "requeued");
}

#[test]
fn a_batch_gives_each_job_its_own_headers() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("headers-batch");
    let (a, b, c) = (job_id(1), job_id(2), job_id(3));
    let added: Vec<i64> = cmd("EMQ.MENQUEUE")
        .arg(&q)
        .arg(&["PRIORITY", "1", "HEADERS", "1", "k", "first", &a, "a"])
        .arg(&[&b, "b"])
        .arg(&["HEADERS", "1", "k", "third", &c, "c"])
        .query(&mut con)
        .expect("menqueue");
    assert_eq!(added, [1, 1, 1]);
    let jobs = claim_raw(&mut con, &q, 3);
    let one = |v: &str| Some(vec![("k".to_string(), v.to_string())]);
    assert_eq!(claimed_headers(&jobs, &a), one("first"));
    assert_eq!(claimed_headers(&jobs, &b), None);
    assert_eq!(claimed_headers(&jobs, &c), one("third"));
    assert_eq!(text(&jobs[2][0]), a, "the lowest priority comes last");
}

#[test]
fn a_child_of_a_flow_carries_its_headers() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let (pq, cq) = (
        unique_queue("headers-parent"),
        unique_queue("headers-child"),
    );
    let (p, c) = (job_id(1), job_id(2));
    parent(&mut con, &pq, &p, 1);
    assert_eq!(with_headers(&mut con, &cq, &c, &["PARENT", &pq, &p]), 1);
    let jobs = claim_raw(&mut con, &cq, 1);
    assert_eq!(claimed_headers(&jobs, &c), Some(expected()));
}

#[test]
fn a_job_with_every_option_that_writes_its_row_keeps_them_all() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let (pq, q) = (unique_queue("headers-top"), unique_queue("headers-all"));
    let (p, id) = (job_id(1), job_id(2));
    parent(&mut con, &pq, &p, 1);
    let options = [
        "PRIORITY", "3", "UNIQUE", "k", "TIMEOUT", "5000", "GROUP", "g", "CHILDREN", "1", "PARENT",
        &pq, &p,
    ];
    assert_eq!(with_headers(&mut con, &q, &id, &options), 1);
    let mut fields: Vec<String> = cmd("HKEYS")
        .arg(row_key(&q, &id))
        .query(&mut con)
        .expect("hkeys");
    fields.sort();
    let mut all = [
        "state", "attempts", "payload", "priority", "unique", "children", "adopted", "finished",
        "parents", "timeout", "group", "headers",
    ];
    all.sort();
    assert_eq!(fields, all);
    assert_eq!(job_headers(&mut con, &q, &id), Some(expected()));
}

#[test]
fn bad_headers_are_refused_and_nothing_is_written() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("headers-bad");
    let id = job_id(1);
    let mut base = cmd("EMQ.ENQUEUE");
    base.arg(&q).arg(&id).arg("work");
    let long = "v".repeat(8193);
    assert_refused(
        &mut con,
        &base,
        &[
            (&["HEADERS", "0"], "ERR HEADERS must be"),
            (&["HEADERS", "33"], "ERR HEADERS must be"),
            (&["HEADERS", "2", "k", "v"], "ERR syntax error"),
            (
                &["HEADERS", "1", "a:b", "v"],
                "ERR syntax error: a header key",
            ),
            (
                &["HEADERS", "1", "k", "x\ny"],
                "ERR syntax error: a header value",
            ),
            (
                &["HEADERS", "1", "k", &long],
                "ERR syntax error: a header value",
            ),
            (
                &["HEADERS", "2", "k", "1", "k", "2"],
                "ERR syntax error: a header key is named twice",
            ),
            (
                &["HEADERS", "1", "k", "v", "HEADERS", "1", "j", "w"],
                "ERR syntax error: expected",
            ),
        ],
    );
    let mut batch = cmd("EMQ.MENQUEUE");
    batch.arg(&q).arg(&[&job_id(2), "ok"]);
    assert_refused(
        &mut con,
        &batch,
        &[(&["HEADERS", "1", "k", "x\ry", &id, "w"], "ERR syntax")],
    );
    assert_eq!(
        keys_of(&mut con, &q),
        Vec::<String>::new(),
        "nothing written"
    );
}

#[test]
fn a_replica_holds_the_same_headers() {
    let (primary, replica) = primary_and_replica(Options::default());
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let q = unique_queue("headers-replica");
    let a = job_id(1);
    with_headers(&mut p, &q, &a, &[]);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(job_headers(&mut r, &q, &a), Some(expected()));
}
