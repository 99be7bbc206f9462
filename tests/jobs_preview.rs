//! `EMQ.JOBS ... PREVIEW <bytes>`: a page that shows each payload and error cut to its first
//! bytes, with their whole lengths, so a dashboard's page stays bounded however large the jobs.

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

fn preview(con: &mut Connection, q: &str, set: &str, bytes: &str) -> Vec<Vec<Value>> {
    let reply: Value = cmd("EMQ.JOBS")
        .arg(q)
        .arg(set)
        .arg("PREVIEW")
        .arg(bytes)
        .query(con)
        .expect("jobs");
    let Value::Array(parts) = reply else {
        panic!("a page: {reply:?}");
    };
    let Some(Value::Array(jobs)) = parts.get(1) else {
        panic!("a page's jobs: {parts:?}");
    };
    jobs.iter()
        .map(|j| match j {
            Value::Array(fields) => fields.clone(),
            other => panic!("a job: {other:?}"),
        })
        .collect()
}

fn bulk(v: &[u8]) -> Value {
    Value::BulkString(v.to_vec())
}

#[test]
fn a_preview_cuts_payloads_and_errors_and_gives_their_lengths() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let q = "preview";
    let big = vec![b'x'; 300_000];
    let _: i64 = cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(job_id(1))
        .arg(&big)
        .query(&mut con)
        .expect("enqueue");
    enqueue(&mut con, q, &job_id(2), "ab");
    let jobs = preview(&mut con, q, "pending", "16");
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        jobs[0][3..],
        [
            bulk(&big[..16]),
            Value::Nil,
            Value::Int(300_000),
            Value::Nil
        ],
        "the first 16 bytes, no error, the whole length"
    );
    assert_eq!(
        jobs[1][3..],
        [bulk(b"ab"), Value::Nil, Value::Int(2), Value::Nil],
        "a payload shorter than the preview whole"
    );

    // A dead job's error is cut the same way.
    let _: Value = cmd("EMQ.CLAIM").arg(q).query(&mut con).expect("claim");
    let _: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(job_id(1))
        .arg(1)
        .arg("ERROR")
        .arg("a long reason for the failure")
        .query(&mut con)
        .expect("fail");
    let dead = preview(&mut con, q, "dead", "6");
    assert_eq!(
        dead[0][3..],
        [
            bulk(b"xxxxxx"),
            bulk(b"a long"),
            Value::Int(300_000),
            Value::Int(29)
        ]
    );
}

#[test]
fn a_preview_outside_its_bounds_is_refused_and_the_last_of_two_shows_wins() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "bounds", &job_id(1), "payload");
    for bad in ["0", "65537", "x"] {
        let err = expect_err(
            &mut con,
            cmd("EMQ.JOBS")
                .arg("bounds")
                .arg("pending")
                .arg("PREVIEW")
                .arg(bad),
        );
        assert!(err.starts_with("ERR "), "PREVIEW {bad}: {err}");
    }
    let reply: Value = cmd("EMQ.JOBS")
        .arg("bounds")
        .arg("pending")
        .arg("PREVIEW")
        .arg(3)
        .arg("WITHPAYLOADS")
        .query(&mut con)
        .expect("jobs");
    let Value::Array(parts) = reply else {
        panic!("{reply:?}");
    };
    assert_eq!(
        parts[1],
        Value::Array(vec![Value::Array(vec![
            bulk(job_id(1).as_bytes()),
            Value::Int(0),
            Value::Int(0),
            bulk(b"payload"),
            Value::Nil,
        ])]),
        "WITHPAYLOADS after PREVIEW shows the whole payload"
    );
}
